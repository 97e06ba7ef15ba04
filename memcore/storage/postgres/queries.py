"""What the PostgreSQL adapter's reads (reader.py) and writes (writer.py) share: the store's
state they need, the text search configuration, vector parameters and the k-nearest query.
Every query names the store's namespace."""

from __future__ import annotations

import asyncio
import hashlib
import weakref
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np
import psycopg
from psycopg import sql

from memcore.core.models import (
    SearchFilters,
)
from memcore.core.own_words import Words
from memcore.core.tokenize import (
    CommonCounts,
)
from memcore.storage.base import (
    Vector,
)
from memcore.storage.postgres.held_vectors import HeldVectors


class StoreState(Protocol):
    """What a snapshot or a transaction needs of the PostgresStore that opened it. The store
    has these; they are declared here so that this module never imports the store back."""

    namespace: str
    iterative_scan: bool  # pgvector >= 0.8
    bm25: str  # pg_textsearch's version when keywords are ranked in its index, else ""
    bm25_sound: bool  # False while its index is rebuilt (see bm25.lost_statistics)
    bm25_check_due: bool  # connected again since its index was last checked
    words: Words  # the vault's own dictionary and stop words
    k1: float  # BM25's term-frequency saturation and length normalization (keywords.k1 / b)
    b: float

    def bm25_lost(self) -> None:
        """The index lost its statistics: rank without it, and rebuild it."""
        ...

    vector_indexes: set[str]  # HNSW indexes known to exist
    pending_memo: dict[tuple[int, str], int]
    count_memo: dict[str, float]
    common_counts: CommonCounts  # chunk counts of common query words (see keywords.py)
    vector_oid: int  # the database's oid of pgvector's type, for binary COPY
    staged: weakref.WeakSet[Conn]  # connections that have their COPY staging table
    bulk_loads: int  # bulk loads under way (see PostgresStore.bulk)
    bulk_rows: int  # chunks they have written
    bulk_analyzed: int  # bulk_rows when the planner's statistics were last refreshed
    owed_indexes: dict[str, tuple[str, int]]  # HNSW indexes a bulk load left to build after
    ann_min_vectors: int  # a model's vectors from which its HNSW index is built
    small_indexes: dict[str, int]  # HNSW indexes not built, their vectors too few: how many
    held: HeldVectors  # the models' vectors below ann_min_vectors, held in this process

    async def idle_reader(self) -> Conn | None:
        """A reader connection no snapshot is using (opened if the pool has room), or None."""
        ...

    async def end_side_read(self, conn: Conn) -> None:
        """Roll back what ``idle_reader``'s connection did, and give it back."""
        ...


Conn = psycopg.AsyncConnection[tuple[Any, ...]]
TS = "memcore"  # the text search configuration of migration 0001
INSERT_MEMORY = (
    "INSERT INTO memories (ns, memory_id, chunk_id, path, user_id, agent_id, run_id, category, "
    "key, created, updated, metadata, app_id, expires, immutable) "
    "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
)


class VectorParam:
    """A vector as a statement's parameter, sent in pgvector's own binary form (its dumper is
    registered on every connection: ``file_rows.register_vectors``). As a float4[] of Python
    floats it was dumped as text: 0.4 ms of the event loop's time for 256 dimensions, twice a
    search, and parsed float by float on the server."""

    __slots__ = ("values",)

    def __init__(self, vec: Vector) -> None:
        self.values = np.asarray(vec, dtype=np.float32).ravel()


def as_param(vec: Vector) -> VectorParam:
    """A vector as the parameter of ``%s::vector`` (see VectorParam)."""
    return VectorParam(vec)


def as_vector(value: Sequence[float]) -> Vector:
    return np.asarray(value, dtype=np.float32)


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
        "SELECT c.id, c.embedding::{t} <=> %s::{t} AS d FROM memory_chunks c "
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


class Queries:
    """Queries on one connection, inside the store's namespace (a snapshot or a transaction)."""

    def __init__(self, conn: Conn, store: StoreState) -> None:
        self.conn = conn
        self._store = store
        self.ns = store.namespace
        # a scope's few chunk ids, being read or read (see KeywordQueries._few_ids)
        self._few_memo: tuple[SearchFilters, asyncio.Future[list[int] | None]] | None = None
        # the last words counted: (words, counts, chunks counted over: the index's or a scope's)
        self._counted: tuple[list[str], dict[str, int], int] | None = None

    @property
    def own_words(self) -> Words:
        """The vault's own dictionary and stop words, which its chunks' full text holds."""
        return self._store.words

    async def all(
        self, query: str | sql.Composed, params: Sequence[object] = (), *, prepare: bool = True
    ) -> list[Any]:
        """The rows of one statement. ``prepare=False`` keeps the driver from preparing it
        on the server after a few runs (see keywords.py: pg_textsearch's BM25 scan)."""
        cur = await self.conn.execute(query, params, prepare=None if prepare else False)
        return list(await cur.fetchall())

    async def all_of(self, statements: Sequence[tuple[str, Sequence[object]]]) -> list[list[Any]]:
        """The rows of each statement, all sent in one round trip (a pipeline)."""
        async with self.conn.pipeline():
            cursors = [await self.conn.execute(q, p) for q, p in statements]
        return [list(await cur.fetchall()) for cur in cursors]

    async def _ids_of(self, paths: Sequence[str]) -> list[int]:
        rows = await self.all(
            "SELECT id FROM memory_chunks WHERE ns = %s AND source_file = ANY(%s)",
            (self.ns, list(paths)),
        )
        return [int(r[0]) for r in rows]
