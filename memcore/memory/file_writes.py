"""FileWrites: one memory file's read-change-replace, its history events, and taking it back.

A change reads the file, edits only the lines of the memories it touches and replaces the file
atomically (temp file + rename) only if nobody changed it since it was read; otherwise it reads
again and applies the change again (a person's edit is never overwritten). Writers of a file
take turns in this process and, through the store, on every node sharing the index. A write
the index then refuses is put back, Markdown and history, unless a person changed the file
since.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TypeVar, cast

from memcore.core.channel import via
from memcore.core.errors import (
    InputError,
    MemcoreError,
    NotFound,
    StorageBusy,
    StorageError,
    StorageFull,
    VaultError,
    VaultWriteError,
    WriteConflict,
)
from memcore.core.lru import LRU
from memcore.core.models import FileFailure
from memcore.core.path_locks import PathLocks
from memcore.index.indexer import Indexer
from memcore.storage.base import Store
from memcore.vault.chunker import memory_file_of
from memcore.vault.files import check_writable
from memcore.vault.history import Appended, Event, HistoryEvent, HistoryLog, now
from memcore.vault.memory_format import MemoryFile, Scope, edit_lines, new_memory_file, render_item
from memcore.vault.safe_file import (
    Identity,
    Undo,
    decode,
    identity,
    read_or_none,
    replace_if_unchanged,
    restore_if_unchanged,
)

T = TypeVar("T")
WRITE_ATTEMPTS = 20
# files whose text memcore wrote last, remembered (by its Identity) as having every item's id
# written in it: an append to one needs no parse of the items already there
RECORDED_FILES = 65_536


@dataclass(slots=True)
class FileEdit:
    """What one write does to a file: items to replace (empty list = delete), lines to append,
    and the history events it makes."""

    replace: dict[str, list[str]] = field(default_factory=dict)
    append: list[list[str]] = field(default_factory=list)
    events: list[HistoryEvent] = field(default_factory=list)
    ids: list[str] = field(default_factory=list)


Change = Callable[[MemoryFile], FileEdit]


@dataclass(frozen=True, slots=True)
class Written:
    """One write applied to a memory file, with what it takes to undo it."""

    rel: str
    undo: Undo  # how to take it back (safe_file.Undo: small, not the file's text twice)
    ids: list[str]
    logged: Appended | None
    events: tuple[HistoryEvent, ...] = ()  # what it did, to log (see MemoryWriter._write)


class FileWrites:
    """Changes to the vault's memory files, each indexed before it counts (``commit``)."""

    def __init__(self, vault: Path, store: Store, indexer: Indexer, history: HistoryLog) -> None:
        self.vault = vault
        self.store = store
        self.indexer = indexer
        self.history = history
        self.locks = PathLocks()  # this process's writers of one file take turns
        self._recorded: LRU[str, Identity] = LRU(RECORDED_FILES)  # used on the event loop only

    async def write(
        self,
        rel: str,
        scope: Scope | None,
        category: str | None,
        change: Change,
        log: bool = True,
        again: bool = False,
        held: bool = False,
    ) -> Written:
        """Apply ``change`` to a memory file and replace it atomically, re-reading and retrying
        while someone else changes it, then log its events (unless ``log`` is False: then
        the caller logs ``Written.events``). ``again``: the change puts back what an editor's
        stale save dropped, so events already logged as they are are not logged twice.
        ``held``: the caller holds the file against other nodes already (``Store.holding``).
        Nothing is changed when it raises (a full disk is a VaultWriteError)."""
        limit = self.indexer.settings.index.max_file_bytes
        # this process's writers of the file take turns, then every node's (the database's
        # lock: on shared storage a file lock is not to be trusted)
        nodes = contextlib.nullcontext() if held else self.store.holding([rel])
        async with self.locks.hold([rel]), nodes:
            recorded = self._recorded.get(rel)
            edit, before, after = await _until_it_lands(
                rel,
                partial(
                    _apply, self.vault, rel, scope, category, change, limit, self.history,
                    recorded,
                ),
            )  # fmt: skip
            written = Written(rel, Undo.of(before, after), edit.ids, None, tuple(edit.events))
            self._recorded.put(rel, written.undo.left)  # every item's id is in it now
            if not log:
                return written
            try:
                logged = await self.history.append(edit.events, unlogged=again)
            except OSError as exc:
                await self.undo([written])
                raise VaultWriteError(
                    f"cannot write {self.history.path.name}: {exc.strerror or exc}"
                ) from exc
            return dataclasses.replace(written, logged=logged)

    async def commit(self, writes: Sequence[Written]) -> None:
        """Index what ``writes`` changed. If the index cannot take it, undo the writes (the
        Markdown and the history as they were) and raise why: nothing was applied."""
        rels = [w.rel for w in writes]
        try:  # with history: a person's edit the write carried along is logged as theirs
            report = await self.indexer.index(rels, count_pending=False)
        except StorageError as exc:  # e.g. the embedding cache's write found the index busy
            failure = FileFailure(rels[0], str(exc), True, isinstance(exc, StorageBusy))
            raise _refusal(failure, await self.undo(writes)) from exc
        failed = [f for f in report.failed if f.path in rels]
        if failed:
            raise _refusal(failed[0], await self.undo(writes))

    async def undo(self, writes: Sequence[Written]) -> list[str]:
        """Put files back as they were before ``writes`` and take their events back; then
        index them again, where the index took part of it. Returns the files that a person
        changed since, which are left as they are."""
        kept = []
        for w in reversed(writes):
            self.history.unexpect(w.events)  # not to be logged now, by anyone but a person
            target = self.vault / w.rel
            try:
                restored = await asyncio.to_thread(restore_if_unchanged, target, w.undo)
            except OSError:
                restored = False
            if not restored:
                kept.append(w.rel)
                continue
            await self.history.retract(w.logged)
        with contextlib.suppress(MemcoreError):  # the index follows the files; else the daemon
            await self.indexer.index([w.rel for w in writes], history=False)
        return kept

    async def transform(
        self, rel: str, transform: Callable[[str], str | None]
    ) -> tuple[bytes | None, bytes | None]:
        """Change a file by ``transform`` (its text -> the new text, or None), applied again to
        whatever a concurrent writer left: its bytes before and after (after None: nothing to
        change)."""
        target = check_writable(self.vault, rel)
        async with self.locks.hold([rel]), self.store.holding([rel]):
            return await _until_it_lands(rel, partial(_transform, target, rel, transform))


