"""The memory history: every ADD, UPDATE, DELETE, ARCHIVE and RESTORE, in the vault as JSON lines.

It lives at ``memory/history.jsonl`` (not Markdown, so never indexed) and travels with the vault
in git, so ``reindex`` keeps it. Events written through the API say ``"actor": "api"``; changes
a person made by editing a memory file, noticed when the file is indexed, say ``"person"``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import errno
import fcntl
import hashlib
import json
import os
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from memcore.core.lines import split_lines
from memcore.core.models import MemoryRecord
from memcore.vault.files import check_writable

HISTORY_PATH = "memory/history.jsonl"
# PENDING: a keyed add about to be written (write-ahead): a retry after a crash at any point
# of the write finds what it meant to add, and where. It is never shown as a memory's history.
Event = Literal["ADD", "UPDATE", "DELETE", "ARCHIVE", "RESTORE", "PENDING"]
Actor = Literal["api", "person"]


@dataclass(frozen=True, slots=True)
class HistoryEvent:
    memory_id: str
    event: Event
    old: str | None
    new: str | None
    actor: Actor
    at: str
    path: str
    request: str | None = None  # the idempotency key of the API call that made it
    undo: bool = False  # taking back an earlier event of a write that failed
    record: Mapping[str, object] | None = None  # a deleted memory's fields, for `restore`
    first: bool = False  # the first PENDING event of an attempt
    via: str | None = None  # the front an API change came through (core/channel.py)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "memory_id": self.memory_id,
            "event": self.event,
            "old_memory": self.old,
            "new_memory": self.new,
            "actor": self.actor,
            "created_at": self.at,
            "path": self.path,
        }
        if self.request is not None:  # "key\nfingerprint" in a write: two fields in the log
            key, fingerprint = self.request, ""
            if "\n" in key:  # the fingerprint, hex, has none: the last one splits the two
                key, _, fingerprint = key.rpartition("\n")
            out["request"] = key
            if fingerprint:
                out["fingerprint"] = fingerprint
        if self.undo:
            out["undo"] = True
        if self.record is not None:
            out["memory"] = dict(self.record)
        if self.first:
            out["first"] = True
        if self.via is not None:
            out["via"] = self.via
        return out


@dataclass(frozen=True, slots=True)
class ByRequest:
    """What the history knows of an idempotency key: ``logged``, the memories its write
    logged (id -> path); ``pending``, the memories its last attempt meant to add, in order
    (id -> path), which may or may not have reached their files before a crash."""

    logged: dict[str, str]
    pending: dict[str, str]
    fingerprints: frozenset[str] = frozenset()  # of the requests that used the key

    def __bool__(self) -> bool:
        return bool(self.logged or self.pending)


@dataclass(frozen=True, slots=True)
class Appended:
    """Where one append landed in the log, so that a write undone can take it back."""

    start: int
    size: int  # bytes written
    digest: bytes  # their SHA-256: a large write's lines are not kept in memory to compare
    events: tuple[HistoryEvent, ...]


_INVERSE: dict[str, Event] = {
    "ADD": "DELETE",
    "DELETE": "ADD",
    "UPDATE": "UPDATE",
    "ARCHIVE": "RESTORE",
    "RESTORE": "ARCHIVE",
    "PENDING": "PENDING",
}
REQUEST_WINDOW = 8 * 1024 * 1024  # how far back a retried request is recognised
# Events this process remembers having logged (a 100k-turn transcript saved anew, ~10 MB)
WRITTEN_MEMORY = 1 << 17
# What an event looks like to the indexer, which sees only items leaving and entering files
_AS_SEEN = {"ARCHIVE": "DELETE", "RESTORE": "ADD"}


def _seen_as(e: HistoryEvent) -> tuple[object, object, object]:
    return _seen_key(e.memory_id, e.event, e.new)


def _seen_key(memory_id: object, event: object, new: object) -> tuple[object, object, object]:
    return (memory_id, _AS_SEEN.get(str(event), event), new)


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def changes(
    path: str,
    before: Mapping[str, str],
    after: Mapping[str, str],
    actor: Actor,
    records: Mapping[str, MemoryRecord],
) -> list[HistoryEvent]:
    """Events turning ``before`` into ``after`` (the memories of one file, id -> text);
    ``records`` holds at least the memories gone (a DELETE event keeps their fields)."""
    at = now()
    out = [
        HistoryEvent(mid, "DELETE", text, None, actor, at, path, record=fields_of(records[mid]))
        for mid, text in before.items()
        if mid not in after
    ]
    for mid, text in after.items():
        if mid not in before:
            out.append(HistoryEvent(mid, "ADD", None, text, actor, at, path))
        elif before[mid] != text:
            out.append(HistoryEvent(mid, "UPDATE", before[mid], text, actor, at, path))
    return out


def fields_of(r: MemoryRecord) -> dict[str, object]:
    """What a DELETE event keeps of a memory so that ``restore`` can bring it back whole."""
    return {
        "user_id": r.user_id, "agent_id": r.agent_id, "run_id": r.run_id,
        **({"app_id": r.app_id} if r.app_id is not None else {}), "category": r.category,
        "key": r.key, "created": r.created, "updated": r.updated,
        "metadata": dict(r.metadata),
    }  # fmt: skip


class HistoryLog:
    """Appends events (one line each, O_APPEND) and reads them back by memory id."""

    def __init__(self, vault: Path) -> None:
        self.path = vault / HISTORY_PATH
        self._lock = asyncio.Lock()
        # The last event this process logged of each memory (as _seen_as, oldest first): the
        # indexer must not log it again as a person's edit when it indexes the file written.
        # Only the last one: a memory an editor drops, the API adds back and the editor drops
        # again has two DELETEs, and the second must be logged too.
        self._written: OrderedDict[str, tuple[object, object, object]] = OrderedDict()
        # What this process's writes put in a file and have not logged yet (set in the worker
        # thread just before the file is replaced): the indexer, reading that file first,
        # must not log it as a person's edit. Each of its single operations is atomic.
        self._expected: OrderedDict[str, HistoryEvent] = OrderedDict()
        # Expected events the indexer logged on their write's behalf (as _seen_as), before a
        # person's edit of the same memory: the write, logging later, leaves them out.
        self._early: OrderedDict[tuple[object, object, object], None] = OrderedDict()

    def expect(self, events: Iterable[HistoryEvent]) -> None:
        """A write is about to put ``events`` in a file and will log them itself (called
        from a worker thread, before the file is replaced)."""
        for e in events:
            self._expected[e.memory_id] = e
        while len(self._expected) > WRITTEN_MEMORY:  # a write that neither logged nor undid
            self._expected.popitem(last=False)

    def unexpect(self, events: Iterable[HistoryEvent]) -> None:
        """The write of ``events`` was undone or failed: nothing of it is left to log."""
        for e in events:
            if self._expecting(e):
                self._expected.pop(e.memory_id, None)

    def _logged_early(self, e: HistoryEvent) -> bool:
        """Whether ``e`` was logged ahead of a person's edit (once: forgotten as it is asked)."""
        seen = _seen_as(e)
        if seen not in self._early:
            return False
        del self._early[seen]
        return True

    def _expecting(self, e: HistoryEvent) -> bool:
        found = self._expected.get(e.memory_id)
        return found is not None and _seen_as(found) == _seen_as(e)

    async def append(
        self, events: Sequence[HistoryEvent], unlogged: bool = False
    ) -> Appended | None:
        """Log the events (one write, O_APPEND); the result lets ``retract`` take them back.
        ``unlogged``: leave out those this process logged last (checked under the lock, so
        two writers of one event cannot both pass)."""
        async with self._lock:
            asked = events
            if self._early:  # logged already, ahead of a person's edit (see append_new)
                events = [e for e in events if not self._logged_early(e)]
            if unlogged:
                events = [e for e in events if not self.logged_last(e)]
            try:
                return await self._append_locked(events)
            finally:  # logged now or before: none of them is still to come
                for e in asked:
                    if self._expecting(e):
                        self._expected.pop(e.memory_id, None)

    async def _append_locked(self, events: Sequence[HistoryEvent]) -> Appended | None:
        if not events:
            return None
        # the lines are made in the worker too: 1,000 of them take ms
        start, size, digest = await asyncio.to_thread(self._append, events)
        for e in events:
            self._written.pop(e.memory_id, None)  # to the end: the newest
            self._written[e.memory_id] = _seen_as(e)
            if self._expecting(e):  # (a worker may drop it meanwhile)
                self._expected.pop(e.memory_id, None)
        while len(self._written) > WRITTEN_MEMORY:  # O(1) each: a dict's next(iter()) walks
            self._written.popitem(last=False)  # the slots deleted before it (103 ms a page)
        return Appended(start, size, digest, tuple(events))

    def logged_last(self, e: HistoryEvent) -> bool:
        """Whether ``e`` is what this process last logged of its memory (a memory written
        again after an editor's stale save dropped it was added once, not twice)."""
        return self._written.get(e.memory_id) == _seen_as(e)

    def _append(self, events: Sequence[HistoryEvent]) -> tuple[int, int, bytes]:
        data = "".join(json.dumps(e.to_dict(), ensure_ascii=False) + "\n" for e in events)
        raw = data.encode("utf-8")
        return (*self._append_bytes(raw), hashlib.sha256(raw).digest())

    def _append_bytes(self, data: bytes) -> tuple[int, int]:
        check_writable(self.path.parent.parent, HISTORY_PATH)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)  # other processes append whole lines too
            start = os.lseek(fd, 0, os.SEEK_END)
            written = os.write(fd, data)
            if written != len(data):  # a full disk: leave no half line behind
                os.ftruncate(fd, start)
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path))
            return start, written
        finally:
            os.close(fd)

    async def retract(self, appended: Appended | None) -> None:
        """Take back events of a write that was undone: cut them off the log if they are still
        its last lines, else log the inverse events (other writers have appended since)."""
        if appended is None:
            return
        async with self._lock:
            cut = await asyncio.to_thread(self._cut, appended)
        for e in appended.events:
            if self._written.get(e.memory_id) == _seen_as(e):
                del self._written[e.memory_id]
        if not cut:
            await self.append(
                [
                    dataclasses.replace(
                        e, event=_INVERSE[e.event], old=e.new, new=e.old, at=now(), undo=True
                    )
                    for e in reversed(appended.events)
                ]
            )

    def _cut(self, appended: Appended) -> bool:
        end = appended.start + appended.size
        try:
            fd = os.open(self.path, os.O_RDWR)
        except FileNotFoundError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            if os.lseek(fd, 0, os.SEEK_END) != end:
                return False
            there = os.pread(fd, appended.size, appended.start)
            if hashlib.sha256(there).digest() != appended.digest:
                return False
            os.ftruncate(fd, appended.start)
            return True
        finally:
            os.close(fd)

    async def by_request(self, request: str) -> ByRequest:
        """What earlier calls with this idempotency key logged (memory id -> path) and, from
        their last PENDING events, what they meant to add (see ``ByRequest``): calls recent
        enough to be in the log's last REQUEST_WINDOW bytes."""
        return await asyncio.to_thread(self._by_request, request)

    def _by_request(self, request: str) -> ByRequest:
        needle = json.dumps(request, ensure_ascii=False)
        logged: dict[str, str] = {}
        pending: dict[str, str] = {}
        prints: set[str] = set()
        for e in self._tail(REQUEST_WINDOW, needle):
            if e.get("request") != request or e.get("actor") != "api":
                continue
            if isinstance(print_ := e.get("fingerprint"), str):
                prints.add(print_)
            mid, path = str(e.get("memory_id")), str(e.get("path"))
            if e.get("event") == "PENDING":
                if e.get("undo"):  # a refused write's plan, taken back
                    pending.pop(mid, None)
                    continue
                if e.get("first"):  # a new attempt: an earlier one's plan is superseded
                    pending = {}
                pending[mid] = path
            elif e.get("undo"):
                logged.pop(mid, None)
            else:
                logged[mid] = path
        return ByRequest(logged, pending, frozenset(prints))

    async def append_new(self, events: Sequence[HistoryEvent]) -> None:
        """Append events not already at the end of the log: an API write in another process
        logs its own events, and the daemon indexing that file must not log them again."""
        async with self._lock:  # checked and appended in one turn: never logged twice
            events = [e for e in events if not self._ours(e)]
            if not events:  # all of them written by this process: no need to read the log
                return
            last = await asyncio.to_thread(self._recent)
            # A person's edit of a memory this process has just written and not yet logged
            # (an editor's stale save right after an API add): the write's event goes first,
            # so the history reads in the order things happened; the write then skips it.
            early = [
                x for e in events if (x := self._expected.get(e.memory_id)) is not None
            ]  # fmt: skip
            for x in early:
                self._early[_seen_as(x)] = None
            while len(self._early) > WRITTEN_MEMORY:
                self._early.popitem(last=False)
            fresh = [e for e in events if last.get(e.memory_id) != _seen_as(e)]
            await self._append_locked([*early, *fresh])

    def _ours(self, e: HistoryEvent) -> bool:
        """Whether this process logged ``e`` last or is writing it and will log it."""
        return self.logged_last(e) or self._expecting(e)

    def _recent(self) -> dict[object, tuple[object, object, object]]:
        """The last event of each memory in the log's tail (as ``_seen_as``)."""
        return {
            e.get("memory_id"): _seen_key(e.get("memory_id"), e.get("event"), e.get("new_memory"))
            for e in self._tail()
            if e.get("event") != "PENDING"
        }

    async def removed_by_api(self, memory_ids: Iterable[str]) -> set[str]:
        """Those of ``memory_ids`` whose latest event is an API delete or archive: removed on
        purpose by another caller, not dropped by an editor saving an old buffer."""
        wanted = set(memory_ids)
        if not wanted:
            return set()
        last: dict[object, dict[str, object]] = {}
        for e in await asyncio.to_thread(self._tail, 1024 * 1024):
            if e.get("memory_id") in wanted:
                last[e.get("memory_id")] = e
        return {
            str(mid)
            for mid, e in last.items()
            if e.get("actor") == "api" and e.get("event") in ("DELETE", "ARCHIVE")
        }

    def _tail(self, size: int = 256 * 1024, needle: str = "") -> list[dict[str, object]]:
        """The events in the last ``size`` bytes of the log, oldest first; with ``needle``,
        only lines holding it are parsed."""
        try:
            with self.path.open("rb") as fh:
                start = max(0, fh.seek(0, os.SEEK_END) - size)
                fh.seek(start)
                lines = split_lines(fh.read().decode("utf-8", "replace"))
        except FileNotFoundError:
            return []
        out = []
        for line in lines[1:] if start else lines:  # the first line may be cut
            if needle not in line:
                continue
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if isinstance(e, dict):
                out.append(e)
        return out

    async def last_delete(self, memory_id: str) -> dict[str, object] | None:
        """The memory's last event when it is a DELETE (by the API or by a person's edit)."""
        events = await self.of(memory_id)
        last = next((e for e in reversed(events) if not e.get("undo")), None)
        return last if last is not None and last.get("event") == "DELETE" else None

    async def of(self, memory_id: str) -> list[dict[str, object]]:
        return await asyncio.to_thread(self._read, memory_id)

    def _read(self, memory_id: str) -> list[dict[str, object]]:
        if not self.path.is_file():
            return []
        out = []
        needle = json.dumps(memory_id)
        with self.path.open(encoding="utf-8", errors="replace") as fh:
            for line in fh:
                if needle not in line:
                    continue
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a line cut short by a crash: skip it, keep the rest
                if (
                    isinstance(event, dict)
                    and event.get("memory_id") == memory_id
                    and event.get("event") != "PENDING"  # an intent, not a change
                ):
                    event.pop("fingerprint", None)  # the idempotency check's own
                    out.append(event)
        return out
