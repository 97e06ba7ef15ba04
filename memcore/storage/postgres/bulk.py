"""Bulk loads on PostgreSQL (``PostgresStore.bulk``): vector indexes built once after a load
instead of row by row, and the table left as searches need it (statistics, visibility, the
full-text indexes' write buffers merged). pgvector builds a graph ~5x faster a row than it
inserts into one (0.08 against 0.45 ms a row at 10k rows, measured)."""

from __future__ import annotations

import logging
from contextlib import AbstractAsyncContextManager
from typing import Protocol

from psycopg import sql

from memcore.storage.postgres.bm25 import INDEX as BM25_INDEX
from memcore.storage.postgres.queries import vector_index_name
from memcore.storage.postgres.writer import HNSW_M, PostgresWriter

# A load rebuilds a vector index holding at most this many times the rows it expects to add
REBUILD_SHARE = 4

log = logging.getLogger(__name__)


def graph_memory_mb(count: int, dim: int) -> int:
    """The maintenance_work_mem an HNSW build of ``count`` vectors of ``dim`` dimensions
    needs (MB): each vector (4 bytes a dimension and a header), its bottom layer's links (16
    bytes each), and ~200 bytes for the element, its upper layers and the allocator.
    pgvector builds the graph in memory until it no longer fits, then inserts the rest
    about as slowly as row by row: 1M 256-d vectors (m 16) took 341 s with 1,459 MB (full
    after 894k: 1.71 KB each) against 178 s with 2,079 MB (measured, two cores)."""
    per_vector = dim * 4 + 8 + 2 * HNSW_M * 16 + 200
    return max(64, count * per_vector >> 20)


class BulkStore(Protocol):
    """What a bulk load needs of the PostgresStore."""

    namespace: str
    bm25: str
    vector_indexes: set[str]
    owed_indexes: dict[str, tuple[str, int]]
    bulk_rows: int
    bulk_analyzed: int
    vacuumed: bool  # the last load ended with VACUUM (ANALYZE): the statistics are fresh
    ann_min_vectors: int  # a model's vectors from which its HNSW index is built
    small_indexes: dict[str, int]  # not built, their vectors too few: how many there were
    build_memory_mb: int  # at most this much maintenance_work_mem for a vector index's build

    def transaction(self) -> AbstractAsyncContextManager[PostgresWriter]: ...

    async def outside_transaction(self, statement: str) -> list[tuple[object, ...]]: ...


async def drop_small_indexes(store: BulkStore, expected: int) -> None:
    """Drop the namespace's vector indexes that hold at most REBUILD_SHARE x ``expected``
    rows, and owe them (built by ``settle``)."""
    async with store.transaction() as tx:
        for model_id, dim, count in await _vector_counts(tx, store.namespace):
            if count > REBUILD_SHARE * expected:
                continue
            name = vector_index_name(store.namespace, model_id, dim)
            await tx.conn.execute(sql.SQL("DROP INDEX IF EXISTS {}").format(sql.Identifier(name)))
            store.vector_indexes.discard(name)
            store.owed_indexes[name] = (model_id, dim)


async def build_missing_indexes(store: BulkStore) -> None:
    """Every vector index the namespace's vectors should have and that does not exist (owed
    by a load, or lost with a process that died during one), built over every row, with the
    memory to build it fast. A model with fewer than ``ann_min_vectors`` vectors gets none:
    each process searches it in a matrix it holds (held_vectors.py)."""
    async with store.transaction() as tx:
        counts = await _vector_counts(tx, store.namespace)
        wanted = {vector_index_name(store.namespace, m, d) for m, d, _ in counts}
        for gone in set(store.owed_indexes) - wanted:  # its vectors went before it was built
            del store.owed_indexes[gone]
        for model_id, dim, count in counts:
            name = vector_index_name(store.namespace, model_id, dim)
            found = await tx.all("SELECT to_regclass(%s) IS NOT NULL", (name,))
            if found[0][0]:
                store.vector_indexes.add(name)
                store.owed_indexes.pop(name, None)
                continue
            if count < store.ann_min_vectors:  # searched in a matrix each process holds
                store.owed_indexes.pop(name, None)
                store.small_indexes[name] = count
                continue
            need = graph_memory_mb(count, dim)  # fastest with the whole graph in memory
            if need > store.build_memory_mb:  # pgvector says so only in a NOTICE
                log.warning(
                    "building the vector index of %d vectors in %d MB; it wants ~%d MB "
                    "(storage.build_memory_mb) and builds slower without it",
                    count, store.build_memory_mb, need,
                )  # fmt: skip
            mb = min(store.build_memory_mb, need * 5 // 4)  # a quarter to spare
            await tx.conn.execute(f"SET LOCAL maintenance_work_mem = '{mb}MB'")
            await tx.create_vector_index(model_id, dim)


async def settle(store: BulkStore) -> None:
    """After a load: the owed indexes built; and, when the load was a large share of the
    table, VACUUM (ANALYZE). A load leaves every new row for each search to check and mark
    (hint bits), GIN's pending list for every search to read through, and the planner without
    statistics: 24 ms a search right after 20k rows instead of 9 (measured). pg_textsearch's
    index is built again when the load was a large share of it: filled row by row it ranks
    worse than built in one go (CMRC nDCG@10 0.956 against 0.983, SQLite's; 0.5 s at 20k
    chunks); else its memtable goes into a segment."""
    written, store.bulk_rows, store.bulk_analyzed = store.bulk_rows, 0, 0
    rows = await store.outside_transaction(
        "SELECT reltuples FROM pg_class WHERE oid = 'memory_chunks'::regclass"
    )
    large = not rows or float(str(rows[0][0])) < 10 * written
    if large:  # first: the build then reads rows already marked visible
        await store.outside_transaction("VACUUM (ANALYZE) memory_chunks, memories")
        store.vacuumed = True
    if store.owed_indexes:
        await build_missing_indexes(store)
    if store.bm25 and large:
        await store.outside_transaction(f"REINDEX INDEX {BM25_INDEX}")
    elif store.bm25:
        await store.outside_transaction(f"SELECT bm25_spill_index('{BM25_INDEX}')")


async def _vector_counts(tx: PostgresWriter, namespace: str) -> list[tuple[str, int, int]]:
    rows = await tx.all(
        "SELECT embedding_model, vector_dims(embedding), count(*) FROM memory_chunks "
        "WHERE ns = %s AND embedding IS NOT NULL GROUP BY 1, 2",
        (namespace,),
    )
    return [(str(r[0]), int(r[1]), int(r[2])) for r in rows]
