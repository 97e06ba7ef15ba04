"""PostgresStore: the storage ports on PostgreSQL + pgvector via psycopg 3 (async).

Many memcore processes, on many machines, can share one database. Each vault's rows carry its
namespace, so vaults never see each other's chunks or memories. A snapshot is a REPEATABLE READ
read-only transaction on one of a small pool of reader connections; a write transaction holds
its namespace's advisory lock, so writers of one vault take turns across every machine while
readers never wait. Nearest neighbours come from a per-(namespace, model) HNSW index from
``ann_min_vectors`` vectors of a model on, and below it from an exact matrix each process holds
(held_vectors.py); keyword search is BM25 in pg_textsearch's index or PostgreSQL full text over
memcore's segmented text.

pgvector 0.5 (the first with HNSW) and newer work. With 0.8 and newer a filtered search uses the
iterative index scan, so filters are applied in SQL and still return k rows. Older versions stop
an index scan after ``ef_search`` candidates, so a selective filter could come back short: there
a filtered search that finds fewer than k rows in the index is answered by an exact scan of the
rows inside the filter instead (see ``PostgresReader.search_vectors``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import weakref
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager, suppress
from types import TracebackType
from typing import Self

import psycopg

from memcore.core.errors import StorageError
from memcore.core.nodes import NodeCard, NodeInfo
from memcore.core.own_words import NO_WORDS, Words
from memcore.core.redact import redact_url
from memcore.core.tokenize import CommonCounts
from memcore.storage.migrations import load_migrations
from memcore.storage.postgres.bm25 import enable_bm25
from memcore.storage.postgres.bm25 import repair as repair_bm25
from memcore.storage.postgres.bulk import build_missing_indexes, drop_small_indexes, settle
from memcore.storage.postgres.file_rows import register_vectors
from memcore.storage.postgres.held_vectors import HeldVectors, log_changes
from memcore.storage.postgres.reader import PostgresReader
from memcore.storage.postgres.roles import FileHolds, PostgresRoles, live_nodes
from memcore.storage.postgres.server import lock_key, translate, uses_iterative_scan
from memcore.storage.postgres.tokens import retokenize
from memcore.storage.postgres.writer import PostgresWriter
from memcore.storage.rows import now

log = logging.getLogger(__name__)

READERS = 3
BUILD_RETRY_S = 60.0  # an owed vector index whose build failed is tried again after this
EF_SEARCH = 400  # HNSW candidates a query looks at: recall@10 0.93 at 100, 0.99 at 400 (119k)
_MIGRATION_LOCK = 0x6D656D636F7265  # "memcore": one process migrates a database at a time


class PostgresStore:
    """Index in a PostgreSQL database, namespaced. Open with ``async with``."""

    backend = "postgres"
    keywords_take_vector = True

    def __init__(
        self,
        url: str,
        namespace: str,
        *,
        readers: int = READERS,
        busy_timeout_s: float = 10.0,
        ef_search: int = EF_SEARCH,
        bm25: bool = True,
        words: Words = NO_WORDS,
        k1: float = 1.2,
        b: float = 0.75,
        build_memory_mb: int = 1024,
        ann_min_vectors: int = 50_000,
    ) -> None:
        self.url = url
        self.build_memory_mb = build_memory_mb  # a vector index's build: storage.build_memory_mb
        self.words = words  # the vault's own dictionary and stop words
        self.k1, self.b = k1, b  # BM25's, in _ranked and pg_textsearch's index
        self.retokenized = 0  # chunks tokenized again at open, the words having changed
        self.namespace = namespace
        self.ef_search = ef_search
        self._busy_ms = max(1, int(busy_timeout_s * 1000))
        self._max_readers = max(1, readers)
        self._writer: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self._readers: asyncio.Queue[psycopg.AsyncConnection[tuple[object, ...]]] | None = None
        self._all_readers: list[psycopg.AsyncConnection[tuple[object, ...]]] = []
        self._opening = 0  # reader connections being opened right now
        # one more connection, for the reads a write makes (see Store.snapshot)
        self._write_reader: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self._write_reads = asyncio.Lock()
        self._ending: set[asyncio.Task[None]] = set()  # reads being rolled back (_end_later)
        self._write_lock = asyncio.Lock()
        self.vector_indexes: set[str] = set()  # HNSW indexes known to exist
        self.pending_memo: dict[tuple[int, str], int] = {}
        self.count_memo: dict[str, float] = {}  # chunks of the namespace at one generation
        self.common_counts = CommonCounts()  # chunk counts of common query words, remembered
        self.server_version = ""  # read at open: "16.2", "18.1"
        self.pgvector_version = ""  # the vector library the server loads: "0.6.2", "0.8.2"
        self.iterative_scan = False  # pgvector >= 0.8: filtered HNSW scans return k rows
        self.want_bm25 = bm25  # rank keywords in pg_textsearch's index where the server has it
        self.bm25 = ""  # pg_textsearch's version when keywords are ranked by it, read at open
        self.bm25_sound = True  # False while its index is rebuilt
        self.bm25_check_due = False  # set when a connection is made again (a restart?)
        self._repairing: asyncio.Task[None] | None = None
        self.vector_oid = 0  # pgvector's type in this database, read at open
        self.staged: weakref.WeakSet[psycopg.AsyncConnection[tuple[object, ...]]] = (
            weakref.WeakSet()
        )
        self.bulk_loads = 0
        self.bulk_rows = 0  # chunks a bulk load has written so far
        self.bulk_analyzed = 0  # bulk_rows when the planner's statistics were last refreshed
        self.vacuumed = False  # the last load ended with VACUUM (ANALYZE) (bulk.settle)
        self.owed_indexes: dict[str, tuple[str, int]] = {}
        # below this many vectors of a model no HNSW index is built: each process holds them
        self.ann_min_vectors = ann_min_vectors
        self.held = HeldVectors(namespace, ann_min_vectors)
        self.small_indexes: dict[str, int] = {}  # unbuilt (too few vectors): about how many
        self._holds = FileHolds(url, namespace, busy_timeout_s)
        self._build_after = 0.0  # monotonic time an owed vector index may be built again

    @property
    def engine(self) -> str:
        """The server and extension versions, for ``status``."""
        found = f"PostgreSQL {self.server_version}, pgvector {self.pgvector_version}"
        return f"{found}, pg_textsearch {self.bm25} (BM25)" if self.bm25 else found

    @property
    def location(self) -> str:
        return f"{redact_url(self.url)} (namespace {self.namespace})"

    def node_roles(self, card: NodeCard) -> PostgresRoles:
        return PostgresRoles(self.url, self.namespace, card)

    async def nodes(self) -> list[NodeInfo]:
        async with self.snapshot() as reader:
            return await live_nodes(reader.conn, self.namespace)

    def holding(self, paths: Sequence[str]) -> AbstractAsyncContextManager[None]:
        return self._holds.hold(paths)

    async def prepare_vectors(
        self, model_id: str, started: Callable[[int], None] | None = None, *, here: bool = True
    ) -> int:
        """Build any vector index the namespace's vectors lack (one a bulk load owed when its
        process died), and refresh the planner's statistics: until autovacuum analyzes a
        freshly filled table the planner can take an exact scan for every search (~100 ms
        instead of ~5 at 12k chunks, measured). The server builds, whatever ``here`` says:
        nothing is owed to another process."""
        await build_missing_indexes(self)
        if not self.vacuumed:  # a load that just ended with VACUUM (ANALYZE) needs none
            await self.outside_transaction("ANALYZE memory_chunks")
        self.vacuumed = False
        return 0

    async def outside_transaction(self, statement: str) -> list[tuple[object, ...]]:
        """One statement on the writer's connection, outside any transaction (VACUUM must
        be), while no write runs. Raises StorageError."""
        async with self._write_lock:
            if self._writer is None:
                raise StorageError("index is not open")
            try:
                cur = await self._writer.execute(statement)
                return list(await cur.fetchall()) if cur.description else []
            except psycopg.Error as exc:
                raise translate(exc, "maintenance") from exc

    @asynccontextmanager
    async def bulk(self, expected: int = 0) -> AsyncIterator[None]:
        """Many writes follow (a batch add, a whole vault; ``expected``: about how many
        chunks): vector indexes are built once after them, over every row, where that is
        cheaper than inserting row by row: a model's index that does not exist yet, and one
        that holds less than bulk.REBUILD_SHARE times what is expected (dropped now, built at
        the end). Searches meanwhile compare vectors exactly. Bulk commits do not wait for
        the WAL flush. Nests; the outermost ends it (``bulk.settle``). If the build fails
        (or the process dies), the next write of a vector, or ``prepare_vectors``, builds
        the index."""
        self.bulk_loads += 1
        try:
            if self.bulk_loads == 1 and expected:
                await drop_small_indexes(self, expected)
            yield
        finally:
            self.bulk_loads -= 1
            if not self.bulk_loads and self._writer is not None:
                try:
                    await settle(self)
                except StorageError as exc:
                    log.warning("after a bulk load: %s; the next write tries again", exc)

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
        """Connect, bring the schema up to date, register this namespace. Raises StorageError."""
        try:
            self._writer = await self._connect()
            await self._migrate(self._writer)
            await self._read_versions(self._writer)
            self.retokenized = await retokenize(
                self._writer, self.namespace, self.words, _MIGRATION_LOCK
            )
            if self.want_bm25:
                self.bm25 = await enable_bm25(
                    self._writer, self.namespace, _MIGRATION_LOCK, self.words, (self.k1, self.b)
                )
            await self._writer.execute(
                "INSERT INTO generation (ns, value) VALUES (%s, 0) ON CONFLICT DO NOTHING",
                (self.namespace,),
            )
            self._readers = asyncio.Queue()
        except psycopg.Error as exc:
            await self.close()
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise StorageError(f"cannot open index {redact_url(self.url)}: {first}") from exc
        except BaseException:
            await self.close()
            raise

    async def _read_versions(self, db: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
        """The server's and pgvector's versions. The version created in this database decides
        whether HNSW exists (its access method is SQL the extension installed); the library
        the server ships (the control file's default) decides whether the iterative scan does.
        Raises StorageError below pgvector 0.5."""
        cur = await db.execute(
            "SELECT current_setting('server_version'), e.extversion, a.default_version "
            "FROM pg_extension e JOIN pg_available_extensions a ON a.name = e.extname "
            "WHERE e.extname = 'vector'"
        )
        row = await cur.fetchone()
        if row is None:
            raise StorageError(f"{redact_url(self.url)} has no pgvector extension")
        server, created, shipped = (str(v) for v in row)
        self.server_version = server.split()[0]
        self.pgvector_version = shipped
        self.iterative_scan = uses_iterative_scan(created, shipped, redact_url(self.url))
        cur = await db.execute("SELECT 'vector'::regtype::oid")
        found = await cur.fetchone()
        self.vector_oid = int(str(found[0])) if found else 0
        register_vectors(db, self.vector_oid)

    async def _connect(self) -> psycopg.AsyncConnection[tuple[object, ...]]:
        conn = await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, connect_timeout=10, application_name="memcore"
        )
        if self.vector_oid:  # a connection made again (the first learns it at open)
            register_vectors(conn, self.vector_oid)
            self.bm25_check_due = bool(self.bm25)
        return conn

    def bm25_lost(self) -> None:
        self.bm25_sound = False
        if self._repairing is None or self._repairing.done():
            self._repairing = asyncio.create_task(self._repair_bm25())

    async def _repair_bm25(self) -> None:
        async with self._write_lock:
            try:
                if self._writer is not None:
                    if self._writer.broken or self._writer.closed:  # the restart dropped it
                        self._writer = await self._connect()
                    await repair_bm25(self._writer)
                self.bm25_sound = True
            except psycopg.Error as exc:
                log.warning("could not rebuild the BM25 index (%s); searching without it", exc)
                self.bm25_check_due = True

    async def close(self) -> None:
        await self._holds.aclose()
        if self._repairing is not None and not self._repairing.done():
            self._repairing.cancel()
            with suppress(asyncio.CancelledError):
                await self._repairing
        await asyncio.gather(*self._ending, return_exceptions=True)  # reads ending
        async with self._write_lock:
            conns = [
                *self._all_readers,
                *([self._write_reader] if self._write_reader else []),
                *([self._writer] if self._writer else []),
            ]
            self._writer, self._readers, self._all_readers = None, None, []
            self._write_reader = None
            for conn in conns:
                with suppress(psycopg.Error):
                    await conn.close()

    async def _migrate(self, db: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
        await db.execute("SELECT pg_advisory_lock(%s)", (_MIGRATION_LOCK,))
        try:
            await db.execute(
                "CREATE TABLE IF NOT EXISTS schema_migrations ("
                "version integer PRIMARY KEY, name text NOT NULL, applied_at text NOT NULL)"
            )
            cur = await db.execute("SELECT version FROM schema_migrations")
            applied = {int(str(r[0])) for r in await cur.fetchall()}
            for mig in load_migrations(self.backend):
                if mig.version in applied:
                    continue
                try:
                    async with db.transaction():
                        await db.execute(mig.sql.encode())
                        await db.execute(
                            "INSERT INTO schema_migrations VALUES (%s, %s, %s)",
                            (mig.version, mig.name, now()),
                        )
                except psycopg.Error as exc:
                    name = f"{mig.version:04d}_{mig.name}"
                    raise StorageError(f"migration {name} failed: {exc}") from exc
        finally:
            with suppress(psycopg.Error):
                await db.execute("SELECT pg_advisory_unlock(%s)", (_MIGRATION_LOCK,))

    # ---- reading ----------------------------------------------------------------------------

    async def idle_reader(self) -> psycopg.AsyncConnection[tuple[object, ...]] | None:
        if self._readers is None:
            return None
        while not self._readers.empty():
            conn = self._readers.get_nowait()
            if not conn.broken and not conn.closed:
                return conn
            self._all_readers.remove(conn)
        if len(self._all_readers) + self._opening < self._max_readers:
            return await self._take_reader()
        return None

    async def end_side_read(self, conn: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
        self._end_later(conn)

    def _end_later(self, conn: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
        """End a read without its caller waiting for the ROLLBACK's round trip: the
        connection goes back to the pool when it is done (``close`` waits for it)."""
        task = asyncio.create_task(self._end_read(conn))
        self._ending.add(task)
        task.add_done_callback(self._ending.discard)

    async def _take_reader(self) -> psycopg.AsyncConnection[tuple[object, ...]]:
        if self._readers is None:
            raise StorageError("index is not open")
        while not self._readers.empty():  # a connection the server dropped is replaced
            conn = self._readers.get_nowait()
            if not conn.broken and not conn.closed:
                return conn
            self._all_readers.remove(conn)
        if len(self._all_readers) + self._opening < self._max_readers:
            # the slot is taken before the await: searches arriving together must not each
            # see room for one more and open a connection apiece (12 searches opened 12)
            self._opening += 1
            try:
                conn = await self._connect()
            except psycopg.Error as exc:
                raise translate(exc, "read") from exc
            finally:
                self._opening -= 1
            self._all_readers.append(conn)
            return conn
        return await self._readers.get()

    async def _take_write_reader(self) -> psycopg.AsyncConnection[tuple[object, ...]] | None:
        """The connection kept for writes' reads, held (``_write_reads``) until the read
        ends; None when another write's read has it. One the server dropped is replaced."""
        if self._readers is None:
            raise StorageError("index is not open")
        if self._write_reads.locked():
            return None
        await self._write_reads.acquire()
        conn = self._write_reader
        if conn is None or conn.broken or conn.closed:
            try:
                self._write_reader = conn = await self._connect()
            except psycopg.Error as exc:
                self._write_reads.release()
                raise translate(exc, "read") from exc
            except BaseException:
                self._write_reads.release()
                raise
        return conn

    @asynccontextmanager
    async def snapshot(self, writing: bool = False) -> AsyncIterator[PostgresReader]:
        conn, generation = await self._begin_read(writing)
        try:
            yield PostgresReader(conn, generation, self)
        except psycopg.Error as exc:
            raise translate(exc, "read") from exc
        finally:
            self._end_later(conn)

    async def _begin_read(
        self, writing: bool = False
    ) -> tuple[psycopg.AsyncConnection[tuple[object, ...]], int]:
        """A reader connection inside a fresh snapshot, and the snapshot's generation. A
        pooled connection the server has dropped (a restart: every pooled one) is replaced."""
        tries = self._max_readers + 2  # each pooled connection, the write reader, a new one
        for attempt in range(tries):
            conn = (await self._take_write_reader() if writing else None) or (
                await self._take_reader()
            )
            try:
                async with conn.pipeline():  # one round trip for the four
                    await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                    await conn.execute(f"SET LOCAL hnsw.ef_search = {int(self.ef_search)}")
                    if self.iterative_scan:
                        await conn.execute("SET LOCAL hnsw.iterative_scan = relaxed_order")
                    cur = await conn.execute(
                        "SELECT value FROM generation WHERE ns = %s", (self.namespace,)
                    )
                row = await cur.fetchone()
                return conn, int(str(row[0])) if row else 0
            except psycopg.OperationalError as exc:
                await self._end_read(conn)
                if attempt == tries - 1 or not (conn.broken or conn.closed):
                    raise translate(exc, "read") from exc
            except psycopg.Error as exc:
                await self._end_read(conn)
                raise translate(exc, "read") from exc
        raise AssertionError("unreachable")

    async def _end_read(self, conn: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
        if conn is self._write_reader:
            try:
                await conn.execute("ROLLBACK")
            except psycopg.Error:
                self._write_reader = None  # the next write's read connects again
                with suppress(psycopg.Error):
                    await conn.close()
            finally:
                self._write_reads.release()
            return
        try:
            await conn.execute("ROLLBACK")
        except psycopg.Error:
            with suppress(psycopg.Error):
                await conn.close()
            if conn in self._all_readers:
                self._all_readers.remove(conn)
            return
        if self._readers is not None and conn in self._all_readers:
            self._readers.put_nowait(conn)

    # ---- writing ----------------------------------------------------------------------------

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[PostgresWriter]:
        async with self._writing() as tx:
            yield tx
        if self.owed_indexes and not self.bulk_loads and time.monotonic() >= self._build_after:
            try:  # in a transaction of its own (see PostgresWriter.ensure_vector_index)
                await build_missing_indexes(self)
            except StorageError as exc:  # searches compare exactly meanwhile; try again later
                self._build_after = time.monotonic() + BUILD_RETRY_S
                log.warning("could not build a vector index (%s); will try again", exc)

    @asynccontextmanager
    async def _writing(self) -> AsyncIterator[PostgresWriter]:
        async with self._write_lock:
            db = self._writer
            if db is None:
                raise StorageError("index is not open")
            try:
                db = await self._begin_write(db)
            except psycopg.Error as exc:
                await self._rollback(db)
                raise translate(exc, "write") from exc
            tx = PostgresWriter(db, self)
            try:
                yield tx
                if tx.chunks_changed:
                    await log_changes(db, self.namespace, tx.added, tx.removed)
                await db.execute("COMMIT")
            except BaseException as exc:
                await self._rollback(db)
                if isinstance(exc, psycopg.Error):
                    raise translate(exc, "write") from exc
                raise

    async def _begin_write(
        self, db: psycopg.AsyncConnection[tuple[object, ...]]
    ) -> psycopg.AsyncConnection[tuple[object, ...]]:
        """BEGIN and take the namespace's write lock. A writer connection the server has
        dropped (a restart) is replaced, once: nothing was written on it yet."""
        for attempt in range(2):
            if db.broken or db.closed:
                db = self._writer = await self._connect()
            try:
                await db.execute("BEGIN")
                break
            except psycopg.OperationalError:
                if attempt or not db.broken:
                    raise
        await db.execute(f"SET LOCAL lock_timeout = {self._busy_ms}")
        if self.bulk_loads:
            # a load's commits do not wait for the WAL flush (13 ms a commit, measured): the
            # index is derived from the Markdown, and a server crash's lost commits leave
            # those files' states behind too, so the next catch-up writes them again
            await db.execute("SET LOCAL synchronous_commit = off")
        await db.execute("SELECT pg_advisory_xact_lock(%s)", (lock_key(self.namespace),))
        return db

    async def _rollback(self, db: psycopg.AsyncConnection[tuple[object, ...]]) -> None:
        with suppress(psycopg.Error):
            await db.execute("ROLLBACK")
