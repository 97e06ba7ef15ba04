"""The SQL behind SqliteStore: a read snapshot (SqliteReader) and a write transaction
(SqliteWriter) on one aiosqlite connection each. FTS5 syntax stays in this module."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sqlite3
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, TypeVar

import aiosqlite
import numpy as np
import numpy.typing as npt

from memcore.core.errors import StorageError
from memcore.core.models import (
    Chunk,
    Entity,
    FileState,
    MemoryQuery,
    MemoryRecord,
    SearchFilters,
    SkippedFile,
)
from memcore.core.own_words import Words
from memcore.core.tokenize import (
    ANCHOR_CAP,
    ANCHOR_MAX_TERMS,
    ANCHOR_ROWS,
    RANK_POSTINGS,
    CommonCounts,
    anchor_terms,
    anchored_expression,
    common_tiers,
    coverage,
    estimated_count,
    fts_any,
    ranked_terms,
)
from memcore.core.vectors import VectorIndex, decode_vector, encode_vector
from memcore.storage.base import (
    ChunkRow,
    FileRows,
    PendingChunk,
    StoredFile,
    StoreStats,
    Vector,
    scan,
    search_terms,
)
from memcore.storage.filters_sql import SQLITE, filter_sql, memory_query_sql
from memcore.storage.rows import (
    CHUNK_ROW_COLUMNS,
    COUNTED,
    ENTITY_COLUMNS,
    MEMORY_SELECT,
    STORED_CHUNK_COLUMNS,
    chunk_row,
    copies_by_id,
    file_states,
    memory_record,
    now,
    stored_files,
)
from memcore.storage.sqlite import file_rows
from memcore.storage.sqlite.file_rows import BATCH, marks

if TYPE_CHECKING:  # usearch loads only for a vault that needs the graph
    from memcore.storage.ann import AnnIndex


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


_LOAD_BATCH = 4096  # rows per fetch when loading the vector matrix
_FETCH_IDS = 65536

# Pending = no vector, or a vector from another model. embedding and embedding_model are
# always NULL together, so the embedding_model index answers this without reading the
# rows (a scan over rows carrying 1.5 KB vectors took 238 ms at 100k chunks; this, 0.03 ms).
_PENDING = "(embedding_model IS NULL OR embedding_model < ? OR embedding_model > ?)"
R = TypeVar("R")


FEW_TO_RANK = 2_000  # a scope of at most this many chunks is ranked on its own


def embedded_hashes_sql(paths: int) -> str:
    """The chunk hashes of some files holding a vector of one model. The ``+`` keeps the
    planner off the embedding_model index, which it picked without statistics: every chunk of
    the model read, 1.5 s a write at 1.19M chunks, instead of the files' few by source_file."""
    return (
        "SELECT source_file, content_hash FROM memory_chunks WHERE +embedding_model = ? "
        f"AND source_file IN ({marks(paths)})"
    )


class Counted(NamedTuple):
    """Each word's chunk count (``_doc_counts``), the chunk-id span counted over (None when
    every word's count was known) and the common words' estimated counts, to remember."""

    counts: dict[str, int]
    span: int | None
    estimated: dict[str, int]


def _text_search(
    db: sqlite3.Connection,
    terms: list[str],
    k: int,
    where: str,
    params: list[object],
    known: dict[str, int],
) -> tuple[list[tuple[int, float]], Counted | None]:
    """The keyword search of ``terms`` (the top ``k`` chunks by BM25), on the connection's
    thread; also the words' counts (None: it counted nothing), for the caller to remember
    (``known`` holds the ones it did).

    Ranking costs ~3 us a matching chunk, and BM25 first reads every chunk of every word to
    weigh it: a query with common words ("using", "looking") matches most of a big index.
    So: weigh only the rarer words (RANK_POSTINGS), and rank only the chunks holding the
    rarest of them (at least ANCHOR_ROWS chunks), still by BM25 over every weighed word;
    chunks that match only common words score little anyway. When every word is common (a
    big vault: "what kind of art does Caroline make"), the chunks holding all of them, else
    any two, are ranked before every match is. Small indexes (every word rarer than the
    need) are ranked as a whole."""
    if not 1 < len(terms) <= ANCHOR_MAX_TERMS:  # one word, or a pasted page: rank all
        return _ranked(db, fts_any(terms), k, where, params), None
    counted = _doc_counts(db, terms, ANCHOR_CAP, known)
    counts = counted.counts
    weighed = ranked_terms(counts, RANK_POSTINGS)
    if not weighed:
        return [], counted
    every = fts_any(weighed)
    narrower: list[str] = []
    anchors = anchor_terms(counts, want=max(ANCHOR_ROWS, 5 * k), cap=ANCHOR_CAP)
    if anchors is not None:
        narrower.append(anchored_expression(weighed, anchors))
    narrower += [
        f"({tier}) AND ({every})"
        for tier in common_tiers({t: counts[t] for t in weighed}, ANCHOR_CAP)
    ]
    for expression in narrower:
        rows = _ranked(db, expression, k, where, params)
        if len(rows) >= k:
            return rows, counted
    return _ranked(db, every, k, where, params), counted


