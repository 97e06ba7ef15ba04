"""A namespace's vectors held in this process, below ``storage.ann_min_vectors``.

Below that many vectors of one model, SQLite scans an exact matrix instead of a graph, and so
does PostgreSQL now: pgvector's HNSW index is not built (at 20k vectors its build was ~2.3 s of
an 11 s load, and an exact scan inside PostgreSQL takes ~25 ms a query), and each process
holds the vectors (20k x 256 float32: 20 MB) and scans them in ~1 ms.

The matrix is versioned by the namespace's ``generation`` counter, which every write that
changes chunks bumps on every machine. A snapshot newer than the matrix brings it up to date
in that snapshot, from the log each of those writes left (``vector_changes``: the ids it gave
a vector and the ids whose vector went); the new rows' vectors are read by id (binary COPY).
Where the log lacks a generation (pruned, or a write by an older memcore) the ids of the
chunks holding the model's vectors are read and compared with the matrix's instead. A
chunk's vector under one model never changes (``set_vectors`` writes only a chunk of another
model or none), so ids are enough. The matrix keeps serving the generation
before the newest, for snapshots begun just before a write; an older snapshot (or a model
past ``ann_min_vectors``) is answered in SQL, as before.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import numpy as np
import numpy.typing as npt
import psycopg
from psycopg import sql

from memcore.core.vectors import Matrix, VectorIndex

log = logging.getLogger(__name__)
Conn = psycopg.AsyncConnection[tuple[Any, ...]]
RELOAD_SHARE = 2  # more than 1/2 of the rows new: read them all again instead
RECOUNT_S = 600.0  # a model found past the limit is counted again after this long
LOG_KEEP = 4096  # generations whose changes stay logged
LOG_PRUNE = 256  # older ones are deleted every this many generations
_SIGNATURE = b"PGCOPY\n\xff\r\n\x00"


class HeldVectors:
    """The vectors of each (model, dimensions) of one namespace that has fewer than
    ``limit``, one versioned matrix each; None for the larger ones (searched in SQL)."""

    def __init__(self, namespace: str, limit: int) -> None:
        self.namespace = namespace
        self.limit = limit
        self._held: dict[tuple[str, int], VectorIndex] = {}
        # past the limit (pgvector's index serves): when it was counted
        self._large: dict[tuple[str, int], float] = {}
        self._loading: dict[tuple[str, int], asyncio.Lock] = {}
        self.compared = 0  # catch-ups that compared ids, the log lacking a generation

    def large(self, model_id: str, dim: int) -> bool:
        return (model_id, dim) in self._large

    def held(self, model_id: str, dim: int) -> tuple[int, int] | None:
        """(vectors, generation) of the matrix held for the model, if one is."""
        index = self._held.get((model_id, dim))
        return None if index is None else (len(index), index.generation)

    async def at(self, conn: Conn, generation: int, model_id: str, dim: int) -> VectorIndex | None:
        """The matrix serving a snapshot at ``generation`` (``conn`` inside it), brought up
        to date first; None when the model has ``limit`` vectors or more, or the snapshot is
        older than the matrix serves."""
        key = (model_id, dim)
        if self.limit <= 0:
            return None
        counted = self._large.get(key)
        if counted is not None:
            if time.monotonic() - counted < RECOUNT_S:
                return None
            del self._large[key]  # counted again: a vault emptied and rewritten may be small
        index = self._held.get(key)
        if index is not None and index.serves(generation):
            return index
        async with self._loading.setdefault(key, asyncio.Lock()):  # one reader reads them
            index = self._held.get(key)
            if index is not None and index.serves(generation):
                return index
            if index is not None and generation < index.floor:
                return None  # begun before the matrix's oldest state
            try:
                if index is None or not await self._catch_up(conn, generation, model_id, index):
                    # counted first: a model grown past the limit is never read in whole
                    if await self._count(conn, model_id, dim) >= self.limit:
                        self._large[key] = time.monotonic()
                        self._held.pop(key, None)
                        return None
                    index = await self._load(conn, generation, model_id, dim)
            except ValueError as exc:  # a reply not shaped as read: searched in SQL instead
                log.warning("could not read the vectors of %s into memory: %s", model_id, exc)
                self._held.pop(key, None)
                return None
            if len(index) >= self.limit:
                self._large[key] = time.monotonic()
                self._held.pop(key, None)
                return None
            self._held[key] = index
            return index

    async def _count(self, conn: Conn, model_id: str, dim: int) -> int:
        cur = await conn.execute(
            "SELECT count(*) FROM (SELECT 1 FROM memory_chunks WHERE ns = %s AND "
            "embedding_model = %s AND vector_dims(embedding) = %s LIMIT %s) s",
            (self.namespace, model_id, dim, self.limit),
        )
        row = await cur.fetchone()
        return int(row[0]) if row else 0

    async def _load(self, conn: Conn, generation: int, model_id: str, dim: int) -> VectorIndex:
        ids, mat = await self._vectors(conn, model_id, dim, None)
        index = VectorIndex(dim, generation)
        index.reserve(len(ids), dim)
        index.add(ids.tolist(), mat)
        return index

    async def _catch_up(
        self, conn: Conn, generation: int, model_id: str, index: VectorIndex
    ) -> bool:
        """Apply what changed since the matrix's generation, as one step: from the log of
        changes when it holds every generation since, else by comparing ids. False when
        most rows are new (a reload reads them faster)."""
        dim = index.dim or 0
        logged = await self._logged(conn, index.generation, generation)
        if logged is not None:
            touched, new = logged
        else:
            self.compared += 1
            ids = await _copy_ids(conn, self._select(model_id, dim, "id"))
            held = index.live_ids()
            new = np.setdiff1d(ids, held, assume_unique=True)
            touched = np.setdiff1d(held, ids, assume_unique=True)
        if len(new) * RELOAD_SHARE > len(index) + len(new):
            return False
        got, mat = await self._vectors(conn, model_id, dim, new) if len(new) else (new, None)
        before = index.generation
        index.apply(generation, touched.tolist(), got.tolist(), mat)
        index.compact(before)  # the state just before this one stays served
        return True

    async def _logged(
        self, conn: Conn, since: int, until: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
        """(ids touched, ids holding a new vector at ``until``) by the writes logged after
        ``since``; None when a generation in between has no row (pruned, or written by a
        memcore that does not log)."""
        cur = await conn.execute(
            "SELECT added, removed FROM vector_changes WHERE ns = %s AND generation > %s "
            "AND generation <= %s ORDER BY generation",
            (self.namespace, since, until),
        )
        rows = await cur.fetchall()
        if len(rows) != until - since:
            return None
        last: dict[int, bool] = {}  # each id's last change: given a vector, or taken one
        for added, removed in rows:
            last.update(dict.fromkeys(removed, False))
            last.update(dict.fromkeys(added, True))
        touched = np.fromiter(last, dtype=np.int64, count=len(last))
        return touched, np.asarray([i for i, has in last.items() if has], dtype=np.int64)

    async def _vectors(
        self, conn: Conn, model_id: str, dim: int, ids: npt.NDArray[np.int64] | None
    ) -> tuple[npt.NDArray[np.int64], Matrix]:
        query = self._select(model_id, dim, "id, embedding")
        if ids is not None:
            wanted = "{" + ",".join(map(str, ids.tolist())) + "}"
            query = sql.SQL("{} AND id = ANY({}::bigint[])").format(query, sql.Literal(wanted))
        return _parse_vectors(await _copy_out(conn, query), dim)

    def _select(self, model_id: str, dim: int, columns: str) -> sql.Composed:
        return sql.SQL(
            "SELECT {} FROM memory_chunks WHERE ns = {} AND embedding_model = {} "
            "AND vector_dims(embedding) = {}"
        ).format(
            sql.SQL(columns), sql.Literal(self.namespace), sql.Literal(model_id), sql.Literal(dim)
        )


async def log_changes(conn: Conn, namespace: str, added: list[int], removed: list[int]) -> None:
    """Bump the namespace's generation and log what the write did to its vectors, in one
    statement; every LOG_PRUNE generations, forget those older than LOG_KEEP."""
    cur = await conn.execute(
        "WITH g AS (UPDATE generation SET value = value + 1 WHERE ns = %s RETURNING value) "
        "INSERT INTO vector_changes (ns, generation, added, removed) "
        "SELECT %s, value, %s::int8[], %s::int8[] FROM g RETURNING generation",
        (namespace, namespace, list(dict.fromkeys(added)), list(dict.fromkeys(removed))),
    )
    row = await cur.fetchone()
    if row and int(row[0]) % LOG_PRUNE == 0:
        await conn.execute(
            "DELETE FROM vector_changes WHERE ns = %s AND generation <= %s",
            (namespace, int(row[0]) - LOG_KEEP),
        )


async def _copy_out(conn: Conn, query: sql.Composed) -> bytes:
    """A query's rows in PostgreSQL's binary COPY format, as one buffer."""
    out = bytearray()
    async with conn.cursor() as cur:
        copy_sql = sql.SQL("COPY ({}) TO STDOUT (FORMAT BINARY)").format(query)
        async with cur.copy(copy_sql) as copy:
            async for data in copy:
                out += data
    return bytes(out)


async def _copy_ids(conn: Conn, query: sql.Composed) -> npt.NDArray[np.int64]:
    body = _body(await _copy_out(conn, query))
    row = np.dtype([("n", ">i2"), ("len", ">i4"), ("id", ">i8")])
    rows = np.frombuffer(body, dtype=row, count=len(body) // row.itemsize)
    _check(rows, body, row.itemsize, (rows["n"] == 1) & (rows["len"] == 8))
    return np.sort(rows["id"].astype(np.int64))


def _parse_vectors(buf: bytes, dim: int) -> tuple[npt.NDArray[np.int64], Matrix]:
    """(ids, float32 matrix) of binary COPY rows (id bigint, embedding vector(dim)): every
    row is the same size, read as one numpy record array. pgvector sends a vector as its
    dimensions (int16), an unused int16 and the float4s, big-endian."""
    body = _body(buf)
    row = np.dtype(
        [("n", ">i2"), ("len", ">i4"), ("id", ">i8"), ("vlen", ">i4"), ("dim", ">i2"),
         ("unused", ">i2"), ("v", ">f4", (dim,))]
    )  # fmt: skip
    rows = np.frombuffer(body, dtype=row, count=len(body) // row.itemsize)
    ok = (rows["n"] == 2) & (rows["len"] == 8) & (rows["vlen"] == 4 + 4 * dim)
    _check(rows, body, row.itemsize, ok & (rows["dim"] == dim))
    return rows["id"].astype(np.int64), rows["v"].astype(np.float32)


def _body(buf: bytes) -> bytes:
    """The tuples of a binary COPY: past the header, before the trailer (-1 as int16)."""
    if not buf.startswith(_SIGNATURE) or buf[-2:] != b"\xff\xff":
        raise ValueError("not a binary COPY")
    extension = int.from_bytes(buf[15:19], "big")
    return buf[19 + extension : -2]


def _check(rows: Any, body: bytes, size: int, ok: npt.NDArray[np.bool_]) -> None:
    if len(rows) * size != len(body) or not bool(ok.all()):
        raise ValueError("a binary COPY row is not the expected shape")
