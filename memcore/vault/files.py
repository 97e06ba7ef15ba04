"""Which files in a vault are memory, their vault-relative POSIX paths, reading and hashing."""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import stat
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path

from memcore.core.errors import VaultError, VaultWriteError
from memcore.core.models import DiskFile

# Folders that never hold memory and are expensive to walk or watch.
SKIP_DIRS = frozenset({"node_modules", "__pycache__", "venv", "site-packages", "dist", "build"})
# Editor droppings: swap, backup and temp files (vim's 4913 probe file included).
_TEMP_RE = re.compile(r"(^\.|~$|\.sw[a-p]$|\.tmp$|\.bak$|\.orig$|^4913$|^#.*#$|\.crdownload$)")


@lru_cache(maxsize=64)
def _glob_regex(pattern: str) -> re.Pattern[str]:
    """Translate a POSIX glob with ``**`` (any number of folders) into a regex."""
    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out) + r"\Z")


def matches(path: str, patterns: Iterable[str]) -> bool:
    return any(_glob_regex(p).match(path) for p in patterns)


def is_temp_name(name: str) -> bool:
    return bool(_TEMP_RE.search(name))


def is_memory_path(path: str, include: Iterable[str], exclude: Iterable[str]) -> bool:
    """True if a vault-relative POSIX path names a memory file (by name only, no I/O)."""
    parts = path.split("/")
    if any(p.startswith(".") or p in SKIP_DIRS for p in parts[:-1]):
        return False
    if is_temp_name(parts[-1]) or not parts[-1].endswith(".md"):
        return False
    return matches(path, include) and not matches(path, exclude)


def could_hold_memory(dir_path: str, include: Iterable[str]) -> bool:
    """True if some include pattern can match a file below this vault-relative folder."""
    if dir_path in ("", "."):
        return True
    parts = dir_path.split("/")
    if any(p.startswith(".") or p in SKIP_DIRS for p in parts):
        return False
    for pattern in include:
        pparts = pattern.split("/")[:-1]  # the folder part of the pattern
        for i, d in enumerate(parts):
            if i >= len(pparts):
                break
            if pparts[i] == "**":
                return True
            if not _glob_regex(pparts[i]).match(d):
                break
        else:
            if len(parts) <= len(pparts) or "**" in pparts:
                return True
    return False


def relative_path(root: Path, path: Path) -> str:
    """Vault-relative POSIX path; raises VaultError for a path outside the vault."""
    try:
        return path.absolute().relative_to(root.absolute()).as_posix()
    except ValueError as exc:
        raise VaultError(f"{path} is outside the vault {root}") from exc


def scan_vault(
    root: Path, include: Iterable[str], exclude: Iterable[str], follow_links: bool = False
) -> list[DiskFile]:
    """Every memory file in the vault, sorted by path. Links that lead out of the vault (a
    file's, or a folder's on its way) are followed only with ``follow_links``."""
    if not root.is_dir():
        raise VaultError(f"vault folder {root} does not exist")
    include, exclude = tuple(include), tuple(exclude)
    return sorted(_walk(root, include, exclude, follow_links), key=lambda f: f.path)


def _existing(root: Path, path: Path) -> Path:
    """``path``, or the nearest folder above it that exists (``root`` at the highest)."""
    while not path.exists() and path != root and path.parent != path:
        path = path.parent
    return path


def leads_out(root: Path, rel: str) -> bool:
    """Whether ``root / rel`` ends up outside the vault once links are resolved (for a path
    that does not exist yet: its nearest existing folder)."""
    return _outside(root, _existing(root, root / rel))


def check_writable(root: Path, rel: str) -> Path:
    """The full path of a vault file memcore is about to write; VaultError if a symbolic link
    would take the write out of the vault, VaultWriteError if the vault is read-only there."""
    full = root / rel
    near = _existing(root, full)  # the file, or the nearest folder above it that exists
    if _outside(root, near):
        raise VaultError(
            f"{rel} leads out of the vault through a symbolic link; memcore writes only "
            "inside the vault"
        )
    there = near == full
    if not os.access(full.parent if there else near, os.W_OK) or (
        there and not os.access(full, os.W_OK)
    ):
        raise VaultWriteError(f"the vault is read-only: cannot write {rel}; nothing was written")
    return full


