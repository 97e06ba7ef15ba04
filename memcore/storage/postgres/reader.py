"""PostgresReader: one REPEATABLE READ snapshot of the namespace, and every read it answers."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from contextlib import suppress
from typing import Any

import numpy as np

from memcore.core.models import (
    Entity,
    FileState,
    MemoryQuery,
    MemoryRecord,
    SearchFilters,
    SkippedFile,
)
from memcore.core.vectors import VectorIndex
from memcore.storage.base import (
    ChunkRow,
    PendingChunk,
    StoredFile,
    StoreStats,
    Vector,
    scan,
)
from memcore.storage.filters_sql import (
    POSTGRES,
    filter_sql,
    memory_query_sql,
    unscoped,
)
from memcore.storage.postgres.keywords import KeywordQueries
from memcore.storage.postgres.queries import (
    as_param,
    as_vector,
    nearest_query,
)
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


class PostgresReader(KeywordQueries):
    """One REPEATABLE READ snapshot: every query sees the state as of ``generation``."""

    async def begun(self) -> int:
        return self.generation  # started before the snapshot was handed out

    async def file_states(self, paths: Sequence[str] | None = None) -> dict[str, FileState]:
        sql = "SELECT path, content_hash, size, mtime_ns FROM files WHERE ns = %s"
        if paths is not None:  # a write's few files: no reason to read the whole vault's
            return file_states(await self.all(sql + " AND path = ANY(%s)", (self.ns, list(paths))))
        rows = await self.all(sql, (self.ns,))
        return await asyncio.to_thread(file_states, rows)

    async def search_vectors(
        self, vector: Vector, model_id: str, k: int, filters: SearchFilters
    ) -> list[tuple[int, float]]:
        dim = int(np.asarray(vector).size)
        held = await self._store.held.at(self.conn, self.generation, model_id, dim)
        if held is not None:
            found = await self._search_held(held, vector, k, filters)
            if found is not None:
                return found
        where, params = filter_sql(filters, POSTGRES)
        q = as_param(vector)
        few = await self._few_ids(filters)
        if few is not None:  # a small scope: its own rows, compared exactly
            rest, more = filter_sql(unscoped(filters), POSTGRES)
            rows = await self.all(  # the rows by their key (not by the graph, nor by the
                # model's index), then compared: OFFSET 0 keeps the planner from merging them
                "SELECT id, embedding <=> %s::vector AS d FROM (SELECT c.id, c.ns, "
                "c.embedding_model, c.embedding FROM memory_chunks c WHERE c.id = ANY(%s)"
                f"{rest} OFFSET 0) s WHERE ns = %s AND embedding_model = %s AND "
                "vector_dims(embedding) = %s ORDER BY d, id LIMIT %s",
                [q, few, *more, self.ns, model_id, dim, k],
            )
            return [(int(r[0]), 1.0 - float(r[1])) for r in rows]
        rows = await self.all(nearest_query(self.ns, model_id, dim, where), [q, *params, k])
        if len(rows) < k and where and not self._store.iterative_scan:
            # Before pgvector 0.8 an index scan ends after ef_search candidates, and the filter
            # may have dropped most of them: the rows inside the filter, compared exactly.
            exact = nearest_query(self.ns, model_id, dim, where, exact=True)
            rows = await self.all(exact, [q, *params, k])
        # the iterative scan may return near-ties slightly out of order
        found = sorted(((int(r[0]), 1.0 - float(r[1])) for r in rows), key=lambda h: -h[1])
        return found[:k]

    async def _search_held(
        self, held: VectorIndex, vector: Vector, k: int, filters: SearchFilters
    ) -> list[tuple[int, float]] | None:
        """The k nearest in this process's matrix (held_vectors.py), inside the filter; None
        when the matrix has moved past this snapshot meanwhile."""
        allowed: set[int] | None = None
        where, params = filter_sql(filters, POSTGRES)
        if where:
            few = await self._few_ids(filters)
            if few is not None:  # a small scope's chunks, read once for both halves
                where, params = filter_sql(unscoped(filters), POSTGRES)
            if few is not None and not where:
                allowed = set(few)
            else:
                sql = f"SELECT c.id FROM memory_chunks c WHERE c.ns = %s{where}"
                if few is not None:
                    sql, params = f"{sql} AND c.id = ANY(%s)", [*params, few]
                allowed = {int(r[0]) for r in await self.all(sql, [self.ns, *params])}
        query = np.asarray(vector, dtype=np.float32)
        try:
            return await scan(held, held.search, query, k, allowed, self.generation)
        except ValueError:  # compacted past this snapshot by a newer one
            return None

    async def vector_similarity(
        self, vector: Vector, model_id: str, ids: Sequence[int]
    ) -> dict[int, float]:
        if not ids:
            return {}
        if self._vector is not None and self._vector[0] is vector and self._vector[1] == model_id:
            known = self.cosines  # read with the keyword hits (see KeywordQueries.search_text)
            if all(cid in known for cid in ids):
                return {cid: c for cid in ids if (c := known[cid]) is not None}
        dim = int(np.asarray(vector).size)
        held = await self._store.held.at(self.conn, self.generation, model_id, dim)
        if held is not None:
            query = np.asarray(vector, dtype=np.float32)
            with suppress(ValueError):  # compacted past this snapshot: asked in SQL
                return await scan(held, held.similarity, query, ids, self.generation)
        rows = await self.all(
            "SELECT id, 1 - (embedding <=> %s::vector) FROM memory_chunks "
            "WHERE ns = %s AND embedding_model = %s AND vector_dims(embedding) = %s "
            "AND id = ANY(%s)",
            (as_param(vector), self.ns, model_id, dim, list(ids)),
        )
        return {int(r[0]): float(r[1]) for r in rows}

    async def newest_matching(
        self, filters: SearchFilters, limit: int, offset: int = 0
    ) -> list[int]:
        where, params = filter_sql(filters, POSTGRES)
        sql = (
            f"SELECT c.id FROM memory_chunks c WHERE c.ns = %s{where} "
            "ORDER BY c.date DESC NULLS LAST, c.id DESC LIMIT %s OFFSET %s"
        )
        return [r[0] for r in await self.all(sql, [self.ns, *params, limit, offset])]

    async def holds_chinese(self) -> None:
        return None  # a GIN index of tsvectors has no order of words to seek in

    async def has_vectors(self, model_id: str) -> bool:
        rows = await self.all(
            "SELECT 1 FROM memory_chunks WHERE ns = %s AND embedding_model = %s LIMIT 1",
            (self.ns, model_id),
        )
        return bool(rows)

    async def vectors_ready(self, model_id: str) -> None:
        return None  # the server scores the vectors

    async def chunk_rows(self, ids: Sequence[int]) -> dict[int, ChunkRow]:
        if not ids:
            return {}
        return _chunks_by_id(await self.all(*self._chunk_rows_query(ids)))

    def _chunk_rows_query(self, ids: Sequence[int]) -> tuple[str, tuple[object, ...]]:
        return (
            f"SELECT {CHUNK_ROW_COLUMNS} FROM memory_chunks WHERE ns = %s AND id = ANY(%s)",
            (self.ns, list(ids)),
        )

    def _memories_query(self, ids: Sequence[int]) -> tuple[str, tuple[object, ...]]:
        return f"{MEMORY_SELECT} WHERE m.ns = %s AND m.chunk_id = ANY(%s)", (self.ns, list(ids))

    async def cached_vectors(self, hashes: Sequence[str], model_id: str) -> dict[str, Vector]:
        if not hashes:
            return {}
        unique = list(dict.fromkeys(hashes))
        rows = await self.all(
            "SELECT content_hash, embedding::float4[] FROM embedding_cache "
            "WHERE ns = %s AND model = %s AND content_hash = ANY(%s)",
            (self.ns, model_id, unique),
        )
        out = {r[0]: as_vector(r[1]) for r in rows}
        held = [h for h in unique if h not in out]  # a chunk's row holds the rest
        if held:
            rows = await self.all(
                "SELECT DISTINCT ON (content_hash) content_hash, embedding::float4[] "
                "FROM memory_chunks WHERE ns = %s AND content_hash = ANY(%s) "  # by the
                "AND embedding_model || '' = %s AND embedding IS NOT NULL",  # hashes' index
                (self.ns, held, model_id),
            )
            out |= {r[0]: as_vector(r[1]) for r in rows}
        return out

    async def pending_chunks(self, model_id: str, limit: int) -> list[PendingChunk]:
        rows = await self.all(
            "SELECT id, content_hash, heading_path, content FROM memory_chunks WHERE ns = %s "
            "AND embedding_model IS DISTINCT FROM %s ORDER BY id LIMIT %s",
            (self.ns, model_id, limit),
        )
        return [PendingChunk(r[0], r[1], f"{r[2]}\n{r[3]}" if r[2] else r[3]) for r in rows]

    async def count_pending(self, model_id: str) -> int:
        memo = self._store.pending_memo
        key = (self.generation, model_id)
        if key not in memo:
            memo.clear()
            rows = await self.all(
                "SELECT count(*) FROM memory_chunks WHERE ns = %s "
                "AND embedding_model IS DISTINCT FROM %s",
                (self.ns, model_id),
            )
            memo[key] = int(rows[0][0])
        return memo[key]

    async def stats(self, model_id: str) -> StoreStats:
        files = (
            await self.all("SELECT count(*), max(indexed_at) FROM files WHERE ns = %s", (self.ns,))
        )[0]
        chunks = await self.all("SELECT count(*) FROM memory_chunks WHERE ns = %s", (self.ns,))
        others = await self.all(
            "SELECT embedding_model, count(*) FROM memory_chunks WHERE ns = %s "
            "AND embedding_model IS NOT NULL AND embedding_model <> %s GROUP BY embedding_model",
            (self.ns, model_id),
        )
        size = await self.all("SELECT pg_database_size(current_database())")
        return StoreStats(
            files=int(files[0]),
            chunks=int(chunks[0][0]),
            vectors_pending=await self.count_pending(model_id),
            other_models={r[0]: int(r[1]) for r in others},
            db_bytes=int(size[0][0]),
            last_indexed=files[1],
        )

    async def stored_files(self, paths: Sequence[str]) -> list[StoredFile]:
        if not paths:
            return []
        found = await self.all(
            "SELECT path, content_hash, size, mtime_ns FROM files WHERE ns = %s "
            "AND path = ANY(%s) ORDER BY path",
            (self.ns, list(paths)),
        )
        columns = STORED_CHUNK_COLUMNS.replace("embedding_model, embedding", "embedding_model, "
                                               "embedding::float4[]")  # fmt: skip
        rows = await self.all(
            f"SELECT {columns} FROM memory_chunks WHERE ns = %s AND source_file = ANY(%s) "
            "ORDER BY source_file, chunk_index",
            (self.ns, list(paths)),
        )
        states = {r[0]: FileState(r[0], r[1], int(r[2]), int(r[3])) for r in found}
        return stored_files(states, rows, as_vector)

    async def skipped_files(self) -> dict[str, SkippedFile]:
        rows = await self.all(
            "SELECT path, reason, size, mtime_ns FROM skipped_files WHERE ns = %s", (self.ns,)
        )
        return {r[0]: SkippedFile(r[0], r[1], int(r[2]), int(r[3])) for r in rows}

    async def memory_copies(self) -> dict[str, list[str]]:
        rows = await self.all(
            "SELECT memory_id, path FROM memory_copies WHERE ns = %s ORDER BY 1, 2", (self.ns,)
        )
        return copies_by_id(rows)

    async def embedded_hashes(self, paths: Sequence[str], model_id: str) -> set[tuple[str, str]]:
        if not paths:
            return set()
        rows = await self.all(
            "SELECT source_file, content_hash FROM memory_chunks WHERE ns = %s "
            "AND embedding_model = %s AND source_file = ANY(%s)",
            (self.ns, model_id, list(paths)),
        )
        return {(r[0], r[1]) for r in rows}

    async def memories(self, query: MemoryQuery) -> list[MemoryRecord]:
        where, params = memory_query_sql(query, POSTGRES)
        rows = await self.all(
            f"{MEMORY_SELECT} WHERE m.ns = %s{where} {MEMORY_ORDER} LIMIT %s OFFSET %s",
            [self.ns, *params, query.limit, query.offset],
        )
        return [memory_record(r) for r in rows]

    async def count_memories(self, query: MemoryQuery) -> int:
        where, params = memory_query_sql(query, POSTGRES)
        rows = await self.all(
            "SELECT count(*) FROM memories m JOIN memory_chunks c ON c.id = m.chunk_id "
            f"WHERE m.ns = %s{where}",
            [self.ns, *params],
        )
        return int(rows[0][0])

    async def entities(self) -> list[Entity]:
        rows = await self.all(
            " UNION ALL ".join(
                f"SELECT '{kind}', {column}, {COUNTED}, min(created), max(updated) "
                f"FROM memories WHERE ns = %s AND {column} IS NOT NULL GROUP BY {column}"
                for kind, column in ENTITY_COLUMNS
            )
            + " ORDER BY 1, 2",
            [self.ns] * len(ENTITY_COLUMNS),
        )
        return [Entity(r[0], r[1], int(r[2]), r[3], r[4]) for r in rows]

    async def memory_texts(self, path: str) -> dict[str, str]:
        sql = (
            "SELECT m.memory_id, c.content FROM memories m "
            "JOIN memory_chunks c ON c.id = m.chunk_id WHERE m.ns = %s AND m.path = %s"
        )
        return {str(i): str(t) for i, t in await self.all(sql, (self.ns, path))}

    async def hit_rows(
        self, ids: Sequence[int]
    ) -> tuple[dict[int, ChunkRow], dict[int, MemoryRecord]]:
        if not ids:
            return {}, {}
        # one round trip for both (a pipeline)
        chunks, memories = await self.all_of(
            [self._chunk_rows_query(ids), self._memories_query(ids)]
        )
        return _chunks_by_id(chunks), _memories_by_chunk(memories)

    async def memories_of_chunks(self, ids: Sequence[int]) -> dict[int, MemoryRecord]:
        if not ids:
            return {}
        return _memories_by_chunk(await self.all(*self._memories_query(ids)))

    async def get_meta(self, key: str) -> str | None:
        rows = await self.all("SELECT value FROM meta WHERE ns = %s AND key = %s", (self.ns, key))
        return str(rows[0][0]) if rows else None


def _chunks_by_id(rows: Sequence[Any]) -> dict[int, ChunkRow]:
    return {int(r[0]): chunk_row(r) for r in rows}


def _memories_by_chunk(rows: Sequence[Any]) -> dict[int, MemoryRecord]:
    return {int(r[-1]): memory_record(r) for r in rows}
