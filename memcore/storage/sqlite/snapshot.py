"""A read snapshot on one aiosqlite connection: the WAL read transaction that starts with
its first query (``Snapshot``), and what it needs of the store that opened it
(``StoreState``). sqlite/vector_reads.py and sqlite/queries.py build the reader on it; a write
transaction shares only ``Queries``, the hand-off to the connection's thread."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

import aiosqlite

from memcore.core.errors import StorageError
from memcore.core.models import SearchFilters
from memcore.core.own_words import Words
from memcore.core.tokenize import CommonCounts
from memcore.core.vectors import VectorIndex
from memcore.storage.filters_sql import SQLITE, filter_sql
from memcore.storage.sqlite import file_rows

if TYPE_CHECKING:  # usearch loads only for a vault that needs the graph
    from memcore.storage.ann import AnnIndex

R = TypeVar("R")


class StoreState(Protocol):
    """What a snapshot or a transaction needs of the SqliteStore that opened it. The store
    has these; they are declared here so that this module never imports the store back."""

    path: Path
    pending_memo: dict[tuple[int, str], int]  # (generation, model) -> chunks pending
    common_counts: CommonCounts
    words: Words  # the vault's own dictionary and stop words

    async def vectors_at(
        self, conn: aiosqlite.Connection, generation: int, model_id: str
    ) -> VectorIndex | AnnIndex: ...


def _fetch_all(db: sqlite3.Connection, sql: str, params: Sequence[object]) -> list[Any]:
    return db.execute(sql, params).fetchall()


def begin_snapshot(db: sqlite3.Connection) -> int:
    """BEGIN a read transaction and read the generation it sees (which fixes the snapshot)."""
    db.execute("BEGIN")
    row = db.execute("SELECT value FROM generation").fetchone()
    return int(row[0]) if row else 0


def pending_count(db: sqlite3.Connection, model_id: str) -> int:
    # three index-backed counts: an OR cannot use the index (see vector_reads._PENDING)
    row = db.execute(
        "SELECT (SELECT count(*) FROM memory_chunks WHERE embedding_model IS NULL)"
        " + (SELECT count(*) FROM memory_chunks WHERE embedding_model < ?)"
        " + (SELECT count(*) FROM memory_chunks WHERE embedding_model > ?)",
        (model_id, model_id),
    ).fetchone()
    return int(row[0])


def _begun_with(
    db: sqlite3.Connection,
    counted: tuple[int, str] | None,
    started: Callable[[int], None],
    fn: Callable[..., R],
    *args: Any,
) -> tuple[int, int | None, R]:
    """A snapshot's start and its first query, in one hand-off: (generation, chunks pending,
    result). ``counted``: (generation, model) of the pending count remembered; at a newer
    generation the model's chunks pending are counted again (None: not counted). Every
    search asks for it, and the count is a few index lookups: not worth a hand-off of its
    own at each generation, which under writes is every tenth search. ``started`` is told
    the generation as soon as the snapshot is fixed, before the query runs: what waits only
    for that (the vector half of a search) goes on beside the query."""
    generation = begin_snapshot(db)
    started(generation)
    pending = None
    if counted is not None and counted[0] != generation:
        pending = pending_count(db, counted[1])
    return generation, pending, fn(db, *args)


def _nothing(db: sqlite3.Connection) -> None:
    return None


class Queries:
    """Queries on one connection, each step in one hand-off to its thread."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        self.conn = conn

    async def _on_thread(self, fn: Callable[..., R], *args: Any) -> R:
        """``fn(db, *args)`` on the connection's thread: one hand-off for a whole step."""
        return await file_rows.on_thread(self.conn, fn, *args)

    async def _all(self, sql: str, params: Sequence[object] = ()) -> list[Any]:
        # one trip to the connection's thread (execute, fetch and close are three): a search
        # makes a dozen queries, and each trip is a thread wake-up on both sides
        return await self._on_thread(_fetch_all, sql, params)

    async def _rows_in(self, sql: str, values: Sequence[object]) -> list[Any]:
        """The rows of ``sql``, whose ``{}`` is an IN list, over ``values`` in batches (under
        SQLite's variable limit), in one hand-off."""
        return await self._on_thread(file_rows.rows_in, sql, values)


class Snapshot(Queries):
    """One WAL read transaction: every query sees the state as of ``generation``.

    Opened by the store (``generation`` None), it starts with its first query: BEGIN, the
    generation it sees and that query go to the connection's thread in one hand-off. (Under
    load every hand-off waits its turn on the event loop, and a search holds its connection
    across them: the BEGIN's own was a third of a search's.) Queries made while the start is
    on its way queue behind it on the connection, in the same transaction."""

    def __init__(
        self, conn: aiosqlite.Connection, generation: int | None, store: StoreState
    ) -> None:
        super().__init__(conn)
        self._generation = generation
        self._store = store
        self._starting: asyncio.Future[int] | None = None
        self._allowed: tuple[SearchFilters, set[int] | None] | None = None

    @property
    def generation(self) -> int:
        if self._generation is None:
            raise RuntimeError("the snapshot has not started yet (see SqliteReader.begun)")
        return self._generation

    @property
    def started(self) -> bool:
        return self._generation is not None

    async def begun(self) -> int:
        """The snapshot's generation, starting it now unless a query already did (or is)."""
        if self._starting is not None:
            await asyncio.shield(self._starting)
        elif self._generation is None:
            await self._on_thread(_nothing)
        return self.generation

    async def _on_thread(self, fn: Callable[..., R], *args: Any) -> R:
        if self._generation is not None:
            return await file_rows.on_thread(self.conn, fn, *args)
        if self._starting is not None:  # queued behind the start's BEGIN
            result = await file_rows.on_thread(self.conn, fn, *args)
            await asyncio.shield(self._starting)  # its error is this query's: it ran
            # outside the snapshot
            return result
        loop = asyncio.get_running_loop()
        self._starting = starting = loop.create_future()
        memo = self._store.pending_memo
        counted = next(iter(memo), None)

        def started(generation: int) -> None:  # on the connection's thread
            with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits
                loop.call_soon_threadsafe(self._started, starting, generation)

        try:
            generation, pending, result = await file_rows.on_thread(
                self.conn, _begun_with, counted, started, fn, *args
            )
        except BaseException as exc:
            if not starting.done():  # the BEGIN failed (else only this query did)
                starting.set_exception(
                    exc
                    if isinstance(exc, Exception)
                    else StorageError("the snapshot did not start")
                )
                starting.exception()  # seen: the followers, if any, raise it themselves
            raise
        self._started(starting, generation)
        if (
            counted is not None
            and pending is not None
            and generation >= max(memo, default=counted)[0]
        ):
            memo.clear()
            memo[generation, counted[1]] = pending
        return result

    def _started(self, starting: asyncio.Future[int], generation: int) -> None:
        """The snapshot is fixed at ``generation`` (once: told early, then by the result)."""
        if not starting.done():
            self._generation = generation
            starting.set_result(generation)

    async def _filtered_ids(self, filters: SearchFilters) -> set[int] | None:
        """The chunks a filter allows (None: every chunk); asked once a search (the vector
        and the keyword halves of a search share its filters)."""
        if self._allowed is not None and self._allowed[0] is filters:
            return self._allowed[1]
        allowed = None
        if filters.active:
            where, params = filter_sql(filters, SQLITE)
            rows = await self._all(f"SELECT c.id FROM memory_chunks c WHERE 1=1{where}", params)
            allowed = {r[0] for r in rows}
        self._allowed = (filters, allowed)
        return allowed
