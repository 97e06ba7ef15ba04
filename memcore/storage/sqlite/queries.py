"""The SQL behind SqliteStore's read snapshots: SqliteReader, a snapshot (sqlite/snapshot.py)
with its vector reads (sqlite/vector_reads.py), its keyword search (ranked by
sqlite/keywords.py on the connection's thread) and the reads of files, chunks and memories.
The write transaction's SQL is sqlite/writer.py."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Sequence
from typing import Any

import aiosqlite

from memcore.core.models import (
    Entity,
    FileState,
    MemoryQuery,
    MemoryRecord,
    SearchFilters,
    SkippedFile,
)
from memcore.core.tokenize import ANCHOR_MAX_TERMS, coverage
from memcore.core.vectors import decode_vector
from memcore.storage.base import ChunkRow, StoredFile, StoreStats, Vector, search_terms
from memcore.storage.filters_sql import SQLITE, filter_sql, memory_query_sql
from memcore.storage.rows import (
    CHUNK_ROW_COLUMNS,
    COUNTED,
    ENTITY_COLUMNS,
    MEMORY_ORDER,
    MEMORY_SELECT,
    STORED_CHUNK_COLUMNS,
    chunk_row,
    copies_by_id,
    file_states,
    memory_record,
    stored_files,
)
from memcore.storage.sqlite import file_rows, keywords
from memcore.storage.sqlite.file_rows import BATCH, marks
from memcore.storage.sqlite.keywords import FEW_TO_RANK, Counted
from memcore.storage.sqlite.snapshot import StoreState
from memcore.storage.sqlite.vector_reads import VectorReads

# A search's hits, up to this many, are read on the event loop when the snapshot's connection
# has nothing queued: a few rows by primary key from the page cache take ~0.1 ms, where the
# hand-off to the connection's thread and back cost a search ~1.7 ms of holding its reader
# under load (two turns of the GIL and of the event loop).
INLINE_HIT_ROWS = 50
_CHUNK_ROWS = f"SELECT {CHUNK_ROW_COLUMNS} FROM memory_chunks WHERE id IN ({{}})"
_MEMORIES_OF_CHUNKS = f"{MEMORY_SELECT} WHERE m.chunk_id IN ({{}})"


def _hit_rows(db: sqlite3.Connection, ids: Sequence[int]) -> tuple[list[Any], list[Any]]:
    return file_rows.rows_in(db, _CHUNK_ROWS, ids), file_rows.rows_in(db, _MEMORIES_OF_CHUNKS, ids)


class SqliteReader(VectorReads):
    """A read snapshot (see Snapshot): its keyword search, and its reads of files, chunks and
    memories; its vector reads are VectorReads'."""

    def __init__(
        self, conn: aiosqlite.Connection, generation: int | None, store: StoreState
    ) -> None:
        super().__init__(conn, generation, store)
        self._counted: tuple[list[str], Counted] | None = None  # the last words counted
        # the words the last keyword search's best hit holds (see keywords.text_search_held)
        self._held: tuple[list[str], tuple[Counted, dict[int, list[str]]]] | None = None

    async def file_states(self, paths: Sequence[str] | None = None) -> dict[str, FileState]:
        sql = "SELECT path, content_hash, size, mtime_ns FROM files"
        if paths is not None:  # a write's few files: no reason to read the whole vault's
            return file_states(await self._rows_in(sql + " WHERE path IN ({})", paths))
        rows = await self._all(sql)
        # 20k rows take ~20 ms to wrap: in a worker, so the loop keeps answering
        return await asyncio.to_thread(file_states, rows)

    async def search_text(
        self,
        query: str,
        k: int,
        filters: SearchFilters,
        vector: tuple[Vector, str] | None = None,  # the matrix has every cosine at hand
    ) -> list[tuple[int, float]]:
        terms = await search_terms(query, self._store.words)
        if not terms:
            return []
        if filters.scoped:  # a small scope: rank its own chunks, not every match of the vault
            allowed = await self._filtered_ids(filters)
            if allowed is not None and len(allowed) <= FEW_TO_RANK:
                found, top = await self._on_thread(
                    keywords.ranked_in_scope, terms, k, sorted(allowed)
                )
                if top is not None:  # the words keyword_coverage asks about, scope-weighed
                    self._held = (terms[:ANCHOR_MAX_TERMS], top)
                return found
        where, params = filter_sql(filters, SQLITE)
        # every query of one search in one hand-off to the connection's thread: under load
        # each hand-off waits its turn on the event loop, and this one took two to four
        rows, counted, held = await self._on_thread(
            keywords.text_search_held, terms, k, where, params, self._known_counts(terms)
        )
        self._remember_counts(terms, counted)
        if held is not None:
            self._held = (terms, held)
        return rows

    async def keyword_coverage(self, query: str, ids: Sequence[int]) -> dict[int, float]:
        terms = (await search_terms(query, self._store.words))[:ANCHOR_MAX_TERMS]
        if not terms or not ids:
            return {}
        if self._held and self._held[0] == terms and set(ids) <= set(self._held[1][1]):
            counted, held = self._held[1]  # this snapshot's search found them already
        else:
            # the search of this snapshot counted the same words a moment ago
            same = self._counted[1] if self._counted and self._counted[0] == terms else None
            counted, held = await self._on_thread(
                keywords.held_terms, terms, list(ids), self._known_counts(terms), same
            )
            self._remember_counts(terms, counted)
        total = counted.span or self._store.common_counts.span
        return {cid: coverage(counted.counts, total, held[cid]) for cid in ids if cid in held}

    def _known_counts(self, terms: list[str]) -> dict[str, int]:
        """The chunk counts of these words remembered from earlier queries (CommonCounts)."""
        remembered = self._store.common_counts
        return {t: n for t in terms if (n := remembered.get(t, remembered.span)) is not None}

    def _remember_counts(self, terms: list[str], counted: Counted | None) -> None:
        """Keeps the words' counts for this snapshot, and the common words' estimates (with
        the span they were made over) for later queries."""
        if counted is None:
            return
        remembered = self._store.common_counts
        # None: every count came from CommonCounts, made over its span
        span = remembered.span if counted.span is None else counted.span
        remembered.span = span
        self._counted = (terms, counted._replace(span=span))
        for term, n in counted.estimated.items():
            remembered.put(term, n, remembered.span)

    async def newest_matching(
        self, filters: SearchFilters, limit: int, offset: int = 0
    ) -> list[int]:
        where, params = filter_sql(filters, SQLITE)
        sql = (
            f"SELECT c.id FROM memory_chunks c WHERE 1=1{where} "
            "ORDER BY c.date IS NULL, c.date DESC, c.id DESC LIMIT ? OFFSET ?"
        )
        return [r[0] for r in await self._all(sql, [*params, limit, offset])]

    async def holds_chinese(self) -> bool:
        return await self._on_thread(keywords.holds_chinese)

    async def chunk_rows(self, ids: Sequence[int]) -> dict[int, ChunkRow]:
        return {r[0]: chunk_row(r) for r in await self._rows_in(_CHUNK_ROWS, ids)}

    async def stats(self, model_id: str) -> StoreStats:
        files = (await self._all("SELECT count(*), max(indexed_at) FROM files"))[0]
        chunks = (await self._all("SELECT count(*) FROM memory_chunks"))[0][0]
        others = await self._all(
            "SELECT embedding_model, count(*) FROM memory_chunks "
            "WHERE embedding_model IS NOT NULL AND embedding_model != ? GROUP BY embedding_model",
            (model_id,),
        )
        path = self._store.path
        size = sum(
            p.stat().st_size for p in (path, path.with_name(path.name + "-wal")) if p.exists()
        )
        return StoreStats(
            files=files[0],
            chunks=chunks,
            vectors_pending=await self.count_pending(model_id),
            other_models={r[0]: r[1] for r in others},
            db_bytes=size,
            last_indexed=files[1],
        )

    async def get_meta(self, key: str) -> str | None:
        rows = await self._all("SELECT value FROM meta WHERE key = ?", (key,))
        return rows[0][0] if rows else None

    async def memories(self, query: MemoryQuery) -> list[MemoryRecord]:
        where, params = memory_query_sql(query, SQLITE)
        rows = await self._all(
            f"{MEMORY_SELECT} WHERE 1=1{where} {MEMORY_ORDER} LIMIT ? OFFSET ?",
            [*params, query.limit, query.offset],
        )
        return [memory_record(r) for r in rows]

    async def count_memories(self, query: MemoryQuery) -> int:
        where, params = memory_query_sql(query, SQLITE)
        rows = await self._all(
            "SELECT count(*) FROM memories m JOIN memory_chunks c ON c.id = m.chunk_id "
            f"WHERE 1=1{where}",
            params,
        )
        return int(rows[0][0])

    async def entities(self) -> list[Entity]:
        rows = await self._all(
            " UNION ALL ".join(
                f"SELECT '{kind}', {column}, {COUNTED}, min(created), max(updated) "
                f"FROM memories WHERE {column} IS NOT NULL GROUP BY {column}"
                for kind, column in ENTITY_COLUMNS
            )
            + " ORDER BY 1, 2"
        )
        return [Entity(r[0], r[1], int(r[2]), r[3], r[4]) for r in rows]

    async def memory_texts(self, path: str) -> dict[str, str]:
        sql = (
            "SELECT m.memory_id, c.content FROM memories m "
            "JOIN memory_chunks c ON c.id = m.chunk_id WHERE m.path = ?"
        )
        return dict(await self._all(sql, (path,)))

    async def memories_of_chunks(self, ids: Sequence[int]) -> dict[int, MemoryRecord]:
        rows = await self._rows_in(_MEMORIES_OF_CHUNKS, ids)
        return {r[-1]: memory_record(r) for r in rows}

    async def hit_rows(
        self, ids: Sequence[int]
    ) -> tuple[dict[int, ChunkRow], dict[int, MemoryRecord]]:
        if len(ids) <= INLINE_HIT_ROWS and self.started and file_rows.idle(self.conn):
            rows, memories = file_rows.here(self.conn, _hit_rows, ids)  # see INLINE_HIT_ROWS
        else:  # one hand-off for both: a search holds its connection until they are back
            rows, memories = await self._on_thread(_hit_rows, ids)
        return {r[0]: chunk_row(r) for r in rows}, {r[-1]: memory_record(r) for r in memories}

    async def stored_files(self, paths: Sequence[str]) -> list[StoredFile]:
        states: dict[str, FileState] = {}
        rows: list[Any] = []
        for i in range(0, len(paths), BATCH):
            part = list(paths[i : i + BATCH])
            found = await self._all(
                "SELECT path, content_hash, size, mtime_ns FROM files "
                f"WHERE path IN ({marks(len(part))}) ORDER BY path",
                part,
            )
            states.update(file_states(found))
            rows += await self._all(
                f"SELECT {STORED_CHUNK_COLUMNS} FROM memory_chunks "
                f"WHERE source_file IN ({marks(len(part))}) ORDER BY source_file, chunk_index",
                part,
            )
        return stored_files(states, rows, decode_vector)

    async def skipped_files(self) -> dict[str, SkippedFile]:
        rows = await self._all("SELECT path, reason, size, mtime_ns FROM skipped_files")
        return {r[0]: SkippedFile(*r) for r in rows}

    async def memory_copies(self) -> dict[str, list[str]]:
        rows = await self._all("SELECT memory_id, path FROM memory_copies ORDER BY 1, 2")
        return copies_by_id(rows)