def _doc_counts(
    db: sqlite3.Connection, terms: list[str], cap: int, known: dict[str, int]
) -> Counted:
    """How many chunks hold each term: ``known`` ones as given (remembered from an earlier
    query, see CommonCounts); the rest exact up to ``cap``, past it estimated from where the
    term's first cap + 1 and last cap / 2 chunks lie among the chunk ids (at most 1.5 * cap
    chunks read a term, however common it is)."""
    counts = {t: known[t] for t in terms if t in known}
    rest = [t for t in terms if t not in counts]
    if not rest:
        return Counted(counts, None, {})
    head_sql = (
        "SELECT {i}, count(*), max(r) FROM "
        "(SELECT rowid AS r FROM memory_fts WHERE memory_fts MATCH ? LIMIT ?)"
    )
    bounds_sql = (
        "SELECT -1, (SELECT min(id) FROM memory_chunks), (SELECT max(id) FROM memory_chunks)"
    )
    params: list[object] = []
    for term in rest:
        params += [fts_any([term]), cap + 1]
    sql = " UNION ALL ".join([bounds_sql, *(head_sql.format(i=i) for i in range(len(rest)))])
    head = {i: (n or 0, last) for i, n, last in db.execute(sql, params).fetchall()}
    lo, hi = head.pop(-1)
    span = hi - lo + 1 if hi else 0
    counts |= {rest[i]: n for i, (n, _) in head.items()}
    common = [i for i, (n, _) in head.items() if n > cap]
    if not common:
        return Counted(counts, span, {})
    tail_sql = (
        "SELECT {i}, count(*), min(r) FROM (SELECT rowid AS r FROM memory_fts "
        "WHERE memory_fts MATCH ? ORDER BY rowid DESC LIMIT ?)"
    )
    params = []
    for i in common:
        params += [fts_any([rest[i]]), cap // 2]
    sql = " UNION ALL ".join(tail_sql.format(i=i) for i in common)
    estimated: dict[str, int] = {}
    for i, n, first in db.execute(sql, params).fetchall():
        count, last = head[i]
        counts[rest[i]] = estimated[rest[i]] = estimated_count(count, last, n, first, lo, hi)
    return Counted(counts, span, estimated)


def _held_terms(
    db: sqlite3.Connection,
    terms: list[str],
    ids: list[int],
    known: dict[str, int],
    counted: Counted | None,
) -> tuple[Counted, dict[int, list[str]]]:
    """Which of ``terms`` each chunk of ``ids`` holds (FTS5 seeks the chunk's row in each
    word's list), with the words' counts: ``counted`` when the search counted them already,
    else as ``_doc_counts`` gives them (one word needs none: it is all the query's weight)."""
    if counted is None and len(terms) == 1:
        counted = Counted({terms[0]: 1}, None, {})
    elif counted is None:
        counted = _doc_counts(db, terms, ANCHOR_CAP, known)
    return counted, {cid: _words_held(db, "memory_fts", terms, cid) for cid in ids}


def _words_held(db: sqlite3.Connection, table: str, terms: list[str], cid: int) -> list[str]:
    """Which of ``terms`` the chunk ``cid`` holds in a full-text ``table`` (FTS5 seeks its row
    in each word's list)."""
    column = table.rpartition(".")[2]  # the table's hidden column, named like it
    sql = f"SELECT 1 FROM {table} WHERE {column} MATCH ? AND rowid = ?"
    return [t for t in terms if db.execute(sql, (fts_any([t]), cid)).fetchone()]


def _text_search_held(
    db: sqlite3.Connection,
    terms: list[str],
    k: int,
    where: str,
    params: list[object],
    known: dict[str, int],
) -> tuple[list[tuple[int, float]], Counted | None, tuple[Counted, dict[int, list[str]]] | None]:
    """``_text_search``, and which words its best hit holds when that is a few seeks (the
    words were counted, or there is one): the searcher asks it of every search
    (keyword_coverage), and this saves that a hand-off of its own."""
    rows, counted = _text_search(db, terms, k, where, params, known)
    held = None
    if rows and (counted is not None or len(terms) == 1):
        held = _held_terms(db, terms, [rows[0][0]], known, counted)
    return rows, counted, held


def _ranked(
    db: sqlite3.Connection, match: str, k: int, where: str, params: list[object]
) -> list[tuple[int, float]]:
    if where:
        sql = (
            "SELECT c.id, -memory_fts.rank FROM memory_fts "
            "JOIN memory_chunks c ON c.id = memory_fts.rowid "
            f"WHERE memory_fts MATCH ?{where} ORDER BY memory_fts.rank LIMIT ?"
        )
    else:
        # FTS5's own rank column (BM25) lets it sort without a join: 40% faster at 100k
        sql = "SELECT rowid, -rank FROM memory_fts WHERE memory_fts MATCH ? ORDER BY rank LIMIT ?"
    return [(r[0], float(r[1])) for r in db.execute(sql, [match, *params, k]).fetchall()]


# A scope's chunks are ranked in a table of their own, in the connection's TEMP schema (the
# main database stays read-only to readers; a snapshot's ROLLBACK empties it). Ranking them in
# the vault's own full-text index took a MATCH per chunk, and each one read every word's whole
# list again to weigh it: 46 ms a search for a user's 100 chunks among 1M, p95 226 ms.
_SCOPE_TABLE = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.scope_fts USING fts5 "
    "(fts_text, tokenize = 'porter unicode61 remove_diacritics 2')"
)
_SCOPE_FILL = (
    "INSERT INTO temp.scope_fts (rowid, fts_text) SELECT id, fts_text FROM memory_chunks "
    "WHERE id IN (SELECT value FROM json_each(?))"
)


