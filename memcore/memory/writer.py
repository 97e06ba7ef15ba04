"""MemoryWriter: add, update and delete memories by editing Markdown, then indexing it.

Every write is a change to a memory file (file_writes.py: read, change only the lines of the
memories it touches, replace atomically if nobody changed the file meanwhile, else again). The
file is indexed before the call returns, so the memory is searchable at once, and the history
log gets one event per change. This module decides what to write: adds (grouped per file,
paged, keyed, idempotent), updates, deletes, and reading back what the index holds.

A write is applied and acknowledged, or refused and not applied: input is checked before any
file is touched, and when the index cannot take the change (busy, broken, a full disk) the
Markdown and the history are put back as they were before the error is raised.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TypeVar

from memcore.core.errors import (
    ImmutableMemory,
    InputError,
    MemcoreError,
    NotFound,
    WriteConflict,
)
from memcore.core.models import MemoryQuery, MemoryRecord
from memcore.core.vectors import Vector
from memcore.index.indexer import Indexer
from memcore.memory.adding import Adds, NewMemory
from memcore.memory.file_writes import (
    Change,
    FileEdit,
    FileWrites,
    Written,
    api_event,
)
from memcore.memory.supplied import own_vector, supply
from memcore.storage.base import Store
from memcore.vault.files import append_text, is_memory_path
from memcore.vault.history import (
    HistoryLog,
    fields_of,
    now,
)
from memcore.vault.memory_format import (
    MemoryFile,
    MemoryItem,
    Scope,
    check_content,
    check_metadata,
    check_name,
    render_item,
)
from memcore.vault.safe_file import Undo

READ_IDS = 10_000  # memories read back by id in one query (PostgreSQL takes 65,535 parameters)
log = logging.getLogger(__name__)
T = TypeVar("T")


class MemoryWriter:
    """The write half of the memory API. Safe for many concurrent callers."""

    def __init__(self, vault: Path, store: Store, indexer: Indexer) -> None:
        self.vault = vault
        self.store = store
        self.indexer = indexer
        self.history = indexer.history or HistoryLog(vault)  # one log: it knows what it wrote
        self.files = FileWrites(vault, store, indexer, self.history)
        self.adds = Adds(self)
        self._texts: set[asyncio.Task[None]] = set()  # background index runs (index_later)
        self._filler: asyncio.Task[None] | None = None
        self._vectors_wanted = False
        self._stop_filling = asyncio.Event()
        self.indexing: dict[str, int] = {}  # files written, being indexed in the background

    # --- adding -------------------------------------------------------------------------

    async def add(self, memory: NewMemory) -> MemoryRecord:
        """Add one memory; with a ``key``, replace the memory holding that key in the same
        scope and category instead (an upsert)."""
        (record,) = await self.add_batch([memory])
        return record

    async def add_batch(
        self, memories: Sequence[NewMemory], request: str | None = None
    ) -> list[MemoryRecord]:
        """Add many memories (adding.Adds.add_batch): one write and one index run per file
        they land in; ``request``, an idempotency key."""
        return await self.adds.add_batch(memories, request)

    async def load(self, memories: Sequence[NewMemory]) -> int:
        """Add many memories as ``add_batch`` does, without building their records (a load
        of a file: ``memcore add --file``, an import); how many went in."""
        await self.adds.add_batch(memories, records=False)
        return len(memories)

    def checked(self, m: NewMemory) -> NewMemory:
        """The memory with its text and metadata checked (InputError if they are not fit)."""
        check_name(m.category, "category")
        if m.key is not None and (not isinstance(m.key, str) or not m.key.strip()):
            raise InputError("key must be a non-empty string")
        return dataclasses.replace(
            m, content=check_content(m.content), metadata=check_metadata(m.metadata),
            vector=own_vector(m.vector, m.vector_model),
        )  # fmt: skip

    def file_for(self, scope: Scope, category: str, day: dt.date | None = None) -> str:
        """memory/<users/u/agents/a/runs/r>/<category>.md; daily memories get a file per day."""
        folder = "/".join(p for p in ("memory", scope.folder()) if p)
        if category == "daily":
            return f"{folder}/daily/{(day or dt.date.today()).isoformat()}.md"
        return f"{folder}/{category}.md"

    async def append_note(self, rel: str, text: str) -> str:
        """Seed 003's write_memory(content, file): append a block of Markdown to a memory file
        of the vault (created if missing) and index it. Returns the vault-relative path."""
        content = check_content(text)
        await self.rewrite_note(rel, lambda old: append_text(old, content))
        return rel

    async def rewrite_note(self, rel: str, transform: Callable[[str], str | None]) -> bool:
        """Change a memory file of the vault (created if missing) by ``transform`` (its text
        -> the new text, or None for no change), as every write does: the transform is applied
        again to whatever a concurrent writer left, the file replaced only if unchanged since
        it was read, then indexed (or put back). False when there was nothing to change."""
        ix = self.indexer.settings.index
        _check_vault_path(rel)
        if not is_memory_path(rel, ix.include, ix.exclude):
            raise InputError(f"{rel} is not a memory file of this vault (see index.include)")
        before, after = await self.files.transform(rel, transform)
        if after is None:
            return False
        await self.files.commit([Written(rel, Undo.of(before, after), [], None)])
        return True

    # --- reading ------------------------------------------------------------------------

    async def get(self, memory_id: str) -> MemoryRecord:
        found = await self.records([memory_id], missing_ok=True)
        if not found:
            raise NotFound(f"no memory with id {memory_id!r}")
        return found[0]

    async def get_all(self, query: MemoryQuery) -> list[MemoryRecord]:
        async with self.store.snapshot() as reader:
            return await reader.memories(query)

    async def count(self, query: MemoryQuery) -> int:
        async with self.store.snapshot() as reader:
            return await reader.count_memories(query)

    async def history_of(self, memory_id: str) -> list[dict[str, object]]:
        return await self.history.of(memory_id)

    async def records(
        self, ids: Sequence[str], missing_ok: bool = False, writing: bool = False
    ) -> list[MemoryRecord]:
        rows: list[MemoryRecord] = []
        async with self.store.snapshot(writing) as reader:
            for at in range(0, max(len(ids), 1), READ_IDS):  # a query's parameters are bounded
                part = tuple(ids[at : at + READ_IDS])
                rows += await reader.memories(MemoryQuery(ids=part, limit=max(len(part), 1)))
        by_id = {r.id: r for r in rows}
        if not missing_ok and len(by_id) < len(set(ids)):
            lost = next(i for i in ids if i not in by_id)
            raise WriteConflict(f"memory {lost} was written but is not in the index")
        return [by_id[i] for i in ids if i in by_id]

    async def all_present(self, ids: Sequence[str]) -> bool:
        """Whether the index holds every one of these memories (counted, not read)."""
        wanted = list(dict.fromkeys(ids))
        held = 0
        async with self.store.snapshot(writing=True) as reader:
            for at in range(0, len(wanted), READ_IDS):
                part = tuple(wanted[at : at + READ_IDS])
                held += await reader.count_memories(MemoryQuery(ids=part, limit=len(part)))
        return held == len(wanted)

    # --- changing -----------------------------------------------------------------------

    async def update(
        self,
        memory_id: str,
        content: str | None = None,
        metadata: Mapping[str, object] | None = None,
        created: str | None = None,
        expires: str | None = None,
        vector: Vector | None = None,
        vector_model: str | None = None,
    ) -> MemoryRecord:
        """Change a memory's text, metadata (replacing the old one), created time and/or
        expiry date ("" takes it away); ``vector``, the caller's own vector for its (new)
        text (memory/supplied.py). An immutable memory refuses (ImmutableMemory, a
        WriteConflict)."""
        text = check_content(content) if content is not None else None
        meta = check_metadata(metadata) if metadata is not None else None
        own = own_vector(vector, vector_model)
        if text is None and meta is None and created is None and expires is None and own is None:
            raise InputError(
                "update needs new content, metadata, timestamp, expiration_date or vector"
            )
        record = await self.get(memory_id)
        if record.immutable:
            raise ImmutableMemory(memory_id)
        if own is not None:  # the vector of the text the memory will hold
            texts = [(record.category, text or record.text, own, vector_model)]
            await supply(self.store, self.indexer.embedder, texts)
        if text is None and meta is None and created is None and expires is None:
            return record  # only the vector: the Markdown stays as it is

        def change(f: MemoryFile) -> FileEdit:
            item = _must_find(f, memory_id)
            if item.immutable:
                raise ImmutableMemory(memory_id)
            new = dataclasses.replace(
                item,
                text=text if text is not None else item.text,
                metadata=meta if meta is not None else item.metadata,
                updated=now(),
                created=created or item.created,
                expires=item.expires if expires is None else (expires or None),
            )
            edit = FileEdit(replace={item.id: render_item(new)}, ids=[item.id])
            if new.text != item.text:
                edit.events.append(api_event(item.id, "UPDATE", item.text, new.text, record.path))
            return edit

        await self._change(record, change)
        return await self.get(memory_id)

    async def delete(self, memory_id: str) -> None:
        record = await self.get(memory_id)

        def change(f: MemoryFile) -> FileEdit:
            item = _must_find(f, memory_id)
            event = api_event(item.id, "DELETE", item.text, None, record.path)
            return FileEdit(
                replace={item.id: []},
                events=[dataclasses.replace(event, record=fields_of(record))],
            )

        await self._change(record, change)

    async def delete_many(self, records: Sequence[MemoryRecord], restorable: bool = False) -> int:
        """Delete these memories, one write per file (all of the files, or none); returns how
        many went. ``restorable``: each DELETE keeps the memory's fields, as ``delete``'s
        does, so ``restore`` brings it back whole (a transcript's turns need not)."""
        if not records:
            return 0
        by_file: dict[str, set[str]] = {}
        for r in records:
            by_file.setdefault(r.path, set()).add(r.id)
        kept = {r.id: fields_of(r) for r in records} if restorable else {}

        def deleting(rel: str, ids: set[str]) -> Change:
            def change(f: MemoryFile) -> FileEdit:
                items = [i for i in f.items if i.id in ids]
                return FileEdit(
                    replace={i.id: [] for i in items},
                    events=[
                        dataclasses.replace(
                            api_event(i.id, "DELETE", i.text, None, rel), record=kept.get(i.id)
                        )
                        for i in items
                    ],
                    ids=[i.id for i in items],
                )

            return change

        writes = await self.write_files(
            [(rel, None, None, deleting(rel, ids)) for rel, ids in by_file.items()]
        )
        return sum(len(w.ids) for w in writes)

    async def write_files(
        self,
        edits: Sequence[tuple[str, Scope | None, str | None, Change]],
        *,
        background_over: int | None = None,
    ) -> list[Written]:
        """Apply changes to several memory files (each as ``edit`` does: (path, scope and
        category for a file created now, change)): all of them, or none. Indexed before this
        returns; when the writes made more than ``background_over`` changes (history events),
        after: the Markdown is written, the index follows (see ``index_later``)."""
        writes: list[Written] = []
        try:
            for rel, scope, category, change in edits:
                writes.append(await self.files.write(rel, scope, category, change))
        except MemcoreError:
            await self.files.undo(writes)
            raise
        changed = [w for w in writes if w.undo.changed]
        made = sum(len(w.logged.events) for w in changed if w.logged is not None)
        if background_over is not None and made > background_over:
            self.index_later([w.rel for w in changed])
        else:
            await self.files.commit(changed)
        return writes

    def index_later(self, rels: Sequence[str]) -> None:
        """Index files already written, in the background: their text first (keyword search
        finds them within moments; ``indexing`` names them until then), then the vectors
        not cached yet. A failure is logged; the files stay as written and the next index run
        or the daemon's watcher takes them in."""
        if not rels:
            return
        for rel in rels:
            self.indexing[rel] = self.indexing.get(rel, 0) + 1
        task = asyncio.create_task(self._index_later(list(rels)))
        self._texts.add(task)
        task.add_done_callback(self._texts.discard)

    async def _index_later(self, rels: list[str]) -> None:
        try:
            report = await self.indexer.index(rels, embed=False)
            for failure in report.failed:
                log.warning("indexing %s in the background: %s", failure.path, failure.reason)
        except Exception as exc:  # the Markdown holds the write; an index run takes it later
            log.warning("indexing %s in the background failed: %s", ", ".join(rels), exc)
        finally:
            for rel in rels:
                self.indexing[rel] -= 1
                if not self.indexing[rel]:
                    del self.indexing[rel]
        self._vectors_wanted = True
        if self._filler is None or self._filler.done():
            self._filler = asyncio.create_task(self._fill_vectors())

    async def _fill_vectors(self) -> None:
        """One task embeds what background writes left pending, until nothing new is."""
        while self._vectors_wanted and not self._stop_filling.is_set():
            self._vectors_wanted = False
            try:
                await self.indexer.fill_vectors(self._stop_filling)
            except Exception as exc:
                log.warning("embedding in the background failed: %s", exc)
                return

    async def indexed(self) -> None:
        """Wait until the files written for ``index_later`` are in the index (their vectors
        may still be on the way)."""
        while self._texts:
            await asyncio.gather(*self._texts, return_exceptions=True)

    async def settle(self, vectors: bool = False) -> None:
        """Wait until the files written for ``index_later`` are indexed; with ``vectors``,
        also embedded. Otherwise vectors still being embedded are left pending (the next
        index run or the daemon fills them): what closing the service does."""
        await self.indexed()
        filler = self._filler
        if filler is None:
            return
        if not vectors:  # stops between batches: a cancelled read would leave its snapshot open
            self._stop_filling.set()
        await asyncio.gather(filler, return_exceptions=True)
        self._stop_filling.clear()

    async def edit(
        self,
        rel: str,
        scope: Scope | None,
        category: str | None,
        change: Change,
        index: bool = True,
    ) -> list[str]:
        """Apply ``change`` to one memory file (created for ``scope`` and ``category`` when
        missing) as every write does, then index it. Returns the ids the change names."""
        written = await self.files.write(rel, scope, category, change)
        if index:
            await self.files.commit([written])
        return written.ids

    async def _change(self, record: MemoryRecord, change: Change) -> None:
        await self.files.commit([await self.files.write(record.path, None, None, change)])


def _must_find(f: MemoryFile, memory_id: str) -> MemoryItem:
    item = f.find(memory_id)
    if item is None:
        raise NotFound(f"memory {memory_id!r} is no longer in its file (edited by hand?)")
    return item


NAME_MAX = 255  # bytes of one path segment (Linux, macOS)


def _check_vault_path(rel: str) -> None:
    """A caller's vault path, as the index names files: segments joined by one "/", none
    empty, "." or "..", no control character, each segment within the file system's limit.
    InputError otherwise (one line; the path is shown as the caller wrote it)."""
    parts = rel.split("/")
    if any(p in ("", ".", "..") for p in parts) or any(ord(c) < 32 for c in rel):
        raise InputError(f"{rel!r} is not a vault path (a/b.md: no empty, '.' or '..' parts)")
    if any(len(p.encode("utf-8", "surrogatepass")) > NAME_MAX for p in parts):
        raise InputError(f"a part of {rel[:80]!r}... is over {NAME_MAX} bytes: too long a name")