async def _until_it_lands(rel: str, attempt: Callable[[], T | None]) -> T:
    """Run a blocking read-change-replace ``attempt`` in a worker thread until it is not None
    (None: the file changed under it, so read again); a full disk is a VaultWriteError."""
    for _ in range(WRITE_ATTEMPTS):
        try:
            done = await asyncio.to_thread(attempt)
        except OSError as exc:
            raise VaultWriteError(f"cannot write {rel}: {exc.strerror or exc}") from exc
        if done is not None:
            return done
        await asyncio.sleep(0.005 + secrets.randbelow(20) / 1000)  # let the other edit land
    raise WriteConflict(f"{rel} kept changing while memcore tried to write it; try again")


def _refusal(failure: FileFailure, kept: Sequence[str]) -> MemcoreError:
    """The error a write refused by the index raises: busy, broken index, or a file the index
    will not take; and whether the Markdown could be put back."""
    after = (
        f"; {', '.join(kept)} changed meanwhile and keeps its new text"
        if kept
        else "; nothing was written"
    )
    message = f"{failure.path} could not be indexed: {failure.reason}{after}"
    if failure.full:
        return StorageFull(message)
    if failure.busy:
        return StorageBusy(message)
    if failure.transient:
        return StorageError(message)
    return VaultError(message)


def _apply(
    vault: Path,
    rel: str,
    scope: Scope | None,
    category: str | None,
    change: Change,
    limit: int,
    history: HistoryLog,
    recorded: Identity | None = None,
) -> tuple[FileEdit, bytes | None, bytes] | None:
    """Read, parse, change and replace a memory file (blocking: run in a worker thread):
    the edit, and the file's bytes before and after. None when the file changed under us and
    the write must be tried again. ``history`` expects the edit's events before the file is
    replaced, so an indexer reading the new file does not log them as a person's. (The
    file's path is checked here, off the event loop: a batch writes thousands.)
    ``recorded``: the identity of a text of this file known to have every item's id written
    in it (the last one this process wrote); when the file still holds it, the items are not
    parsed for an append."""
    target = check_writable(vault, rel)
    before = read_or_none(target)
    if before is None and scope is None:
        raise NotFound(f"{rel} is gone (deleted by hand?)")
    text = (
        decode(before, rel)
        if before is not None
        else new_memory_file(scope or Scope(), category or "core")
    )
    parsed = memory_file_of(rel, text)
    if parsed is None:
        raise VaultError(f"{rel} exists and is not a memory file; memcore leaves it")
    if before is None or (recorded is not None and identity(before) == recorded):
        parsed.recorded = True  # a fact about this text: the parse may be shared (cached)
    edit = change(parsed)
    _record_unrecorded(parsed, edit)
    items = parsed.items if edit.replace else ()  # only a replaced item's lines are looked up
    new_text = edit_lines(parsed.lines, edit.replace, items, edit.append)
    after = new_text.encode("utf-8")
    if len(after) > limit and len(after) > len(before or b""):
        raise InputError(
            f"{rel} would grow to {len(after) / 1e6:.1f} MB, over index.max_file_bytes "
            f"({limit / 1e6:.1f} MB); nothing was written"
        )
    if after == before:  # nothing to change: the file stays as it is, untouched
        return edit, before, after
    history.expect(edit.events)
    if replace_if_unchanged(target, new_text, before):
        return edit, before, after
    history.unexpect(edit.events)
    return None


def _transform(
    target: Path, rel: str, transform: Callable[[str], str | None]
) -> tuple[bytes | None, bytes | None] | None:
    """Read, transform and replace a file (blocking): its bytes before and after (after None:
    nothing to change), or None when it changed under us and must be tried again."""
    before = read_or_none(target)
    text = decode(before, rel) if before is not None else ""
    new = transform(text)
    if new is None or new == text:
        return before, None
    return (before, new.encode("utf-8")) if replace_if_unchanged(target, new, before) else None


def _record_unrecorded(parsed: MemoryFile, edit: FileEdit) -> None:
    """Items added by hand get their (derived) id written down now that the file is rewritten."""
    stamp = now()
    for item in parsed.unrecorded():
        if item.id not in edit.replace:
            edit.replace[item.id] = render_item(
                dataclasses.replace(item, created=item.created or stamp, updated=stamp)
            )


def api_event(
    mid: str,
    kind: str,
    old: str | None,
    new: str | None,
    path: str,
    request: str | None = None,
    at: str | None = None,
) -> HistoryEvent:
    """A history event made through the API now, or ``at`` (ADD, UPDATE, DELETE, ARCHIVE,
    RESTORE)."""
    event = cast(Event, kind)  # one of them, as the callers name it
    return HistoryEvent(mid, event, old, new, "api", at or now(), path, request, via=via())