def _ranked_in_scope(
    db: sqlite3.Connection, terms: list[str], k: int, ids: Sequence[int]
) -> tuple[list[tuple[int, float]], tuple[Counted, dict[int, list[str]]] | None]:
    """The top ``k`` of a scope's chunks (``ids``) by BM25 among themselves: each word
    weighed by its rarity in the scope (as on PostgreSQL), which is what tells a scope's
    chunks apart. Also which words the best one holds, and each word's count in the scope,
    for ``keyword_coverage`` to weigh them as the ranking did (in this same hand-off)."""
    db.execute(_SCOPE_TABLE)
    db.execute("DELETE FROM temp.scope_fts")
    db.execute(_SCOPE_FILL, (json.dumps(list(ids)),))
    rows = db.execute(
        "SELECT rowid, -rank FROM temp.scope_fts WHERE scope_fts MATCH ? ORDER BY rank, rowid "
        "LIMIT ?",
        (fts_any(terms), k),
    ).fetchall()
    if not rows:
        return [], None
    top, terms = rows[0][0], terms[:ANCHOR_MAX_TERMS]
    held = {top: _words_held(db, "temp.scope_fts", terms, top)}
    count = "SELECT count(*) FROM temp.scope_fts WHERE scope_fts MATCH ?"
    counts = {t: db.execute(count, (fts_any([t]),)).fetchone()[0] for t in terms}
    return [(r[0], float(r[1])) for r in rows], (Counted(counts, len(ids), {}), held)


# The index's words, in order (a view of the full-text index: nothing is stored), in the
# connection's TEMP schema. A range of them is a seek: whether any is Chinese takes ~1 ms.
_TERMS_TABLE = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.memory_terms USING fts5vocab(main, memory_fts, row)"
)
_CHINESE = ("\u3400", "\ua000"), ("\uf900", "\ufb00")  # tokenize._CJK_RUN's ranges


def _holds_chinese(db: sqlite3.Connection) -> bool:
    db.execute(_TERMS_TABLE)
    sql = "SELECT 1 FROM temp.memory_terms WHERE term >= ? AND term < ? LIMIT 1"
    return any(db.execute(sql, span).fetchone() for span in _CHINESE)


def _fetch_all(db: sqlite3.Connection, sql: str, params: Sequence[object]) -> list[Any]:
    return db.execute(sql, params).fetchall()


def begin_snapshot(db: sqlite3.Connection) -> int:
    """BEGIN a read transaction and read the generation it sees (which fixes the snapshot)."""
    db.execute("BEGIN")
    row = db.execute("SELECT value FROM generation").fetchone()
    return int(row[0]) if row else 0


