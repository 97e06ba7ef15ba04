"""Replacing a file only if nobody changed it since it was read: the one way memcore writes a
person's Markdown. The new text goes to a temp file that is fsynced and renamed over the old one,
after checking, under an flock other memcore processes share, that the file still holds what was
read; where Linux offers renameat2, the swap itself is checked too, so a person's save landing
between the check and the rename is put back instead of overwritten."""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import itertools
import os
import secrets
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, cast

from memcore.core.errors import VaultError


def decode(data: bytes, rel: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise VaultError(f"{rel} is not valid UTF-8 (byte {exc.start}); fix it by hand") from None


def read_or_none(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


_TOKEN = secrets.token_hex(4)  # this process's temp files: its pid, this, and a count
_TEMPS = itertools.count()


def replace_if_unchanged(path: Path, text: str, expected: bytes | None) -> bool:
    """Write ``text`` to a temp file and rename it over ``path``, unless ``path`` no longer
    holds ``expected`` (None: must not exist). False when someone changed it meanwhile."""
    tmp = path.with_name(f".{path.name}.memcore-{os.getpid():x}{_TOKEN}{next(_TEMPS):x}")
    try:
        try:
            fh = tmp.open("wb")
        except FileNotFoundError:  # a new folder (not made on every write: a batch makes 10k)
            path.parent.mkdir(parents=True, exist_ok=True)
            fh = tmp.open("wb")
        with fh:
            fh.write(text.encode("utf-8"))
            fh.flush()
            os.fsync(fh.fileno())
        with contextlib.suppress(FileNotFoundError):  # keep the file's permissions
            os.chmod(tmp, stat.S_IMODE(os.stat(path).st_mode))
        if expected is None:
            try:
                os.link(tmp, path)  # create only if absent, atomically
            except FileExistsError:
                return False
            return True
        with _locked(path, "rb") as current:
            # Another memcore process checks and replaces under the same lock; a person's save
            # is caught by the check, or, landing between check and rename, by the exchange.
            if current is None or current.read() != expected:
                return False
            if not _exchange(tmp, path):  # no renameat2 here: the check is all we have,
                if read_or_none(path) != expected:  # so of the path too (a save since open?)
                    return False
                os.replace(tmp, path)
                return True
            if read_or_none(tmp) == expected:
                return True  # what we replaced is what we read
            _exchange(tmp, path)  # a save landed in between: put it back, try again
            return False
    finally:
        tmp.unlink(missing_ok=True)


def _truncate_if_unchanged(path: Path, size: int, expected: Identity) -> bool:
    """Cut ``path`` back to its first ``size`` bytes if it holds what ``expected`` identifies.
    A person's save replaces the file (a new inode): the check sees it, and after the check the
    cut only reaches the file memcore wrote."""
    with _locked(path, "r+b") as current:
        if current is None or identity(current.read()) != expected:
            return False
        current.truncate(size)
        current.flush()
        os.fsync(current.fileno())
    return True


@contextlib.contextmanager
def _locked(path: Path, mode: str) -> Iterator[BinaryIO | None]:
    """``path`` open and locked as every memcore writer locks it (None: there is none)."""
    try:
        current = path.open(mode)
    except FileNotFoundError:
        yield None
        return
    with current:
        fcntl.flock(current, fcntl.LOCK_EX)
        yield cast(BinaryIO, current)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100
_renameat2: Any
try:
    _renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
except (AttributeError, OSError):
    _renameat2 = None


def _exchange(a: Path, b: Path) -> bool:
    """Swap two paths atomically (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    if _renameat2 is None:
        return False
    res = _renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if res == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):
        return False  # a file system without exchange
    raise OSError(err, os.strerror(err), str(b))


Identity = tuple[int, bytes]  # a file's size and digest: what it holds, without holding it


def identity(data: bytes) -> Identity:
    return len(data), hashlib.blake2b(data, digest_size=16).digest()


@dataclass(frozen=True, slots=True)
class Undo:
    """What it takes to undo a write, kept small: an append (most writes) keeps how many bytes
    the file held and the identity of what the write left, not both texts. A batch over 10,000
    users' pages of a hundred memories each would otherwise hold ~1 GB of Markdown twice until
    its index run ends. Only a write that changed lines in place keeps the texts."""

    changed: bool  # the write changed the file (or created it)
    left: Identity  # what the write left
    kept: int | None = None  # an append: how many bytes it held before (still its first ones)
    before: bytes | None = None  # otherwise: what it held; with ``kept``, None: it was created
    after: bytes | None = None  # ... and what the write left, for the swap that puts it back

    @classmethod
    def of(cls, before: bytes | None, after: bytes) -> Undo:
        if before is None:
            return cls(True, identity(after))
        if after.startswith(before):
            return cls(after != before, identity(after), kept=len(before))
        return cls(True, identity(after), before=before, after=after)


def restore_if_unchanged(path: Path, undo: Undo) -> bool:
    """Undo a write: put back what the file held (or remove a file it created) if ``path``
    still holds what the write left. False when someone changed it since. A write that only
    appended is cut back in place: that needs no free space, so an add is undone even on the
    full disk that made the index refuse it."""
    if undo.kept is not None:
        return _truncate_if_unchanged(path, undo.kept, undo.left)
    if undo.before is not None:
        return replace_if_unchanged(path, undo.before.decode("utf-8"), undo.after)
    with _locked(path, "rb") as current:
        if current is None:
            return True
        if identity(current.read()) != undo.left:
            return False
        path.unlink(missing_ok=True)
        return True
