"""A person's edits to memories, found while their files are indexed: what the index held of
a file's memories before a write (``memories_before``), and the history events of the changes
logged (``EditLog``), except the deletes of memories that only moved to another file."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from memcore.core.errors import VaultError
from memcore.core.models import Chunk, MemoryQuery, MemoryRecord
from memcore.index.prepare import StoredVersion
from memcore.storage.base import IndexReader, Store
from memcore.vault.history import HistoryEvent, HistoryLog

log = logging.getLogger(__name__)

Before = tuple[dict[str, str], dict[str, MemoryRecord]]  # (id -> text, the ones going whole)


async def memories_before(
    reader: IndexReader,
    afters: Mapping[str, Mapping[str, str]],
    stored: Mapping[str, StoredVersion] | None = None,
) -> dict[str, Before]:
    """What a diff of these files' memories needs of the index before they are written (
    ``afters``: path -> id -> text of the memories each will hold): the text of each memory,
    and every field of those the new versions no longer hold (a DELETE event keeps them). A
    write to a file of a thousand memories reads a thousand texts, not a thousand records;
    none when this process wrote the version the index holds (``stored``)."""
    out: dict[str, Before] = {}
    for path, after in afters.items():
        version = (stored or {}).get(path)
        texts = (
            memory_texts(version.chunks) if version is not None else await reader.memory_texts(path)
        )
        if not texts:
            continue
        gone = [mid for mid in texts if mid not in after]
        records = (
            await reader.memories(MemoryQuery(ids=tuple(gone), limit=len(gone))) if gone else []
        )
        out[path] = (texts, {r.id: r for r in records})
    return out


def memory_texts(chunks: Sequence[Chunk]) -> dict[str, str]:
    """Id -> text of the memories these chunks hold."""
    return {str(m["id"]): c.text for c in chunks if isinstance(m := c.metadata.get("memory"), dict)}


class EditLog:
    """Logs a person's edits to the memory history; a vault that cannot take it (read-only)
    is still indexed, and says once why its history stops."""

    def __init__(self, store: Store, history: HistoryLog) -> None:
        self.store = store
        self.history = history
        self._warned = False

    async def log(self, events: list[HistoryEvent]) -> None:
        """Log a person's edits (not the deletes of memories that only moved to another file)."""
        try:
            await self.history.append_new(await self._still_lost(events))
        except (OSError, VaultError) as exc:
            if not self._warned:
                log.warning("cannot write the memory history: %s", exc)
                self._warned = True

    async def _still_lost(self, events: list[HistoryEvent]) -> list[HistoryEvent]:
        """The events without deletes of memories that are still in the index: their item
        left one file for another (a file moved, or an item cut and pasted), not the vault."""
        deleted = [e.memory_id for e in events if e.event == "DELETE"]
        if not deleted:
            return events
        async with self.store.snapshot(writing=True) as reader:
            found = await reader.memories(MemoryQuery(ids=tuple(deleted), limit=len(deleted)))
        moved = {r.id for r in found}
        return [e for e in events if not (e.event == "DELETE" and e.memory_id in moved)]

    async def memories_of(self, paths: Sequence[str]) -> dict[str, list[MemoryRecord]]:
        """The indexed memories of these files (before a change is written)."""
        if not paths:
            return {}
        out: dict[str, list[MemoryRecord]] = {}
        async with self.store.snapshot(writing=True) as reader:
            for path in paths:
                rows = await reader.memories(MemoryQuery(path=path, limit=1_000_000))
                if rows:
                    out[path] = rows
        return out
