"""SqliteStore: the storage ports on one SQLite file via aiosqlite (WAL, FTS5, numpy vectors).

One writer connection runs the short write transactions, one at a time; a small pool of reader
connections gives each snapshot its own WAL read transaction, so a search never sees a
half-written file. Vectors are searched in one in-memory matrix per model (``VectorIndex``),
versioned by the ``generation`` counter every write bumps: a snapshot searches the matrix as of
its own generation, writes made here are applied incrementally, and a write by another process
(a newer generation nobody here applied) makes the next snapshot reload the matrix.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import shutil
import sqlite3
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager, suppress
from functools import partial
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Self, TypeAlias

import aiosqlite
import numpy as np
import numpy.typing as npt

from memcore.core.errors import StorageBusy, StorageError, StorageFull
from memcore.core.nodes import NodeCard, NodeInfo
from memcore.core.own_words import NO_WORDS, Words
from memcore.core.places import open_private
from memcore.core.tokenize import CommonCounts, fts_text
from memcore.core.vectors import Matrix, VectorIndex, normalize_rows
from memcore.storage.base import NodeRoles, Vector
from memcore.storage.exact_vectors import ExactVectors
from memcore.storage.migrations import load_migrations
from memcore.storage.rows import now
from memcore.storage.sqlite.file_rows import enqueue, on_thread
from memcore.storage.sqlite.graphs import FETCH, absent_from, changes_to, copy_vectors, differences
from memcore.storage.sqlite.queries import SqliteReader
from memcore.storage.sqlite.snapshot import begin_snapshot
from memcore.storage.sqlite.tokens import retokenize
from memcore.storage.sqlite.writer import SqliteWriter

if TYPE_CHECKING:  # usearch (and numkong) load only for a vault that needs the graph
    from memcore.storage.ann import AnnIndex

# Reader connections, each a thread; more concurrent reads than this queue up. One per core
# (at least 2): the searches' SQL holds the GIL for part of its run, so more readers than cores
# only take turns at it. Under 12 clients on 2 cores over 60 s, a third reader still trades
# adds for searches: search p99 71-88 ms against 70-76, add p99 183-229 against 130-140
# (bench/http_api.py, docs/performance.md).
READERS = max(2, min(8, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                     else os.cpu_count() or 2))  # fmt: skip
ANN_MIN_VECTORS = 50_000  # from here a model's vectors are searched in an HNSW graph
# Page cache of each reader connection. SQLite's default (2 MB) holds none of a big index's
# full-text working set, so every search read the same pages again: at 119k chunks 142 MB
# in 33k read calls for 500 searches, against 36 MB in 7k with 128 MB (of which 13 MB filled).
READER_CACHE_MB = 128
# Page cache of the connection kept for writes' reads (what a batch compares before writing:
# each file's rows, read once). With the searches' 128 MB it filled up over a batch and kept
# it: peak RSS of 200k memories over 2k users in one `add --file` (no graph) 809 MB, against
# 672 MB with 8, and no slower (64 s against 72).
WRITE_READS_CACHE_MB = 8
# In saved graphs' names: a graph saved in an older format is rebuilt (3: int8 with float16
# copies beside it; 2: float16).
GRAPH_FORMAT = 3
# A loaded graph lacking more float16 copies than this (and 5% of them) has them all written
# anew from the index, streamed; fewer are read into memory until the next save.
REWRITE_COPIES = 10_000

log = logging.getLogger(__name__)
Vectors: TypeAlias = "VectorIndex | AnnIndex"


def translate(exc: sqlite3.Error, what: str) -> StorageError:
    """A driver error as a one-line StorageError (StorageBusy when another writer holds on)."""
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    if isinstance(exc, sqlite3.OperationalError) and ("locked" in text or "busy" in text):
        return StorageBusy(f"index is busy ({what}): {text}; another process is writing to it")
    if isinstance(exc, sqlite3.OperationalError) and "disk is full" in text:  # SQLITE_FULL
        return StorageFull(f"index {what} failed: the disk is full ({text})")
    return StorageError(f"index {what} failed: {text}")


def _scratch_folder() -> Path:
    """A private folder for a ":memory:" index: in memory-backed /dev/shm where there is one."""
    shm = "/dev/shm"
    where = shm if os.path.isdir(shm) and os.access(shm, os.W_OK) else None
    return Path(tempfile.mkdtemp(prefix="memcore-", dir=where))


class SqliteStore:
    """Index database in one SQLite file. Open with ``async with SqliteStore(path) as store``."""

    backend = "sqlite"
    keywords_take_vector = False

    def __init__(
        self,
        path: Path,
        *,
        readers: int = READERS,
        busy_timeout_s: float = 10.0,
        ann_min_vectors: int = ANN_MIN_VECTORS,
        reader_cache_mb: int = READER_CACHE_MB,
        words: Words = NO_WORDS,
    ) -> None:
        # ":memory:": a database in a private folder of its own, in memory-backed /dev/shm
        # where there is one, removed when the store closes. (SQLite's own :memory: is one
        # connection's, and its shared cache has no WAL: readers would block the writer.)
        self._in_memory = str(path) == ":memory:"
        self._scratch: Path | None = None
        self.path = path
        self.reader_cache_mb = reader_cache_mb
        self.words = words  # the vault's own dictionary and stop words
        self.retokenized = 0  # chunks tokenized again at open, the words having changed
        self.ann_min_vectors = ann_min_vectors
        self._index_id = ""
        self._busy_ms = max(0, int(busy_timeout_s * 1000))
        self._max_readers = max(1, readers)
        self._writer: aiosqlite.Connection | None = None
        self._readers: asyncio.Queue[aiosqlite.Connection | None] | None = None
        self._opening = 0  # reader connections being opened (see _open_reader)
        self._all_readers: list[aiosqlite.Connection] = []
        # one more connection, for the reads a write makes (see snapshot): never queued
        # behind searches; while one write's read has it, another's takes a reader
        self._write_reader: aiosqlite.Connection | None = None
        self._write_reads = asyncio.Lock()
        self._closing: set[asyncio.Task[None]] = set()  # readers being closed (dropped)
        self._write_lock = asyncio.Lock()
        self._loading: dict[str, asyncio.Lock] = {}  # model -> its load or catch-up
        self._building: dict[str, asyncio.Task[None]] = {}  # model -> its graph being built
        self._retired: dict[str, VectorIndex] = {}  # a matrix a graph replaced: older snapshots
        self._vectors: dict[str, Vectors] = {}
        self._open_snapshots: Counter[int] = Counter()
        self._applying: dict[int, asyncio.Event] = {}  # committed here, matrix not yet updated
        self.pending_memo: dict[tuple[int, str], int] = {}  # (generation, model) -> pending
        self.common_counts = CommonCounts()  # estimated chunk counts of common query words

    @property
    def location(self) -> str:
        return ":memory:" if self._in_memory else str(self.path)

    def node_roles(self, card: NodeCard) -> NodeRoles | None:
        return None  # this machine's own index: the vault's lock file decides

    async def nodes(self) -> list[NodeInfo]:
        return []

    @asynccontextmanager
    async def holding(self, paths: Sequence[str]) -> AsyncIterator[None]:
        yield  # the processes sharing this file are on one machine: the files' flock serves

    @property
    def engine(self) -> str:
        return f"SQLite {sqlite3.sqlite_version}"

    async def __aenter__(self) -> Self:
        await self.open()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def open(self) -> None:
        """Open the writer connection and bring the schema up to date. Raises StorageError."""
        try:
            if self._in_memory and self._scratch is None:
                self._scratch = await asyncio.to_thread(_scratch_folder)
                self.path = self._scratch / "index.db"
            if not self.path.parent.is_dir():
                raise StorageError(f"cannot open index {self.path}: folder does not exist")
            if not self.path.exists():  # 0600: SQLite gives its -wal and -shm the same mode
                os.close(open_private(self.path, os.O_RDWR))
            self._writer = await self._connect()
            await self._writer.execute("PRAGMA journal_mode = WAL")
            own = self.words
            await self._writer.create_function(
                "memcore_fts", 2, lambda h, t: fts_text(h, t, own), deterministic=True
            )
            await self._migrate(self._writer)
            self.retokenized = await retokenize(self._writer, own)
            async with self._writer.execute("SELECT value FROM meta WHERE key = 'index_id'") as cur:
                row = await cur.fetchone()
            self._index_id = str(row[0]) if row else ""
            self._readers = asyncio.Queue()
        except (sqlite3.Error, OSError) as exc:
            await self.close()
            raise StorageError(f"cannot open index {self.path}: {exc}") from exc
        except BaseException:
            await self.close()
            raise

    async def _connect(self, cache_mb: int | None = None) -> aiosqlite.Connection:
        # check_same_thread off: a snapshot reads a few rows by key on the event loop while
        # its connection's thread is idle (SqliteReader.hit_rows; the module is serialized)
        conn = await aiosqlite.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            await conn.execute(f"PRAGMA busy_timeout = {self._busy_ms}")
            await conn.execute("PRAGMA synchronous = NORMAL")
            await conn.execute("PRAGMA foreign_keys = ON")
            await conn.execute("PRAGMA temp_store = MEMORY")  # a scope's ranking table
            if cache_mb is not None:
                await conn.execute(f"PRAGMA cache_size = {-1024 * cache_mb}")
        except BaseException:
            # Its worker thread is not a daemon: left open, it keeps the process from exiting.
            with suppress(sqlite3.Error, ValueError):
                await conn.close()
            raise
        return conn

    async def close(self) -> None:
        """Close every connection. Waits for the write transaction in progress, if any."""
        builds = [t for t in self._building.values() if not t.done()]
        for task in builds:
            task.cancel()
        await asyncio.gather(*builds, return_exceptions=True)
        self._building.clear()
        async with self._write_lock:
            conns = [
                *self._all_readers,
                *([self._write_reader] if self._write_reader else []),
                *([self._writer] if self._writer else []),
            ]
            self._writer, self._readers, self._all_readers = None, None, []
            self._write_reader = None
            graphs = {m: v for m, v in self._vectors.items() if not isinstance(v, VectorIndex)}
            self._vectors.clear()
            self._retired.clear()
            for model_id, graph in graphs.items():
                if graph.changes:
                    await asyncio.to_thread(self._save_graph, model_id, graph)
            # each connection's thread closes its own at once (the last one checkpoints)
            closing = [conn.close() for conn in conns]
            await asyncio.gather(*closing, *self._closing, return_exceptions=True)
        if self._scratch is not None:
            shutil.rmtree(self._scratch, ignore_errors=True)
            self._scratch, self.path = None, Path(":memory:")

    async def _migrate(self, db: aiosqlite.Connection) -> None:
        await db.execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations ("
            "version INTEGER PRIMARY KEY, name TEXT NOT NULL, applied_at TEXT NOT NULL)"
        )
        applied = await self._applied(db)
        for mig in load_migrations(self.backend):
            if mig.version in applied:
                continue
            # executescript commits first, so the migration and its ledger row need their
            # own BEGIN ... COMMIT to be one atomic step.
            script = (
                f"BEGIN IMMEDIATE;\n{mig.sql}\n"
                f"INSERT INTO schema_migrations VALUES ({mig.version}, '{mig.name}', '{now()}');\n"
                "COMMIT;"
            )
            try:
                await db.executescript(script)
            except sqlite3.Error as exc:
                if db.in_transaction:
                    await db.execute("ROLLBACK")
                if mig.version in await self._applied(db):
                    continue  # another process migrated the same file at the same moment
                raise StorageError(f"migration {mig.version:04d}_{mig.name} failed: {exc}") from exc

    async def _applied(self, db: aiosqlite.Connection) -> set[int]:
        async with db.execute("SELECT version FROM schema_migrations") as cur:
            return {row[0] for row in await cur.fetchall()}

    # ---- reading ----------------------------------------------------------------------------

    async def _take_reader(self) -> aiosqlite.Connection:
        if self._readers is None:
            raise StorageError("index is not open")
        readers = self._readers
        while True:
            if readers.empty() and len(self._all_readers) + self._opening < self._max_readers:
                return await self._open_reader()
            conn = await readers.get()
            if conn is not None and conn in self._all_readers:  # not one dropped meanwhile
                return conn

    async def _open_reader(self) -> aiosqlite.Connection:
        """A new reader connection. Its slot in the pool is taken before the connect is
        awaited, so callers arriving meanwhile wait for a reader instead of each opening
        one more (the pool stays at ``readers``)."""
        self._opening += 1
        try:
            conn = await self._connect_reader()
        except BaseException:
            self._wake_waiter()  # its slot is free again: a waiter may open one
            raise
        finally:
            self._opening -= 1
        self._all_readers.append(conn)
        return conn

    async def _connect_reader(self, cache_mb: int | None = None) -> aiosqlite.Connection:
        """A connection for reads (a reader's, or the one kept for writes' reads); a failure
        is a StorageError."""
        try:
            return await self._connect(cache_mb=cache_mb or self.reader_cache_mb)
        except sqlite3.Error as exc:
            raise translate(exc, "read") from exc

    def _wake_waiter(self) -> None:
        """A reader slot came free (a reader dropped, or a connect failed): wake one caller
        waiting for a reader so it can open one (None is not a connection)."""
        if self._readers is not None:
            self._readers.put_nowait(None)

    async def _take_write_reader(self) -> aiosqlite.Connection | None:
        """The connection kept for writes' reads, held (``_write_reads``) until the read
        ends; None when another write's read has it."""
        if self._readers is None:
            raise StorageError("index is not open")
        if self._write_reads.locked():
            return None
        await self._write_reads.acquire()
        if self._write_reader is None:
            try:
                self._write_reader = await self._connect_reader(WRITE_READS_CACHE_MB)
            except BaseException:
                self._write_reads.release()
                raise
        return self._write_reader

    @asynccontextmanager
    async def snapshot(self, writing: bool = False) -> AsyncIterator[SqliteReader]:
        kept = await self._take_write_reader() if writing else None
        conn = kept or await self._take_reader()
        # The snapshot starts with its first query (see SqliteReader). Until it closes it
        # holds the oldest generation a matrix here is at: its BEGIN, sent after this, sees
        # that one or a newer one, so no compaction meanwhile drops rows it may need.
        held = min((v.generation for v in self._vectors.values()), default=0)
        self._open_snapshots[held] += 1
        try:
            yield SqliteReader(conn, None, self)
        except sqlite3.Error as exc:
            raise translate(exc, "read") from exc
        finally:
            self._release_snapshot(held)
            self._end_read(conn, kept is not None)

    def _end_read(self, conn: aiosqlite.Connection, kept: bool = False) -> None:
        """End the read transaction on the connection's own queue and give the connection back
        at once: the next snapshot's BEGIN queues behind the ROLLBACK, so nobody waits a
        hand-off to the connection's thread and back for it (under load, each is a turn on a
        busy event loop). A connection whose ROLLBACK fails is dropped (see _take_reader).
        ``kept``: the connection kept for writes' reads, given back to the next write."""
        try:
            ended = enqueue(conn, _end_snapshot)
        except ValueError:  # closed under us
            self._drop_reader(conn)
        else:
            ended.add_done_callback(partial(self._ended, conn))
            if not kept and self._readers is not None and conn in self._all_readers:
                self._readers.put_nowait(conn)
        if kept:
            self._write_reads.release()

    def _ended(self, conn: aiosqlite.Connection, ended: asyncio.Future[None]) -> None:
        if ended.cancelled() or ended.exception() is not None:
            self._drop_reader(conn)

    def _drop_reader(self, conn: aiosqlite.Connection) -> None:
        """Never hand this reader out again, and close it."""
        if conn is self._write_reader:
            self._write_reader = None  # the next write's read opens another
        elif conn in self._all_readers:
            self._all_readers.remove(conn)
            self._wake_waiter()
        else:
            return
        task = asyncio.ensure_future(self._close_quietly(conn))
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    @staticmethod
    async def _close_quietly(conn: aiosqlite.Connection) -> None:
        with suppress(sqlite3.Error, ValueError):
            await conn.close()

    def _release_snapshot(self, generation: int) -> None:
        self._open_snapshots[generation] -= 1
        if self._open_snapshots[generation] <= 0:
            del self._open_snapshots[generation]
        self._compact()

    def _compact(self) -> None:
        oldest = min(self._open_snapshots, default=None)
        for index in self._vectors.values():
            if isinstance(index, VectorIndex):
                index.compact(oldest)
            else:
                index.compact_soon(oldest)  # never wait on the loop for a graph read in
        for model_id in list(self._retired):
            graph = self._vectors.get(model_id)
            if oldest is None or graph is None or oldest >= graph.floor:
                del self._retired[model_id]  # no open snapshot predates the graph any more

    async def vectors_at(
        self, conn: aiosqlite.Connection, generation: int, model_id: str
    ) -> Vectors:
        """The vectors of ``model_id`` as of ``generation`` (the caller's snapshot). Waits for
        a write committed here to be applied; after writes by another process a matrix is
        reloaded and a graph caught up in place."""
        index = self._vectors.get(model_id)
        if index is not None and index.generation < generation:
            event = self._applying.get(generation)
            if event is not None:
                await event.wait()
                index = self._vectors.get(model_id)
        if index is not None and index.serves(generation):
            return index
        retired = self._retired.get(model_id)
        if retired is not None and retired.serves(generation):
            return retired  # a snapshot older than the graph that took over
        # One load (or catch-up) of a model at a time: searches arriving together at a start
        # wait for the first one's vectors instead of each reading (or building) their own.
        async with self._loading.setdefault(model_id, asyncio.Lock()):
            index = self._vectors.get(model_id)
            if index is not None and index.serves(generation):
                return index
            reader = SqliteReader(conn, generation, self)
            if (
                index is not None
                and not isinstance(index, VectorIndex)
                and index.floor <= generation
            ):
                await self._catch_up(reader, model_id, index)  # in place, not reloaded
                if index.serves(generation):
                    return index
            fresh = await self._load(reader, model_id)
            current = self._vectors.get(model_id)
            if current is None or current.generation < generation:
                self._vectors[model_id] = fresh  # newer than what was here (or nothing was)
            return fresh

    async def _load(self, reader: SqliteReader, model_id: str) -> Vectors:
        """A model's vectors as of the reader's snapshot: an exact matrix, or from
        ``ann_min_vectors`` on, the saved graph brought up to date by comparing chunk ids.
        With no usable graph saved, the matrix answers while one is built in the background:
        building takes ~20 s at 100k chunks and minutes at 1M, loading the matrix 1.3 s."""
        ids = await reader.vector_ids(model_id)
        if len(ids) >= self.ann_min_vectors:
            graph = await self._saved_graph(reader, model_id, ids)
            if graph is not None:
                return graph
            self._build_graph_soon(model_id)
        return await reader.load_vectors(model_id, len(ids))

    async def _saved_graph(
        self, reader: SqliteReader, model_id: str, ids: npt.NDArray[np.uint64]
    ) -> AnnIndex | None:
        """The graph saved for this model, brought up to date with ``ids`` (the snapshot's
        chunks with a vector) and saved again if that changed it by over 1%; None if there
        is none, or it holds mostly other chunks (after a reindex), when building is as quick."""
        found = await self._saved_with_differences(reader, model_id, ids)
        if found is None:
            return None
        graph, missing, stale = found
        if stale:  # in a worker thread: the first change reads the mapped graph in
            await asyncio.to_thread(graph.remove, stale)
        await self._copies_of(reader, model_id, graph)
        for i in range(0, len(missing), FETCH):
            got, mat = await reader.vectors_of(missing[i : i + FETCH])
            await asyncio.to_thread(graph.add, got, mat)
        if graph.changes > _kept_unsaved(len(ids)):
            await asyncio.to_thread(self._save_graph, model_id, graph)
        return graph

    async def _saved_with_differences(
        self, reader: SqliteReader, model_id: str, ids: npt.NDArray[np.uint64]
    ) -> tuple[AnnIndex, npt.NDArray[np.uint64], list[int]] | None:
        """The saved graph (memory-mapped), the chunks of ``ids`` it lacks and the keys it
        holds that are gone; None if there is none or it lacks over half of ``ids``."""
        from memcore.storage.ann import AnnIndex

        first = await reader.vectors_of(ids[:1])
        dim = first[1].shape[1]
        graph = await asyncio.to_thread(
            AnnIndex.load, self.graph_path(model_id), dim, await reader.begun()
        )
        if graph is None:
            return None
        missing, stale = await asyncio.to_thread(differences, ids, graph)
        if len(missing) > len(ids) // 2:
            return None
        return graph, missing, stale

    def _build_graph_soon(self, model_id: str, threads: int = 1) -> None:
        """Start building a model's graph in the background, unless one was started already
        (a build that failed is not retried until the next start: the matrix serves). One
        thread leaves the other cores to searches and indexing; 0 takes them all."""
        if model_id not in self._building:
            build = self._build_graph(model_id, threads)
            self._building[model_id] = asyncio.get_running_loop().create_task(build)

    async def _build_graph(self, model_id: str, threads: int) -> None:
        """Build a model's graph from the index, save it, and put it in place of the matrix.

        Vectors are read in short transactions on a connection of its own (read through a
        search connection, they filled its page cache: +180 MB peak at 119k chunks), so
        writes and WAL checkpoints go on meanwhile, and added on ``threads`` threads. The
        writes committed during the build are caught up with at the swap (by comparing chunk
        ids, under the model's load lock); snapshots older than the swap keep the matrix
        until they close."""
        from memcore.storage.ann import AnnIndex, exact_path

        conn: aiosqlite.Connection | None = None
        try:
            conn = await self._connect()
            generation = await on_thread(conn, begin_snapshot)
            reader = SqliteReader(conn, generation, self)
            ids = await reader.vector_ids(model_id)
            await conn.execute("ROLLBACK")
            log.info("building the vector graph of %d chunks in the background", len(ids))
            graph: AnnIndex | None = None

            async def add(keys: npt.NDArray[np.uint64], unit: Matrix) -> None:
                nonlocal graph
                if graph is None:
                    graph = AnnIndex(unit.shape[1], generation, threads=threads)
                await asyncio.to_thread(graph.add, keys.tolist(), unit, copied=True)

            path = self.graph_path(model_id)
            await copy_vectors(reader, ids, exact_path(path), add, short_reads=True)
            await conn.close()
            conn = None
            if graph is None:
                return
            copies = await asyncio.to_thread(ExactVectors.open, exact_path(path), graph.dim)
            graph.exact = copies or graph.exact  # none: read from the index (_copies_of)
            async with self._loading.setdefault(model_id, asyncio.Lock()):
                async with self.snapshot() as reader:
                    await self._catch_up(reader, model_id, graph)
                    await self._copies_of(reader, model_id, graph)
                graph.compact()  # serves its own generation on: older snapshots keep the matrix
                old = self._vectors.get(model_id)
                if isinstance(old, VectorIndex):
                    self._retired[model_id] = old
                self._vectors[model_id] = graph
                self._compact()
            log.info("the vector graph of %d chunks is in place", len(graph))
            await asyncio.to_thread(self._save_graph, model_id, graph)
        except Exception as exc:  # a background task: say why, and let exact search go on
            log.warning("could not build the vector graph (exact search goes on): %s", exc)
        finally:
            if conn is not None:
                with suppress(sqlite3.Error, ValueError):
                    await conn.close()

    @asynccontextmanager
    async def bulk(self, expected: int = 0) -> AsyncIterator[None]:
        """Nothing to defer: the vector graph is built past ``ann_min_vectors`` in the
        background, and FTS5 keeps no statistics to refresh."""
        yield

    async def prepare_vectors(
        self, model_id: str, started: Callable[[int], None] | None = None, *, here: bool = True
    ) -> int:
        """Have a model's graph saved and up to date, past ``ann_min_vectors``, before
        returning: what a batch ``memcore index`` does before it exits, so that the one-shot
        searches after it load a graph instead of a matrix. Builds one (``started(n)`` is
        called first) if none is saved or usable, or waits for the build under way.
        ``here=False``: neither builds nor brings a saved graph up to date, but returns over
        how many vectors that is owed (0: nothing), for a fresh process to do it."""
        async with self.snapshot() as reader:
            ids = await reader.vector_ids(model_id)
            task = self._building.get(model_id)
            if task is None:
                if len(ids) < self.ann_min_vectors:
                    return 0
                if not here:
                    return 0 if await self._graph_current(reader, model_id, ids) else len(ids)
                if await self._saved_graph(reader, model_id, ids) is not None:
                    return 0
            await reader.release_cache()  # the build reads on its own connection
        count = len(ids)
        del ids  # (8 MB at 1M, while the build holds its own)
        if task is None:
            self._build_graph_soon(model_id, threads=0)  # a batch job: every core
            task = self._building[model_id]
        if not task.done():
            if started is not None:
                started(count)
            await asyncio.shield(task)
        return 0

    async def _graph_current(
        self, reader: SqliteReader, model_id: str, ids: npt.NDArray[np.uint64]
    ) -> bool:
        """Whether the saved graph needs nothing a next start would save it again for
        (``_saved_graph``): it differs from ``ids`` by at most the share caught up in memory."""
        found = await self._saved_with_differences(reader, model_id, ids)
        if found is None:
            return False
        _, missing, stale = found
        return len(missing) + len(stale) <= _kept_unsaved(len(ids))

    async def _unmap_graphs(self) -> None:
        """Read memory-mapped graphs into memory in a worker thread before a write changes
        them, not on the event loop applying the commit. usearch keeps the GIL while loading,
        so at 1.19M chunks the loop still pauses ~0.8 s once (bench/first_write.py); holding
        the graph's lock meanwhile is what keeps searches from blocking inside usearch."""
        for index in list(self._vectors.values()):
            if not isinstance(index, VectorIndex) and index.mapped:
                await asyncio.to_thread(index.unmap)

    async def _catch_up(self, reader: SqliteReader, model_id: str, graph: AnnIndex) -> None:
        """Advance a graph that missed writes (another process's) to the reader's snapshot,
        as one generation step, by comparing its keys with the chunk ids holding vectors."""
        if graph.generation >= await reader.begun():
            return
        if graph.mapped:  # another process wrote: read it in off the loop (_unmap_graphs)
            await asyncio.to_thread(graph.unmap)
        ids = await reader.vector_ids(model_id)
        # The comparisons run in a worker thread: ~0.25 s of sorting at 1.19M chunks.
        missing = await asyncio.to_thread(absent_from, ids, graph)
        got, mat = await reader.vectors_of(missing)
        fresh, removed = await asyncio.to_thread(changes_to, graph, ids, got)
        if graph.generation >= reader.generation:
            return  # brought forward meanwhile
        graph.apply(reader.generation, removed, np.asarray(got)[fresh].tolist(), mat[fresh])

    def graph_path(self, model_id: str, format_: int = GRAPH_FORMAT) -> Path:
        """Where a model's vector graph is saved: beside the index, named for this database
        and the graph format (1, unnumbered: saved by usearch < 2.26, which could keep removed
        chunks in it, so it is never loaded, and deleted once a new one is saved)."""
        digest = hashlib.sha256(model_id.encode()).hexdigest()[:12]
        suffix = "hnsw" if format_ == 1 else f"g{format_}.hnsw"
        return self.path.with_name(f"{self.path.name}.{self._index_id}.{digest}.{suffix}")

    async def _copies_of(self, reader: SqliteReader, model_id: str, graph: AnnIndex) -> None:
        """Give a loaded graph the float16 copies of every vector it holds: those its file of
        copies lacks (one saved by a process that stopped between the two files, or lost) read
        from the index, all of them into a new file when that is most of them."""
        from memcore.storage.ann import exact_path

        lacking = await asyncio.to_thread(graph.exact.missing, graph.alive_keys())
        if len(lacking) > max(REWRITE_COPIES, len(graph) // 20):
            copies = exact_path(self.graph_path(model_id))
            await copy_vectors(reader, await reader.vector_ids(model_id), copies)
            found = await asyncio.to_thread(ExactVectors.open, copies, graph.dim)
            if found is not None:
                graph.exact = found
                lacking = await asyncio.to_thread(found.missing, lacking)
        for i in range(0, len(lacking), FETCH):
            got, mat = await reader.vectors_of(lacking[i : i + FETCH])
            graph.exact.put(got, normalize_rows(mat))

    def _save_graph(self, model_id: str, graph: AnnIndex) -> None:
        try:
            graph.save(self.graph_path(model_id))
            for old in range(1, GRAPH_FORMAT):
                self.graph_path(model_id, old).unlink(missing_ok=True)
        except (OSError, RuntimeError) as exc:  # only a cache: the next start rebuilds it
            log.warning("could not save the vector graph: %s", exc)

    # ---- writing ----------------------------------------------------------------------------

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[SqliteWriter]:
        async with self._write_lock:
            db = self._writer
            if db is None:
                raise StorageError("index is not open")
            await self._unmap_graphs()
            try:
                await db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise translate(exc, "write") from exc
            tx = SqliteWriter(db)
            generation = 0
            try:
                yield tx
                if tx.chunks_changed:
                    rows = await db.execute_fetchall(
                        "UPDATE generation SET value = value + 1 RETURNING value"
                    )
                    generation = int(next(iter(rows))[0])
                    # before COMMIT: a snapshot that sees this generation waits for the matrix
                    self._applying[generation] = asyncio.Event()
                await db.execute("COMMIT")
            except BaseException as exc:
                await self._rollback(db)
                self._settle(generation, None)
                if isinstance(exc, sqlite3.Error):
                    raise translate(exc, "write") from exc
                raise
            self._settle(generation, tx)

    async def _rollback(self, db: aiosqlite.Connection) -> None:
        with suppress(sqlite3.Error, ValueError):
            if db.in_transaction:
                await db.execute("ROLLBACK")

    def _settle(self, generation: int, tx: SqliteWriter | None) -> None:
        """After a commit (tx) or a failure (None): bring the matrices to this generation."""
        event = self._applying.pop(generation, None)
        if generation and tx is not None:
            for model_id, index in list(self._vectors.items()):
                if index.generation != generation - 1:
                    if isinstance(index, VectorIndex):
                        del self._vectors[model_id]  # missed a write: reload on next use
                    continue  # a graph catches up on next use
                ids = [cid for cid, m, _ in tx.added if m == model_id]
                vecs = [v for _, m, v in tx.added if m == model_id]
                index.apply(generation, tx.removed, ids, _stack(vecs))
                if isinstance(index, VectorIndex) and len(index) >= self.ann_min_vectors:
                    self._build_graph_soon(model_id)  # the matrix grew past the graph's size
            self._compact()
        elif generation:  # the commit may or may not have happened: reload (or catch up)
            for model_id, index in list(self._vectors.items()):
                if isinstance(index, VectorIndex):
                    del self._vectors[model_id]
        if event is not None:
            event.set()


def _kept_unsaved(vectors: int) -> int:
    """How many changes a loaded graph catches up with in memory before it is saved again
    (a next start would redo them): 1% of its vectors, at least 1,000."""
    return max(1000, vectors // 100)


def _end_snapshot(db: sqlite3.Connection) -> None:
    if db.in_transaction:
        db.execute("ROLLBACK")


def _stack(vecs: list[Vector]) -> Vector | None:
    return np.stack(vecs) if vecs else None
