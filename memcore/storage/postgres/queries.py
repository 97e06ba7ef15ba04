"""The SQL of the PostgreSQL adapter: one read snapshot (PostgresReader) and one write
transaction (PostgresWriter), always inside the store's namespace."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np
import psycopg
from psycopg import sql

from memcore.core.models import (
    Chunk,
    Entity,
    FileState,
    MemoryQuery,
    MemoryRecord,
    SearchFilters,
    SkippedFile,
)
from memcore.core.tokenize import (
    ANCHOR_CAP,
    ANCHOR_MAX_TERMS,
    ANCHOR_ROWS,
    anchor_terms,
    coverage,
    idf,
    segment,
)
from memcore.storage.base import (
    ChunkRow,
    FileRows,
    PendingChunk,
    StoredFile,
    StoreStats,
    Vector,
    search_terms,
)
from memcore.storage.filters_sql import (
    POSTGRES,
    filter_sql,
    memory_query_sql,
    scope_selects,
    unscoped,
)
from memcore.storage.rows import (
    CHUNK_ROW_COLUMNS,
    COUNTED,
    ENTITY_COLUMNS,
    MEMORY_SELECT,
    OLD_CHUNK_COLUMNS,
    STORED_CHUNK_COLUMNS,
    choose_homes,
    chunk_row,
    copies_by_id,
    file_states,
    fresh_chunk_fields,
    kept_changes,
    match_kept,
    memory_record,
    memory_rows,
    next_homes,
    now,
    stored_files,
)


class StoreState(Protocol):
    """What a snapshot or a transaction needs of the PostgresStore that opened it. The store
    has these; they are declared here so that this module never imports the store back."""

    namespace: str
    iterative_scan: bool  # pgvector >= 0.8
    vector_indexes: set[str]  # HNSW indexes known to exist
    pending_memo: dict[tuple[int, str], int]
    count_memo: dict[str, int]


Conn = psycopg.AsyncConnection[tuple[Any, ...]]
TS = "memcore"  # the text search configuration of migration 0001
_INSERT_MEMORY = (
    "INSERT INTO memories (ns, memory_id, chunk_id, path, user_id, agent_id, run_id, category, "
    "key, created, updated, metadata, app_id, expires, immutable) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


def as_list(vec: Vector) -> list[float]:
    """A vector as the float4[] parameter that is cast to pgvector's type in SQL."""
    return np.asarray(vec, dtype=np.float32).ravel().tolist()


def as_vector(value: Sequence[float]) -> Vector:
    return np.asarray(value, dtype=np.float32)


def fts_text(heading: str, text: str) -> str:
    return segment(f"{heading}\n{text}")


def vector_index_name(namespace: str, model_id: str, dim: int) -> str:
    digest = hashlib.sha256(f"{namespace}\0{model_id}\0{dim}".encode()).hexdigest()[:20]
    return f"memory_chunks_hnsw_{digest}"


SMALL_SCOPE = 20_000  # a filter allowing at most this many chunks is searched from them


def nearest_query(
    namespace: str, model_id: str, dim: int, where: str = "", *, exact: bool = False
) -> sql.Composed:
    """The k-nearest query, shaped to match the partial HNSW index of (namespace, model, dim):
    the predicate's values are literals, so the planner can prove the index applies. ``exact``
    keeps the index out (the ordering sits above an ``OFFSET 0`` fence the planner does not
    flatten), so every row inside the filter is compared. Parameters: query vector, the
    ``where`` values, k."""
    typed = sql.SQL("vector({})").format(sql.Literal(dim))
    inner = sql.SQL(
        "SELECT c.id, c.embedding::{t} <=> %s::float4[]::{t} AS d FROM memory_chunks c "
        "WHERE c.ns = {ns} AND c.embedding_model = {model} AND vector_dims(c.embedding) = {n}"
        "{where}"
    ).format(
        t=typed,
        ns=sql.Literal(namespace),
        model=sql.Literal(model_id),
        n=sql.Literal(dim),
        where=sql.SQL(where),  # placeholders only: the values are parameters
    )
    if exact:
        return sql.SQL("SELECT id, d FROM ({} OFFSET 0) s ORDER BY d, id LIMIT %s").format(inner)
    return sql.SQL("{} ORDER BY d LIMIT %s").format(inner)


