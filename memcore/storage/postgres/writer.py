"""PostgresWriter: the write transaction in progress, holding its namespace's advisory lock."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from psycopg import sql

from memcore.core.errors import StorageError
from memcore.core.models import (
    Chunk,
    FileState,
    SkippedFile,
)
from memcore.storage.base import (
    FileRows,
    Vector,
)
from memcore.storage.postgres import file_rows
from memcore.storage.postgres.queries import (
    INSERT_MEMORY,
    Conn,
    Queries,
    StoreState,
    as_param,
    vector_index_name,
)
from memcore.storage.rows import (
    next_homes,
    now,
)

# candidates each vector's links are chosen from as the graph is built (pgvector's default is
# 64): 40 builds it ~25% faster, and searched with the store's ef_search of 400 its recall@10
# against an exact scan is the same (1.000 at 20k chunks; 0.9945 against 1.000 at ef_search
# 100), measured with the fleet's vectors
EF_CONSTRUCTION = 40
# links a vector keeps (pgvector's m, default 16; twice as many on the bottom layer). At 1M
# 256-d vectors (200 queries near stored vectors, recall@10 against an exact scan, the
# store's ef_search of 400), on two vaults: 12 builds in 127-129 s with recall 0.9655 and
# 0.9600, 16 in 159-178 s with 0.9645 on both; the graph needs a quarter less memory
# (ef_construction 32 with m 12: 116 s, but 0.9330)
HNSW_M = 12
ANALYZE_FROM = 2000  # chunks a bulk load writes before the planner's statistics are refreshed


class PostgresWriter(Queries):
    """The write transaction in progress, holding its namespace's advisory lock."""

    def __init__(self, conn: Conn, store: StoreState) -> None:
        super().__init__(conn, store)
        self.chunks_changed = False
        # chunk ids given a vector, and ids whose vector went: logged with the generation
        # (vector_changes) for the processes holding the vectors (held_vectors.py)
        self.added: list[int] = []
        self.removed: list[int] = []

    def vectors_changed(self, ids: Sequence[int], *, added: bool, removed: bool) -> None:
        self.chunks_changed = True
        if added:
            self.added += ids
        if removed:
            self.removed += ids

    async def file_state(self, path: str) -> FileState | None:
        rows = await self.all(
            "SELECT path, content_hash, size, mtime_ns FROM files WHERE ns = %s AND path = %s",
            (self.ns, path),
        )
        return FileState(rows[0][0], rows[0][1], int(rows[0][2]), int(rows[0][3])) if rows else None

    async def replace_files(self, files: Sequence[FileRows], model_id: str) -> list[str]:
        return (await self._replace(files, model_id, ids=False))[1]

    async def replace_file(
        self,
        state: FileState,
        chunks: Sequence[Chunk],
        vectors: Sequence[Vector | None],
        model_id: str,
        unchanged: int = 0,
        stored_hash: str | None = None,
    ) -> list[int]:
        rows = FileRows(state, chunks, vectors, unchanged, stored_hash)
        return (await self._replace([rows], model_id))[0][state.path]

    async def _replace(
        self, files: Sequence[FileRows], model_id: str, ids: bool = True
    ) -> tuple[dict[str, list[int]], list[str]]:
        """Every file in a few statements (file_rows.py); a path given twice goes in order.
        Each file's chunk ids (unless not ``ids``), and the appends left unwritten."""
        out: dict[str, list[int]] = {}
        left: list[str] = []
        run: dict[str, FileRows] = {}
        for f in [*files, None]:
            if (f is None or f.state.path in run) and run:
                made, missed = await file_rows.replace_files(
                    self, list(run.values()), model_id, now(), ids
                )
                out |= made
                left += missed
                run = {}
            if f is not None:
                run[f.state.path] = f
        return out, left

    async def stage(self) -> None:
        """The temporary table new chunks are copied into, made once a connection."""
        if self.conn not in self._store.staged:
            await self.conn.execute(file_rows.CREATE_STAGE)
            self._store.staged.add(self.conn)

    @property
    def bm25(self) -> str:
        """pg_textsearch's version when new rows need the text its index ranks."""
        return self._store.bm25

    async def count_bulk(self, chunks: int) -> None:
        """New chunks written, counted while a bulk load is under way. Each time the load has
        doubled what it wrote (from 2,000 chunks on) the planner's statistics are refreshed
        in the transaction: on a table it has no statistics of, the lookups a load makes
        (cached vectors by hash) scanned the table, 73 ms each at 20k (measured)."""
        if not self._store.bulk_loads:
            return
        self._store.bulk_rows += chunks
        if self._store.bulk_rows >= max(ANALYZE_FROM, 2 * self._store.bulk_analyzed):
            self._store.bulk_analyzed = self._store.bulk_rows
            await self.conn.execute("ANALYZE memory_chunks, memories")

    def type_oid(self, name: str) -> int:
        """A column type's oid, for binary COPY (``vector``'s is the database's own)."""
        if name == "vector":
            return int(self._store.vector_oid)
        info = self.conn.adapters.types.get(name)
        if info is None:
            raise StorageError(f"no type {name} known to the driver")
        return int(info.oid)

    async def ensure_vector_index(self, model_id: str, vectors: Sequence[Vector | None]) -> None:
        """The HNSW index of this namespace and model, owed with its first vector and built
        right after this transaction, in one of its own (``PostgresStore.transaction``);
        during a bulk load (``PostgresStore.bulk``), after the load, over every row at once;
        either way only once the model has ``ann_min_vectors`` (bulk.build_missing_indexes).
        Never inside the transaction that wrote rows: pg_textsearch 1.0 keeps its index lock
        to the end of a transaction that inserted, and a CREATE INDEX waiting there behind
        autovacuum deadlocks with it, past any timeout (seen: every write of the namespace
        stalled; timescale/pg_textsearch#370)."""
        dims = Counter(int(np.asarray(v).size) for v in vectors if v is not None)
        small = self._store.small_indexes
        for dim, added in dims.items():
            name = vector_index_name(self.ns, model_id, dim)
            if name in self._store.vector_indexes or name in self._store.owed_indexes:
                continue
            if name in small:  # counted when it was not built: too few vectors then
                small[name] += added  # (deletes not subtracted: counted again when due)
                if small[name] < self._store.ann_min_vectors:
                    continue
                del small[name]
            found = await self.all("SELECT to_regclass(%s) IS NOT NULL", (name,))
            if found[0][0]:
                self._store.vector_indexes.add(name)
            else:
                self._store.owed_indexes[name] = (model_id, dim)

    async def create_vector_index(self, model_id: str, dim: int) -> None:
        name = vector_index_name(self.ns, model_id, dim)
        await self.conn.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {name} ON memory_chunks USING hnsw "
                "((embedding::vector({dim})) vector_cosine_ops) "
                "WITH (m = {m}, ef_construction = {efc}) WHERE ns = {ns} "
                "AND embedding_model = {model} AND vector_dims(embedding) = {dim}"
            ).format(
                name=sql.Identifier(name),
                dim=sql.Literal(dim),
                m=sql.Literal(HNSW_M),
                efc=sql.Literal(EF_CONSTRUCTION),
                ns=sql.Literal(self.ns),
                model=sql.Literal(model_id),
            )
        )
        self._store.vector_indexes.add(name)
        self._store.owed_indexes.pop(name, None)

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

    async def delete_chunks(self, ids: Sequence[int]) -> None:
        if not ids:
            return
        self.vectors_changed(ids, added=False, removed=True)
        homeless = await self._homes_of(ids)
        await self._keep_vectors(ids)
        await self.conn.execute(
            "DELETE FROM memory_chunks WHERE ns = %s AND id = ANY(%s)", (self.ns, list(ids))
        )
        await self._rehome(homeless)

    async def revector_kept(self, kept: Sequence[tuple[Any, Vector | None]], model_id: str) -> None:
        """Kept rows (OLD_CHUNK_COLUMNS) that hold another model's vector (or none) take the
        one made now."""
        rows = [
            (as_param(v), model_id, row[0])
            for row, v in kept
            if v is not None and row[9] != model_id
        ]
        if rows:
            self.vectors_changed([r[2] for r in rows], added=True, removed=True)
            async with self.conn.cursor() as cur:
                await cur.executemany(
                    "UPDATE memory_chunks SET embedding = %s::vector, "
                    "embedding_model = %s WHERE id = %s",
                    rows,
                )
            await self.ensure_vector_index(model_id, [v for _, v in kept])

    async def _homes_of(self, chunk_ids: Sequence[int]) -> list[str]:
        """The memory ids whose home is one of these chunks."""
        rows = await self.all(
            "SELECT memory_id FROM memories WHERE ns = %s AND chunk_id = ANY(%s)",
            (self.ns, list(chunk_ids)),
        )
        return [r[0] for r in rows]

    async def _rehome(self, memory_ids: Sequence[str]) -> None:
        """Memories whose home went (its file deleted, or the item gone from it) move to their
        next copy, the smallest path, if there is one."""
        if not memory_ids:
            return
        copies = await self.all(
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
            await cur.executemany(INSERT_MEMORY, [(self.ns, *m) for m in homes])
        await self.conn.execute(
            "DELETE FROM memory_copies WHERE ns = %s AND chunk_id = ANY(%s)",
            (self.ns, [h[1] for h in homes]),
        )

    async def touch_file(self, state: FileState) -> None:
        await self.unskip([state.path])
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

    async def holding(self, claims: Sequence[tuple[str, str | None, int]]) -> set[str]:
        """Of (path, stored hash, first n chunks) claims, the paths stored as that hash with
        rows for those chunks, in one statement."""
        if not claims:
            return set()
        rows = await self.all(
            "SELECT f.path, f.content_hash = u.h AND (SELECT count(*) FROM memory_chunks c "
            "WHERE c.ns = f.ns AND c.source_file = f.path AND c.chunk_index < u.n) = u.n "
            "FROM files f JOIN unnest(%s::text[], %s::text[], %s::int4[]) AS u(p, h, n) "
            "ON f.path = u.p WHERE f.ns = %s",
            ([c[0] for c in claims], [c[1] for c in claims], [c[2] for c in claims], self.ns),
        )
        return {str(r[0]) for r in rows if r[1]}

    async def unskip(self, paths: Sequence[str]) -> None:
        await self.conn.execute(
            "DELETE FROM skipped_files WHERE ns = %s AND path = ANY(%s)", (self.ns, list(paths))
        )

    async def delete_files(self, paths: Sequence[str]) -> int:
        if not paths:
            return 0
        await self.unskip(paths)
        ids = await self._ids_of(paths)
        self.vectors_changed(ids, added=False, removed=True)
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
            await self.all(
                "SELECT id, content_hash FROM memory_chunks WHERE ns = %s AND id = ANY(%s)",
                (self.ns, list(wanted)),
            )
        )
        fresh = [(cid, v) for cid, (h, v) in wanted.items() if current.get(cid) == h]
        if not fresh:
            return 0
        self.vectors_changed([cid for cid, _ in fresh], added=True, removed=True)
        await self._keep_vectors([cid for cid, _ in fresh])  # another model's, replaced now
        async with self.conn.cursor() as cur:
            await cur.executemany(
                "UPDATE memory_chunks SET embedding = %s::vector, embedding_model = %s "
                "WHERE id = %s",
                [(as_param(v), model_id, cid) for cid, v in fresh],
            )
        await self.ensure_vector_index(model_id, [v for _, v in fresh])
        return len(fresh)

    async def cache_vectors(self, vectors: Mapping[str, Vector], model_id: str) -> None:
        if not vectors:
            return
        stamp = now()
        async with self.conn.cursor() as cur:
            await cur.executemany(
                "INSERT INTO embedding_cache (ns, content_hash, model, embedding, created_at) "
                "VALUES (%s, %s, %s, %s::vector, %s) "
                "ON CONFLICT (ns, content_hash, model) DO UPDATE SET "
                "embedding = excluded.embedding, created_at = excluded.created_at",
                [(self.ns, h, model_id, as_param(v), stamp) for h, v in vectors.items()],
            )

    async def supply_vectors(self, vectors: Mapping[str, Vector], model_id: str) -> int:
        await self.cache_vectors(vectors, model_id)
        rows = await self.all(
            "SELECT id, content_hash FROM memory_chunks WHERE ns = %s AND content_hash = ANY(%s)",
            (self.ns, list(vectors)),
        )
        return await self.set_vectors([(cid, h, vectors[h]) for cid, h in rows], model_id)

    async def set_meta(self, key: str, value: str) -> None:
        await self.conn.execute(
            "INSERT INTO meta (ns, key, value) VALUES (%s, %s, %s) "
            "ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value",
            (self.ns, key, value),
        )