def _pending_count(db: sqlite3.Connection, model_id: str) -> int:
    # three index-backed counts: an OR cannot use the index (see _PENDING)
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
        pending = _pending_count(db, counted[1])
    return generation, pending, fn(db, *args)


# A search's hits, up to this many, are read on the event loop when the snapshot's connection
# has nothing queued: a few rows by primary key from the page cache take ~0.1 ms, where the
# hand-off to the connection's thread and back cost a search ~1.7 ms of holding its reader
# under load (two turns of the GIL and of the event loop).
INLINE_HIT_ROWS = 50
_CHUNK_ROWS = f"SELECT {CHUNK_ROW_COLUMNS} FROM memory_chunks WHERE id IN ({{}})"
_MEMORIES_OF_CHUNKS = f"{MEMORY_SELECT} WHERE m.chunk_id IN ({{}})"


def _hit_rows(db: sqlite3.Connection, ids: Sequence[int]) -> tuple[list[Any], list[Any]]:
    return file_rows.rows_in(db, _CHUNK_ROWS, ids), file_rows.rows_in(db, _MEMORIES_OF_CHUNKS, ids)


def _nothing(db: sqlite3.Connection) -> None:
    return None


class _Queries:
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


class SqliteReader(_Queries):
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
        self._counted: tuple[list[str], Counted] | None = None  # the last words counted
        # the words the last keyword search's best hit holds (see _text_search_held)
        self._held: tuple[list[str], tuple[Counted, dict[int, list[str]]]] | None = None

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
                found, top = await self._on_thread(_ranked_in_scope, terms, k, sorted(allowed))
                if top is not None:  # the words keyword_coverage asks about, scope-weighed
                    self._held = (terms[:ANCHOR_MAX_TERMS], top)
                return found
        where, params = filter_sql(filters, SQLITE)
        # every query of one search in one hand-off to the connection's thread: under load
        # each hand-off waits its turn on the event loop, and this one took two to four
        rows, counted, held = await self._on_thread(
            _text_search_held, terms, k, where, params, self._known_counts(terms)
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
                _held_terms, terms, list(ids), self._known_counts(terms), same
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

    async def search_vectors(
        self, vector: Vector, model_id: str, k: int, filters: SearchFilters
    ) -> list[tuple[int, float]]:
        allowed = await self._filtered_ids(filters)
        index = await self._store.vectors_at(self.conn, await self.begun(), model_id)
        return await scan(index, index.search, vector, k, allowed, self.generation)

    async def vectors_ready(self, model_id: str) -> None:
        await self._store.vectors_at(self.conn, await self.begun(), model_id)

    async def vector_similarity(
        self, vector: Vector, model_id: str, ids: Sequence[int]
    ) -> dict[int, float]:
        index = await self._store.vectors_at(self.conn, await self.begun(), model_id)
        return await scan(index, index.similarity, vector, ids, self.generation)

    async def newest_matching(
        self, filters: SearchFilters, limit: int, offset: int = 0
    ) -> list[int]:
        where, params = filter_sql(filters, SQLITE)
        sql = (
            f"SELECT c.id FROM memory_chunks c WHERE 1=1{where} "
            "ORDER BY c.date IS NULL, c.date DESC, c.id DESC LIMIT ? OFFSET ?"
        )
        return [r[0] for r in await self._all(sql, [*params, limit, offset])]

    async def has_vectors(self, model_id: str) -> bool:
        sql = "SELECT 1 FROM memory_chunks WHERE embedding_model = ? LIMIT 1"
        return bool(await self._all(sql, (model_id,)))

    async def holds_chinese(self) -> bool:
        return await self._on_thread(_holds_chinese)

    async def vector_ids(self, model_id: str) -> npt.NDArray[np.uint64]:
        """Ids of the chunks holding a vector of this model, ascending (from the index alone)."""
        sql = "SELECT id FROM memory_chunks WHERE embedding_model = ? ORDER BY id"
        out: list[npt.NDArray[np.uint64]] = []  # not one list of 1M Python ints (36 MB)
        await self.begun()  # a cursor's fetches are hand-offs of their own
        async with self.conn.execute(sql, (model_id,)) as cur:
            while rows := list(await cur.fetchmany(_FETCH_IDS)):
                out.append(np.fromiter((r[0] for r in rows), dtype=np.uint64, count=len(rows)))
        return np.concatenate(out) if out else np.empty(0, dtype=np.uint64)

    async def vectors_of(self, ids: npt.NDArray[np.uint64]) -> tuple[list[int], Vector]:
        """(ids found, their vectors as one float32 matrix) of the named chunks."""
        got: list[int] = []
        blobs: list[bytes] = []
        for i in range(0, len(ids), BATCH):
            part = ids[i : i + BATCH].tolist()
            sql = (
                "SELECT id, embedding FROM memory_chunks WHERE embedding IS NOT NULL "
                f"AND id IN ({marks(len(part))})"
            )
            for r in await self._all(sql, part):
                got.append(r[0])
                blobs.append(r[1])
        if not got:
            return [], np.zeros((0, 0), dtype=np.float32)
        flat = np.frombuffer(b"".join(blobs), dtype="<f4").astype(np.float32, copy=False)
        return got, flat.reshape(len(got), -1)

    async def vector_batches(
        self, model_id: str, size: int
    ) -> AsyncIterator[tuple[list[int], Vector]]:
        """Every vector of this model, ``size`` at a time: (ids, float32 matrix)."""
        sql = "SELECT id, embedding FROM memory_chunks WHERE embedding_model = ?"
        await self.begun()
        async with self.conn.execute(sql, (model_id,)) as cur:
            while rows := list(await cur.fetchmany(size)):
                flat = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4")
                yield [r[0] for r in rows], flat.astype(np.float32).reshape(len(rows), -1)

    async def load_vectors(self, model_id: str, count: int) -> VectorIndex:
        """Every vector of this model in this snapshot (``count`` of them), as a fresh matrix
        at its generation. Read in batches into a matrix sized once: peak memory is the matrix
        and one batch, not every row's bytes as well."""
        index = VectorIndex(generation=self.generation)
        async for ids, mat in self.vector_batches(model_id, _LOAD_BATCH):
            index.reserve(count, mat.shape[1])
            index.add(ids, mat)
        return index

    async def chunk_rows(self, ids: Sequence[int]) -> dict[int, ChunkRow]:
        return {r[0]: chunk_row(r) for r in await self._rows_in(_CHUNK_ROWS, ids)}

    async def cached_vectors(self, hashes: Sequence[str], model_id: str) -> dict[str, Vector]:
        out: dict[str, Vector] = {}
        unique = list(dict.fromkeys(hashes))
        for i in range(0, len(unique), BATCH):
            part = unique[i : i + BATCH]
            rows = await self._all(
                f"SELECT content_hash, embedding FROM embedding_cache "
                f"WHERE model = ? AND content_hash IN ({marks(len(part))})",
                [model_id, *part],
            )
            out.update({h: decode_vector(b) for h, b in rows})
            held = [h for h in part if h not in out]  # a chunk's row holds the rest
            if held:
                rows = await self._all(  # "+": by the hashes' index, never by the model's
                    "SELECT content_hash, embedding FROM memory_chunks WHERE "
                    f"content_hash IN ({marks(len(held))}) AND +embedding_model = ? "
                    "AND embedding IS NOT NULL",
                    [*held, model_id],
                )
                out.update({h: decode_vector(b) for h, b in rows})
        return out

    async def pending_chunks(self, model_id: str, limit: int) -> list[PendingChunk]:
        rows = await self._all(
            f"SELECT id, content_hash, heading_path, content FROM memory_chunks "
            f"WHERE {_PENDING} LIMIT ?",
            (model_id, model_id, limit),
        )
        return [PendingChunk(r[0], r[1], f"{r[2]}\n{r[3]}" if r[2] else r[3]) for r in rows]

    async def count_pending(self, model_id: str) -> int:
        # Every search asks; one snapshot generation always has the same answer (and the
        # start of a snapshot at a newer one counts for the model asked last: see _begun_with).
        memo = self._store.pending_memo
        key = (await self.begun(), model_id)
        if key not in memo:
            count = await self._on_thread(_pending_count, model_id)
            memo.clear()  # only the newest generation is asked for again
            memo[key] = count
        return memo[key]

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

    async def embedded_hashes(self, paths: Sequence[str], model_id: str) -> set[tuple[str, str]]:
        out: set[tuple[str, str]] = set()
        for i in range(0, len(paths), BATCH):
            part = list(paths[i : i + BATCH])
            rows = await self._all(embedded_hashes_sql(len(part)), [model_id, *part])
            out.update((r[0], r[1]) for r in rows)
        return out

    async def memories(self, query: MemoryQuery) -> list[MemoryRecord]:
        where, params = memory_query_sql(query, SQLITE)
        rows = await self._all(
            f"{MEMORY_SELECT} WHERE 1=1{where} "
            "ORDER BY m.created, m.path, c.chunk_index LIMIT ? OFFSET ?",
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


class SqliteWriter(_Queries, file_rows.Changes):
    """The write transaction in progress. Records which vectors it added and removed
    (``file_rows.Changes``), so the store can update its matrices once it has committed. A
    file's rows are replaced or deleted in one hand-off to the connection's thread."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        _Queries.__init__(self, conn)
        file_rows.Changes.__init__(self)

    async def file_state(self, path: str) -> FileState | None:
        rows = await self._all(
            "SELECT path, content_hash, size, mtime_ns FROM files WHERE path = ?", (path,)
        )
        return FileState(*rows[0]) if rows else None

    async def replace_file(
        self,
        state: FileState,
        chunks: Sequence[Chunk],
        vectors: Sequence[Vector | None],
        model_id: str,
        unchanged: int = 0,
        stored_hash: str | None = None,
    ) -> list[int]:
        return await file_rows.on_thread(
            self.conn, file_rows.replace_file, self, state, chunks, vectors, model_id,
            unchanged, stored_hash,
        )  # fmt: skip

    async def replace_files(self, files: Sequence[FileRows], model_id: str) -> list[str]:
        return await file_rows.on_thread(self.conn, file_rows.replace_files, self, files, model_id)

    async def touch_file(self, state: FileState) -> None:
        await file_rows.on_thread(self.conn, file_rows.touch_file, state)

    async def set_skipped(self, files: Sequence[SkippedFile]) -> None:
        await self.conn.executemany(
            "INSERT INTO skipped_files (path, reason, size, mtime_ns, since) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET reason=excluded.reason, "
            "size=excluded.size, mtime_ns=excluded.mtime_ns",
            [(f.path, f.reason, f.size, f.mtime_ns, now()) for f in files],
        )

    async def delete_files(self, paths: Sequence[str]) -> int:
        return await file_rows.on_thread(self.conn, file_rows.delete_files, self, paths)

    async def set_vectors(self, vectors: Sequence[tuple[int, str, Vector]], model_id: str) -> int:
        wanted = {cid: (h, v) for cid, h, v in vectors}
        current: dict[int, str] = {}
        ids = list(wanted)
        for i in range(0, len(ids), BATCH):
            part = ids[i : i + BATCH]
            sql = f"SELECT id, content_hash FROM memory_chunks WHERE id IN ({marks(len(part))})"
            current.update((r[0], r[1]) for r in await self._all(sql, part))
        fresh = [(cid, v) for cid, (h, v) in wanted.items() if current.get(cid) == h]
        if not fresh:
            return 0
        self.chunks_changed = True
        ids = [cid for cid, _ in fresh]  # another model's vectors, replaced now, are kept
        await file_rows.on_thread(self.conn, file_rows.keep_vectors, ids)
        await self.conn.executemany(
            "UPDATE memory_chunks SET embedding = ?, embedding_model = ? WHERE id = ?",
            [(encode_vector(v), model_id, cid) for cid, v in fresh],
        )
        self.removed += [cid for cid, _ in fresh]  # a vector of another model goes away
        self.added += [(cid, model_id, v) for cid, v in fresh]
        return len(fresh)

    async def cache_vectors(self, vectors: Mapping[str, Vector], model_id: str) -> None:
        if not vectors:
            return
        stamp = now()
        await self.conn.executemany(
            "INSERT OR REPLACE INTO embedding_cache VALUES (?, ?, ?, ?)",
            [(h, model_id, encode_vector(v), stamp) for h, v in vectors.items()],
        )

    async def supply_vectors(self, vectors: Mapping[str, Vector], model_id: str) -> int:
        await self.cache_vectors(vectors, model_id)
        hashes = list(vectors)
        holders: list[tuple[int, str, Vector]] = []
        for i in range(0, len(hashes), BATCH):
            part = hashes[i : i + BATCH]
            rows = await self._all(
                f"SELECT id, content_hash FROM memory_chunks WHERE content_hash IN "
                f"({marks(len(part))})",
                part,
            )
            holders += [(cid, h, vectors[h]) for cid, h in rows]
        return await self.set_vectors(holders, model_id)

    async def set_meta(self, key: str, value: str) -> None:
        await self.conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value)
        )