class _Queries:
    def __init__(self, conn: Conn, store: StoreState) -> None:
        self.conn = conn
        self._store = store
        self.ns = store.namespace
        self._few_memo: tuple[SearchFilters, list[int] | None] | None = None
        # the last words counted: (words, counts, chunks counted over: the index's or a scope's)
        self._counted: tuple[list[str], dict[str, int], int] | None = None

    async def _all(self, query: str | sql.Composed, params: Sequence[object] = ()) -> list[Any]:
        cur = await self.conn.execute(query, params)
        return list(await cur.fetchall())

    async def _ids_of(self, paths: Sequence[str]) -> list[int]:
        rows = await self._all(
            "SELECT id FROM memory_chunks WHERE ns = %s AND source_file = ANY(%s)",
            (self.ns, list(paths)),
        )
        return [int(r[0]) for r in rows]


class PostgresReader(_Queries):
    """One REPEATABLE READ snapshot: every query sees the state as of ``generation``."""

    def __init__(self, conn: Conn, generation: int, store: StoreState) -> None:
        super().__init__(conn, store)
        self.generation = generation

    async def begun(self) -> int:
        return self.generation  # started before the snapshot was handed out

    async def file_states(self, paths: Sequence[str] | None = None) -> dict[str, FileState]:
        sql = "SELECT path, content_hash, size, mtime_ns FROM files WHERE ns = %s"
        if paths is not None:  # a write's few files: no reason to read the whole vault's
            return file_states(await self._all(sql + " AND path = ANY(%s)", (self.ns, list(paths))))
        rows = await self._all(sql, (self.ns,))
        return await asyncio.to_thread(file_states, rows)

    async def search_text(
        self, query: str, k: int, filters: SearchFilters
    ) -> list[tuple[int, float]]:
        terms = await search_terms(query)
        if not terms:
            return []
        where, params = filter_sql(filters, POSTGRES)
        few = await self._few_ids(filters)
        if few is not None:  # a small scope: its own rows, each word weighed by its rarity there
            rest, more = filter_sql(unscoped(filters), POSTGRES)
            where, params = f"{rest} AND c.id = ANY(%s)", [*more, few]
            if len(terms) == 1:
                return await self._ranked(terms, None, k, where, params)
            one = (
                "(SELECT count(*) FROM memory_chunks WHERE id = ANY(%s) AND "
                f"fts @@ plainto_tsquery('{TS}', %s))"
            )
            rows = await self._all(
                "SELECT " + ", ".join([one] * len(terms)), [p for t in terms for p in (few, t)]
            )
            counts = {t: int(n) for t, n in zip(terms, rows[0], strict=True)}
            self._counted = (terms, counts, len(few))  # coverage weighs them as ranking did
            weights = [idf(len(few), counts[t]) for t in terms]
            return await self._ranked(terms, weights, k, where, params)
        if not 1 < len(terms) <= ANCHOR_MAX_TERMS:
            return await self._ranked(terms, None, k, where, params)
        # Each word's chunks are counted (a GIN lookup, up to a cap). The counts weigh each
        # word by its rarity (BM25's IDF; ts_rank_cd alone has none, so "common zebra" would
        # rank the chunks saying "common" twice first), and, as in SQLite, when common words
        # would make ranking read most of the table, only the rarest words' chunks are ranked.
        counts = await self._counts_capped(terms, ANCHOR_CAP)
        total = await self._chunk_count()
        self._counted = (terms, counts, total)
        weights = [idf(total, counts[t]) for t in terms]
        anchors = anchor_terms(counts, want=max(ANCHOR_ROWS, 5 * k), cap=ANCHOR_CAP)
        if anchors is not None:
            rows = await self._ranked(terms, weights, k, where, params, anchors)
            if len(rows) >= k:
                return rows
        return await self._ranked(terms, weights, k, where, params)

    async def keyword_coverage(self, query: str, ids: Sequence[int]) -> dict[int, float]:
        terms = (await search_terms(query))[:ANCHOR_MAX_TERMS]
        if not terms or not ids:
            return {}
        if self._counted and self._counted[0] == terms:  # this snapshot's search counted them
            _, counts, total = self._counted
        elif len(terms) == 1:  # one word needs no count: it is all of the query's weight
            counts, total = {terms[0]: 1}, 1
        else:
            counts = await self._counts_capped(terms, ANCHOR_CAP)
            total = await self._chunk_count()
        holds = ", ".join([f"c.fts @@ plainto_tsquery('{TS}', %s)"] * len(terms))
        rows = await self._all(
            f"SELECT c.id, {holds} FROM memory_chunks c WHERE c.ns = %s AND c.id = ANY(%s)",
            [*terms, self.ns, list(ids)],
        )
        held = {int(r[0]): [t for t, h in zip(terms, r[1:], strict=True) if h] for r in rows}
        return {cid: coverage(counts, total, held.get(cid, ())) for cid in ids}

    async def _chunk_count(self) -> int:
        memo = self._store.count_memo
        if memo.get("generation") != self.generation:
            rows = await self._all("SELECT count(*) FROM memory_chunks WHERE ns = %s", (self.ns,))
            memo.update(generation=self.generation, chunks=int(rows[0][0]))
        return memo["chunks"]

    async def _counts_capped(self, terms: list[str], cap: int) -> dict[str, int]:
        one = (
            "(SELECT count(*) FROM (SELECT 1 FROM memory_chunks WHERE ns = %s AND "
            f"fts @@ plainto_tsquery('{TS}', %s) LIMIT %s) x)"
        )
        params: list[object] = []
        for term in terms:
            params += [self.ns, term, cap + 1]
        rows = await self._all("SELECT " + ", ".join([one] * len(terms)), params)
        return {t: int(n) for t, n in zip(terms, rows[0], strict=True)}

    async def _ranked(
        self,
        terms: list[str],
        weights: list[float] | None,
        k: int,
        where: str,
        params: list[object],
        anchors: list[str] | None = None,
    ) -> list[tuple[int, float]]:
        # Every word is its own plainto_tsquery, ORed: nothing the user typed is syntax.
        one = f"plainto_tsquery('{TS}', %s)"
        match = "(" + " || ".join([one] * len(anchors or terms)) + ")"
        score_params: list[object]
        if weights is None:
            score, score_params = f"ts_rank_cd(c.fts, {match}, 1)", list(terms)
        else:  # sum over the words of rarity x the word's own ts_rank_cd
            score = " + ".join(f"%s * ts_rank_cd(c.fts, {one}, 1)" for _ in terms)
            score_params = [p for w, t in zip(weights, terms, strict=True) for p in (w, t)]
        rows = await self._all(
            f"SELECT c.id, {score} AS r FROM memory_chunks c "
            f"WHERE c.ns = %s AND c.fts @@ {match}{where} ORDER BY r DESC, c.id LIMIT %s",
            [*score_params, self.ns, *(anchors or terms), *params, k],
        )
        return [(int(r[0]), float(r[1])) for r in rows]

    async def search_vectors(
        self, vector: Vector, model_id: str, k: int, filters: SearchFilters
    ) -> list[tuple[int, float]]:
        dim = int(np.asarray(vector).size)
        where, params = filter_sql(filters, POSTGRES)
        q = as_list(vector)
        few = await self._few_ids(filters)
        if few is not None:  # a small scope: its own rows, compared exactly
            rest, more = filter_sql(unscoped(filters), POSTGRES)
            rows = await self._all(  # the rows by their key (not by the graph, nor by the
                # model's index), then compared: OFFSET 0 keeps the planner from merging them
                "SELECT id, embedding <=> %s::float4[]::vector AS d FROM (SELECT c.id, c.ns, "
                "c.embedding_model, c.embedding FROM memory_chunks c WHERE c.id = ANY(%s)"
                f"{rest} OFFSET 0) s WHERE ns = %s AND embedding_model = %s AND "
                "vector_dims(embedding) = %s ORDER BY d, id LIMIT %s",
                [q, few, *more, self.ns, model_id, dim, k],
            )
            return [(int(r[0]), 1.0 - float(r[1])) for r in rows]
        rows = await self._all(nearest_query(self.ns, model_id, dim, where), [q, *params, k])
        if len(rows) < k and where and not self._store.iterative_scan:
            # Before pgvector 0.8 an index scan ends after ef_search candidates, and the filter
            # may have dropped most of them: the rows inside the filter, compared exactly.
            exact = nearest_query(self.ns, model_id, dim, where, exact=True)
            rows = await self._all(exact, [q, *params, k])
        # the iterative scan may return near-ties slightly out of order
        found = sorted(((int(r[0]), 1.0 - float(r[1])) for r in rows), key=lambda h: -h[1])
        return found[:k]

    async def _few_ids(self, filters: SearchFilters) -> list[int] | None:
        """The chunks of a filter's scope when they are few (a user's among a fleet's), read
        through the scope's indexes; None when there is no scope or more than SMALL_SCOPE:
        then the vector index does the filtering as it walks."""
        memo = self._few_memo
        if memo is not None and memo[0] is filters:  # the other half of the same search
            return memo[1]
        selects = scope_selects(filters, POSTGRES)
        found: list[int] | None = None
        if selects is not None:
            ids: set[int] = set()
            for query, params in selects:
                rows = await self._all(f"{query} LIMIT %s", [*params, SMALL_SCOPE + 1])
                ids.update(int(r[0]) for r in rows)
            found = sorted(ids) if len(ids) <= SMALL_SCOPE else None
        self._few_memo = (filters, found)
        return found

    async def vector_similarity(
        self, vector: Vector, model_id: str, ids: Sequence[int]
    ) -> dict[int, float]:
        if not ids:
            return {}
        dim = int(np.asarray(vector).size)
        rows = await self._all(
            "SELECT id, 1 - (embedding <=> %s::float4[]::vector) FROM memory_chunks "
            "WHERE ns = %s AND embedding_model = %s AND vector_dims(embedding) = %s "
            "AND id = ANY(%s)",
            (as_list(vector), self.ns, model_id, dim, list(ids)),
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
        return [r[0] for r in await self._all(sql, [self.ns, *params, limit, offset])]

    async def has_vectors(self, model_id: str) -> bool:
        rows = await self._all(
            "SELECT 1 FROM memory_chunks WHERE ns = %s AND embedding_model = %s LIMIT 1",
            (self.ns, model_id),
        )
        return bool(rows)

    async def chunk_rows(self, ids: Sequence[int]) -> dict[int, ChunkRow]:
        if not ids:
            return {}
        rows = await self._all(
            f"SELECT {CHUNK_ROW_COLUMNS} FROM memory_chunks WHERE ns = %s AND id = ANY(%s)",
            (self.ns, list(ids)),
        )
        return {int(r[0]): chunk_row(r) for r in rows}

    async def cached_vectors(self, hashes: Sequence[str], model_id: str) -> dict[str, Vector]:
        if not hashes:
            return {}
        unique = list(dict.fromkeys(hashes))
        rows = await self._all(
            "SELECT content_hash, embedding::float4[] FROM embedding_cache "
            "WHERE ns = %s AND model = %s AND content_hash = ANY(%s)",
            (self.ns, model_id, unique),
        )
        out = {r[0]: as_vector(r[1]) for r in rows}
        held = [h for h in unique if h not in out]  # a chunk's row holds the rest
        if held:
            rows = await self._all(
                "SELECT DISTINCT ON (content_hash) content_hash, embedding::float4[] "
                "FROM memory_chunks WHERE ns = %s AND content_hash = ANY(%s) "  # by the
                "AND embedding_model || '' = %s AND embedding IS NOT NULL",  # hashes' index
                (self.ns, held, model_id),
            )
            out |= {r[0]: as_vector(r[1]) for r in rows}
        return out

    async def pending_chunks(self, model_id: str, limit: int) -> list[PendingChunk]:
        rows = await self._all(
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
            rows = await self._all(
                "SELECT count(*) FROM memory_chunks WHERE ns = %s "
                "AND embedding_model IS DISTINCT FROM %s",
                (self.ns, model_id),
            )
            memo[key] = int(rows[0][0])
        return memo[key]

    async def stats(self, model_id: str) -> StoreStats:
        files = (
            await self._all("SELECT count(*), max(indexed_at) FROM files WHERE ns = %s", (self.ns,))
        )[0]
        chunks = await self._all("SELECT count(*) FROM memory_chunks WHERE ns = %s", (self.ns,))
        others = await self._all(
            "SELECT embedding_model, count(*) FROM memory_chunks WHERE ns = %s "
            "AND embedding_model IS NOT NULL AND embedding_model <> %s GROUP BY embedding_model",
            (self.ns, model_id),
        )
        size = await self._all("SELECT pg_database_size(current_database())")
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
        found = await self._all(
            "SELECT path, content_hash, size, mtime_ns FROM files WHERE ns = %s "
            "AND path = ANY(%s) ORDER BY path",
            (self.ns, list(paths)),
        )
        columns = STORED_CHUNK_COLUMNS.replace("embedding_model, embedding", "embedding_model, "
                                               "embedding::float4[]")  # fmt: skip
        rows = await self._all(
            f"SELECT {columns} FROM memory_chunks WHERE ns = %s AND source_file = ANY(%s) "
            "ORDER BY source_file, chunk_index",
            (self.ns, list(paths)),
        )
        states = {r[0]: FileState(r[0], r[1], int(r[2]), int(r[3])) for r in found}
        return stored_files(states, rows, as_vector)

    async def skipped_files(self) -> dict[str, SkippedFile]:
        rows = await self._all(
            "SELECT path, reason, size, mtime_ns FROM skipped_files WHERE ns = %s", (self.ns,)
        )
        return {r[0]: SkippedFile(r[0], r[1], int(r[2]), int(r[3])) for r in rows}

    async def memory_copies(self) -> dict[str, list[str]]:
        rows = await self._all(
            "SELECT memory_id, path FROM memory_copies WHERE ns = %s ORDER BY 1, 2", (self.ns,)
        )
        return copies_by_id(rows)

    async def embedded_hashes(self, paths: Sequence[str], model_id: str) -> set[tuple[str, str]]:
        if not paths:
            return set()
        rows = await self._all(
            "SELECT source_file, content_hash FROM memory_chunks WHERE ns = %s "
            "AND embedding_model = %s AND source_file = ANY(%s)",
            (self.ns, model_id, list(paths)),
        )
        return {(r[0], r[1]) for r in rows}

    async def memories(self, query: MemoryQuery) -> list[MemoryRecord]:
        where, params = memory_query_sql(query, POSTGRES)
        rows = await self._all(
            f"{MEMORY_SELECT} WHERE m.ns = %s{where} "
            "ORDER BY m.created, m.path, c.chunk_index LIMIT %s OFFSET %s",
            [self.ns, *params, query.limit, query.offset],
        )
        return [memory_record(r) for r in rows]

    async def count_memories(self, query: MemoryQuery) -> int:
        where, params = memory_query_sql(query, POSTGRES)
        rows = await self._all(
            "SELECT count(*) FROM memories m JOIN memory_chunks c ON c.id = m.chunk_id "
            f"WHERE m.ns = %s{where}",
            [self.ns, *params],
        )
        return int(rows[0][0])

    async def entities(self) -> list[Entity]:
        rows = await self._all(
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
        return {str(i): str(t) for i, t in await self._all(sql, (self.ns, path))}

    async def hit_rows(
        self, ids: Sequence[int]
    ) -> tuple[dict[int, ChunkRow], dict[int, MemoryRecord]]:
        return await self.chunk_rows(ids), await self.memories_of_chunks(ids)

    async def memories_of_chunks(self, ids: Sequence[int]) -> dict[int, MemoryRecord]:
        if not ids:
            return {}
        rows = await self._all(
            f"{MEMORY_SELECT} WHERE m.ns = %s AND m.chunk_id = ANY(%s)", (self.ns, list(ids))
        )
        return {int(r[-1]): memory_record(r) for r in rows}

    async def get_meta(self, key: str) -> str | None:
        rows = await self._all("SELECT value FROM meta WHERE ns = %s AND key = %s", (self.ns, key))
        return str(rows[0][0]) if rows else None


class PostgresWriter(_Queries):
    """The write transaction in progress, holding its namespace's advisory lock."""

    def __init__(self, conn: Conn, store: StoreState) -> None:
        super().__init__(conn, store)
        self.chunks_changed = False

    async def file_state(self, path: str) -> FileState | None:
        rows = await self._all(
            "SELECT path, content_hash, size, mtime_ns FROM files WHERE ns = %s AND path = %s",
            (self.ns, path),
        )
        return FileState(rows[0][0], rows[0][1], int(rows[0][2]), int(rows[0][3])) if rows else None

    async def replace_files(self, files: Sequence[FileRows], model_id: str) -> None:
        for f in files:
            await self.replace_file(
                f.state, f.chunks, f.vectors, model_id, f.unchanged, f.stored_hash
            )

    async def replace_file(
        self,
        state: FileState,
        chunks: Sequence[Chunk],
        vectors: Sequence[Vector | None],
        model_id: str,
        unchanged: int = 0,
        stored_hash: str | None = None,
    ) -> list[int]:
        stamp = now()
        path = state.path
        if unchanged and not await self._holds(path, stored_hash, unchanged):
            unchanged = 0
        await self._unskip([path])
        await self.conn.execute(
            "INSERT INTO files (ns, path, content_hash, size, mtime_ns, indexed_at) "
            "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (ns, path) DO UPDATE SET "
            "content_hash = excluded.content_hash, size = excluded.size, "
            "mtime_ns = excluded.mtime_ns, indexed_at = excluded.indexed_at",
            (self.ns, path, state.content_hash, state.size, state.mtime_ns, stamp),
        )
        old = await self._all(
            f"SELECT {OLD_CHUNK_COLUMNS} FROM memory_chunks WHERE ns = %s AND source_file = %s "
            "AND chunk_index >= %s ORDER BY chunk_index",
            (self.ns, path, unchanged),
        )
        kept, gone = match_kept(chunks, old, unchanged)
        await self._delete_chunks(gone)
        refreshed = await self._move_kept(chunks, kept, stamp)
        await self._revector_kept(kept, vectors, model_id)
        fresh = [n for n in range(unchanged, len(chunks)) if n not in kept]
        texts = await asyncio.to_thread(
            lambda: [fts_text(chunks[n].heading, chunks[n].text) for n in fresh]
        )
        if fresh:
            self.chunks_changed = True
            rows = [
                (
                    self.ns, path, n, c.heading, c.start_line, c.end_line, c.text, text,
                    c.content_hash, None if v is None else as_list(v),
                    None if v is None else model_id, *fresh_chunk_fields(c), stamp,
                )
                for n, text in zip(fresh, texts, strict=True)
                for c, v in [(chunks[n], vectors[n])]
            ]  # fmt: skip
            async with self.conn.cursor() as cur:
                await cur.executemany(
                    "INSERT INTO memory_chunks (ns, source_file, chunk_index, heading_path, "
                    "start_line, end_line, content, fts, content_hash, embedding, "
                    "embedding_model, tags, date, metadata, updated_at) VALUES (%s, %s, %s, %s, "
                    f"%s, %s, %s, to_tsvector('{TS}', %s), %s, %s::float4[]::vector, %s, %s, "
                    "%s, %s, %s)",
                    rows,
                )
            await self._ensure_vector_index(model_id, vectors)
        by_index = dict(
            await self._all(
                "SELECT chunk_index, id FROM memory_chunks WHERE ns = %s AND source_file = %s",
                (self.ns, path),
            )
        )
        ids = [int(by_index[n]) for n in range(len(chunks))]
        touched = [n for n in range(unchanged, len(chunks)) if n not in kept or n in refreshed]
        await self._put_memories(
            path, [chunks[n] for n in touched], [ids[n] for n in touched], stamp
        )
        return ids

    async def _ensure_vector_index(self, model_id: str, vectors: Sequence[Vector | None]) -> None:
        """The HNSW index of this namespace and model (created with its first vector)."""
        dims = {int(np.asarray(v).size) for v in vectors if v is not None}
        for dim in dims:
            name = vector_index_name(self.ns, model_id, dim)
            if name in self._store.vector_indexes:
                continue
            await self.conn.execute(
                sql.SQL(
                    "CREATE INDEX IF NOT EXISTS {name} ON memory_chunks USING hnsw "
                    "((embedding::vector({dim})) vector_cosine_ops) WHERE ns = {ns} "
                    "AND embedding_model = {model} AND vector_dims(embedding) = {dim}"
                ).format(
                    name=sql.Identifier(name),
                    dim=sql.Literal(dim),
                    ns=sql.Literal(self.ns),
                    model=sql.Literal(model_id),
                )
            )
            self._store.vector_indexes.add(name)

    async def _keep_vectors(self, ids: Sequence[int]) -> None:
        """The vectors of chunks about to go, into the embedding cache (see replace_file)."""
        if ids:
            await self.conn.execute(
                "INSERT INTO embedding_cache (ns, content_hash, model, embedding, created_at) "
                "SELECT ns, content_hash, embedding_model, embedding, %s FROM memory_chunks "
                "WHERE ns = %s AND id = ANY(%s) AND embedding IS NOT NULL "
                "ON CONFLICT DO NOTHING",
                (now(), self.ns, list(ids)),
            )

    async def _delete_chunks(self, ids: Sequence[int]) -> None:
        if not ids:
            return
        self.chunks_changed = True
        homeless = await self._homes_of(ids)
        await self._keep_vectors(ids)
        await self.conn.execute(
            "DELETE FROM memory_chunks WHERE ns = %s AND id = ANY(%s)", (self.ns, list(ids))
        )
        await self._rehome(homeless)

    async def _move_kept(
        self, chunks: Sequence[Chunk], kept: Mapping[int, Any], stamp: str
    ) -> set[int]:
        """Give kept rows their new position and fields (chunk_index goes through -id first,
        so no two rows of a file ever share one). Returns the chunk numbers whose metadata
        changed."""
        changed = await asyncio.to_thread(kept_changes, chunks, kept)
        if not changed:
            return set()
        moving = [rid for rid, moved, _ in changed if moved]
        if moving:
            await self.conn.execute(
                "UPDATE memory_chunks SET chunk_index = -id WHERE id = ANY(%s)", (moving,)
            )
        async with self.conn.cursor() as cur:
            await cur.executemany(
                "UPDATE memory_chunks SET chunk_index = %s, heading_path = %s, start_line = %s, "
                "end_line = %s, tags = %s, date = %s, metadata = %s, updated_at = %s "
                "WHERE id = %s",
                [(*new, stamp, rid) for rid, _, new in changed],
            )
        meta = {row[0]: row[8] for row in kept.values()}
        return {int(new[0]) for rid, _, new in changed if new[6] != meta[rid]}

    async def _revector_kept(
        self, kept: Mapping[int, Any], vectors: Sequence[Vector | None], model_id: str
    ) -> None:
        rows = [
            (as_list(v), model_id, row[0])
            for n, row in kept.items()
            if (v := vectors[n]) is not None and row[9] != model_id
        ]
        if rows:
            self.chunks_changed = True
            async with self.conn.cursor() as cur:
                await cur.executemany(
                    "UPDATE memory_chunks SET embedding = %s::float4[]::vector, "
                    "embedding_model = %s WHERE id = %s",
                    rows,
                )
            await self._ensure_vector_index(model_id, vectors)

    async def _put_memories(
        self, path: str, chunks: Sequence[Chunk], ids: Sequence[int], stamp: str
    ) -> None:
        """Memory rows of new or changed chunks (rows of deleted chunks went with them). An id
        that is already at home in a file with a smaller path becomes a copy."""
        if not ids:
            return
        for table in ("memories", "memory_copies"):
            await self.conn.execute(
                f"DELETE FROM {table} WHERE ns = %s AND chunk_id = ANY(%s)", (self.ns, list(ids))
            )
        rows = memory_rows(path, chunks, ids, stamp)
        if not rows:
            return
        current = {
            r[0]: (int(r[1]), r[2])
            for r in await self._all(
                "SELECT memory_id, chunk_id, path FROM memories "
                "WHERE ns = %s AND memory_id = ANY(%s)",
                (self.ns, list({r[0] for r in rows})),
            )
        }
        homes = choose_homes(rows, current)
        async with self.conn.cursor() as cur:
            if homes.copies or homes.demoted:
                await cur.executemany(
                    "INSERT INTO memory_copies (ns, memory_id, chunk_id, path) "
                    "VALUES (%s, %s, %s, %s) ON CONFLICT (chunk_id) DO NOTHING",
                    [(self.ns, *c) for c in (*homes.copies, *homes.demoted)],
                )
            if homes.homes:
                await cur.executemany(
                    _INSERT_MEMORY + " ON CONFLICT (ns, memory_id) DO UPDATE SET "
                    "chunk_id = excluded.chunk_id, "
                    "path = excluded.path, user_id = excluded.user_id, "
                    "agent_id = excluded.agent_id, run_id = excluded.run_id, "
                    "category = excluded.category, key = excluded.key, "
                    "created = excluded.created, updated = excluded.updated, "
                    "metadata = excluded.metadata, app_id = excluded.app_id",
                    [(self.ns, *m) for m in homes.homes],
                )

    async def _homes_of(self, chunk_ids: Sequence[int]) -> list[str]:
        """The memory ids whose home is one of these chunks."""
        rows = await self._all(
            "SELECT memory_id FROM memories WHERE ns = %s AND chunk_id = ANY(%s)",
            (self.ns, list(chunk_ids)),
        )
        return [r[0] for r in rows]

    async def _rehome(self, memory_ids: Sequence[str]) -> None:
        """Memories whose home went (its file deleted, or the item gone from it) move to their
        next copy, the smallest path, if there is one."""
        if not memory_ids:
            return
        copies = await self._all(
            "SELECT c.memory_id, c.chunk_id, c.path, k.metadata FROM memory_copies c "
            "JOIN memory_chunks k ON k.id = c.chunk_id WHERE c.ns = %s "
            "AND c.memory_id = ANY(%s) AND NOT EXISTS (SELECT 1 FROM memories m "
            "WHERE m.ns = c.ns AND m.memory_id = c.memory_id)",
            (self.ns, list(memory_ids)),
        )
        homes = next_homes(copies, now())
        if not homes:
            return
        async with self.conn.cursor() as cur:
            await cur.executemany(_INSERT_MEMORY, [(self.ns, *m) for m in homes])
        await self.conn.execute(
            "DELETE FROM memory_copies WHERE ns = %s AND chunk_id = ANY(%s)",
            (self.ns, [h[1] for h in homes]),
        )

    async def touch_file(self, state: FileState) -> None:
        await self._unskip([state.path])
        await self.conn.execute(
            "UPDATE files SET size = %s, mtime_ns = %s WHERE ns = %s AND path = %s",
            (state.size, state.mtime_ns, self.ns, state.path),
        )

    async def set_skipped(self, files: Sequence[SkippedFile]) -> None:
        if not files:
            return
        async with self.conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO skipped_files (ns, path, reason, size, mtime_ns, since) "
                "VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (ns, path) DO UPDATE SET "
                "reason = excluded.reason, size = excluded.size, mtime_ns = excluded.mtime_ns",
                [(self.ns, f.path, f.reason, f.size, f.mtime_ns, now()) for f in files],
            )

    async def _holds(self, path: str, stored_hash: str | None, first: int) -> bool:
        """Whether the file is stored as ``stored_hash``, with rows for its first chunks."""
        rows = await self._all(
            "SELECT f.content_hash, (SELECT count(*) FROM memory_chunks c WHERE c.ns = f.ns "
            "AND c.source_file = f.path AND c.chunk_index < %s) FROM files f "
            "WHERE f.ns = %s AND f.path = %s",
            (first, self.ns, path),
        )
        return bool(rows) and rows[0][0] == stored_hash and int(rows[0][1]) == first

    async def _unskip(self, paths: Sequence[str]) -> None:
        await self.conn.execute(
            "DELETE FROM skipped_files WHERE ns = %s AND path = ANY(%s)", (self.ns, list(paths))
        )

    async def delete_files(self, paths: Sequence[str]) -> int:
        if not paths:
            return 0
        await self._unskip(paths)
        self.chunks_changed = True
        ids = await self._ids_of(paths)
        homeless = await self._homes_of(ids)
        await self._keep_vectors(ids)
        await self.conn.execute(
            "DELETE FROM files WHERE ns = %s AND path = ANY(%s)", (self.ns, list(paths))
        )
        await self._rehome(homeless)
        return len(ids)

    async def set_vectors(self, vectors: Sequence[tuple[int, str, Vector]], model_id: str) -> int:
        wanted = {cid: (h, v) for cid, h, v in vectors}
        if not wanted:
            return 0
        current = dict(
            await self._all(
                "SELECT id, content_hash FROM memory_chunks WHERE ns = %s AND id = ANY(%s)",
                (self.ns, list(wanted)),
            )
        )
        fresh = [(cid, v) for cid, (h, v) in wanted.items() if current.get(cid) == h]
        if not fresh:
            return 0
        self.chunks_changed = True
        await self._keep_vectors([cid for cid, _ in fresh])  # another model's, replaced now
        async with self.conn.cursor() as cur:
            await cur.executemany(
                "UPDATE memory_chunks SET embedding = %s::float4[]::vector, embedding_model = %s "
                "WHERE id = %s",
                [(as_list(v), model_id, cid) for cid, v in fresh],
            )
        await self._ensure_vector_index(model_id, [v for _, v in fresh])
        return len(fresh)

    async def cache_vectors(self, vectors: Mapping[str, Vector], model_id: str) -> None:
        if not vectors:
            return
        stamp = now()
        async with self.conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO embedding_cache (ns, content_hash, model, embedding, created_at) "
                "VALUES (%s, %s, %s, %s::float4[]::vector, %s) "
                "ON CONFLICT (ns, content_hash, model) DO UPDATE SET "
                "embedding = excluded.embedding, created_at = excluded.created_at",
                [(self.ns, h, model_id, as_list(v), stamp) for h, v in vectors.items()],
            )

    async def set_meta(self, key: str, value: str) -> None:
        await self.conn.execute(
            "INSERT INTO meta (ns, key, value) VALUES (%s, %s, %s) "
            "ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value",
            (self.ns, key, value),
        )
