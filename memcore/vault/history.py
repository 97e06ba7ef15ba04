"""The memory history: every ADD, UPDATE, DELETE, ARCHIVE and RESTORE, in the vault as JSON lines.

It lives at ``memory/history.jsonl`` (not Markdown, so never indexed) and travels with the vault
in git, so ``reindex`` keeps it. Events written through the API say ``"actor": "api"``; changes
a person made by editing a memory file, noticed when the file is indexed, say ``"person"``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from memcore.core.models import MemoryRecord

HISTORY_PATH = "memory/history.jsonl"
Event = Literal["ADD", "UPDATE", "DELETE", "ARCHIVE", "RESTORE"]
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

    def to_dict(self) -> dict[str, object]:
        return {
            "memory_id": self.memory_id,
            "event": self.event,
            "old_memory": self.old,
            "new_memory": self.new,
            "actor": self.actor,
            "created_at": self.at,
            "path": self.path,
        }


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def changes(
    path: str,
    before: Iterable[MemoryRecord],
    after: Mapping[str, str],
    actor: Actor,
) -> list[HistoryEvent]:
    """Events turning ``before`` (records of one file) into ``after`` (id -> text)."""
    at = now()
    old = {r.id: r.text for r in before}
    out = [
        HistoryEvent(mid, "DELETE", text, None, actor, at, path)
        for mid, text in old.items()
        if mid not in after
    ]
    for mid, text in after.items():
        if mid not in old:
            out.append(HistoryEvent(mid, "ADD", None, text, actor, at, path))
        elif old[mid] != text:
            out.append(HistoryEvent(mid, "UPDATE", old[mid], text, actor, at, path))
    return out


class HistoryLog:
    """Appends events (one line each, O_APPEND) and reads them back by memory id."""

    def __init__(self, vault: Path) -> None:
        self.path = vault / HISTORY_PATH
        self._lock = asyncio.Lock()

    async def append(self, events: Sequence[HistoryEvent]) -> None:
        if not events:
            return
        data = "".join(json.dumps(e.to_dict(), ensure_ascii=False) + "\n" for e in events)
        async with self._lock:
            await asyncio.to_thread(self._append, data.encode("utf-8"))

    def _append(self, data: bytes) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, data)
        finally:
            os.close(fd)

    async def append_new(self, events: Sequence[HistoryEvent]) -> None:
        """Append events not already at the end of the log: an API write in another process
        logs its own events, and the daemon indexing that file must not log them again."""
        if not events:
            return
        seen = await asyncio.to_thread(self._recent)
        await self.append([e for e in events if (e.memory_id, e.event, e.new) not in seen])

    def _recent(self) -> set[tuple[object, object, object]]:
        return {(e.get("memory_id"), e.get("event"), e.get("new_memory")) for e in self._tail()}

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

    def _tail(self, size: int = 256 * 1024) -> list[dict[str, object]]:
        """The events in the last ``size`` bytes of the log, oldest first."""
        try:
            with self.path.open("rb") as fh:
                start = max(0, fh.seek(0, os.SEEK_END) - size)
                fh.seek(start)
                lines = fh.read().decode("utf-8", "replace").splitlines()
        except FileNotFoundError:
            return []
        out = []
        for line in lines[1:] if start else lines:  # the first line may be cut
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if isinstance(e, dict):
                out.append(e)
        return out

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
                if isinstance(event, dict) and event.get("memory_id") == memory_id:
                    out.append(event)
        return out