def _outside(root: Path, path: Path) -> bool:
    """Whether the existing ``path``, its links resolved, is outside ``root``'s."""
    real, base = _resolved(path), _resolved(root)
    return real != base and not real.startswith(base.rstrip("/") + "/")


def _resolved(path: Path) -> str:
    """``path`` with every link resolved, by the kernel's own walk where Linux shows it (an
    open and a readlink: a batch checks 10,000 paths, and resolving one a part at a time in
    Python took a tenth of each page write)."""
    if _O_PATH:
        with contextlib.suppress(OSError):
            fd = os.open(path, _O_PATH | os.O_CLOEXEC)
            try:
                found = os.readlink(f"/proc/self/fd/{fd}")
            finally:
                os.close(fd)
            if found.startswith("/"):
                return found
    return str(path.resolve())


_O_PATH = getattr(os, "O_PATH", 0)  # Linux; elsewhere Path.resolve does the walk


def append_text(text: str, block: str) -> str:
    """``block`` after a file's text and a blank line (the whole file when it was empty)."""
    return (text.rstrip("\n") + "\n\n" if text else "") + block + "\n"


def _disk_file(root: Path, rel: str, follow_links: bool = False) -> DiskFile | None:
    """Stat one vault file; None if it is gone, not a file, or (unless ``follow_links``) a
    link out of the vault."""
    full = root / rel
    try:
        if not follow_links and leads_out(root, rel):
            return None
        st = full.stat()
    except OSError:
        return None  # vanished between listing and stat
    return DiskFile(rel, st.st_size, st.st_mtime_ns) if stat.S_ISREG(st.st_mode) else None


def stat_memory_files(
    root: Path,
    paths: Iterable[str],
    include: Iterable[str],
    exclude: Iterable[str],
    follow_links: bool = False,
) -> list[DiskFile]:
    """The named vault-relative paths that are memory files on disk now (for watch events)."""
    include, exclude = tuple(include), tuple(exclude)
    found = (
        _disk_file(root, p, follow_links) for p in paths if is_memory_path(p, include, exclude)
    )
    return [f for f in found if f is not None]


def _walk(
    root: Path, include: tuple[str, ...], exclude: tuple[str, ...], follow_links: bool
) -> Iterator[DiskFile]:
    seen: set[str] = set()  # real folders walked: links in a circle are walked once
    for dirpath, dirnames, filenames in os.walk(root, followlinks=follow_links):
        real = os.path.realpath(dirpath)
        if real in seen:
            dirnames[:] = []
            continue
        seen.add(real)
        rel_dir = Path(dirpath).relative_to(root).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        dirnames[:] = [
            d
            for d in dirnames
            if could_hold_memory(f"{rel_dir}/{d}".lstrip("/"), include)
            and not os.path.isfile(os.path.join(dirpath, d, "pyvenv.cfg"))
        ]
        for name in filenames:
            rel = f"{rel_dir}/{name}".lstrip("/")
            if not is_memory_path(rel, include, exclude):
                continue
            found = _disk_file(root, rel, follow_links)
            if found is not None:
                yield found


def content_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:32]


def text_hash(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]


def read_memory_file(root: Path, path: str, max_bytes: int) -> tuple[str, bytes]:
    """Read and decode one memory file. Raises VaultError with a one-line reason."""
    full = root / path
    try:
        size = full.stat().st_size
        if size > max_bytes:
            raise VaultError(
                f"file is {size / 1e6:.1f} MB, over index.max_file_bytes ({max_bytes / 1e6:.1f} MB)"
            )
        data = full.read_bytes()
    except FileNotFoundError as exc:
        raise VaultError("file disappeared before it could be read") from exc
    except OSError as exc:
        raise VaultError(f"cannot read: {exc.strerror}") from exc
    if b"\x00" in data[:8192]:
        raise VaultError("binary file (contains NUL bytes), not Markdown")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise VaultError(f"invalid UTF-8 at byte {exc.start}") from exc
    text = text.removeprefix("\ufeff").replace("\r\n", "\n").replace("\r", "\n")
    return text, data
