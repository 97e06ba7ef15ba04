"""A file's rows replaced or deleted inside the write transaction, as plain synchronous
functions on the sqlite3 connection, each run whole on the connection's own thread.

A replace is a dozen statements. Awaited one by one through aiosqlite, each is a round trip
through the event loop, and under load every round trip waits behind the other requests'
callbacks (3-4 ms each at 12 clients): an add spent most of its time queued. Run here, the
whole step is one hand-off (``on_thread``).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any, Concatenate, ParamSpec, TypeVar

import aiosqlite

from memcore.core.models import Chunk, FileState
from memcore.core.vectors import encode_vector
from memcore.storage.base import FileRows, Vector
from memcore.storage.rows import (
    OLD_CHUNK_COLUMNS,
    choose_homes,
    fresh_chunk_fields,
    kept_changes,
    match_kept,
    memory_rows,
    next_homes,
    now,
)

BATCH = 500  # ids per IN (...) query, well under SQLite's variable limit
INSERT_MEMORY = (
    "INSERT INTO memories (memory_id, chunk_id, path, user_id, agent_id, run_id, category, "
    "key, created, updated, metadata, app_id, expires, immutable) "
    "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
P = ParamSpec("P")
T = TypeVar("T")


async def on_thread(
    conn: aiosqlite.Connection,
    fn: Callable[Concatenate[sqlite3.Connection, P], T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """``fn(db, *args)`` on the connection's thread, in its queue's order: one hand-off for a
    whole step. (aiosqlite's ``_execute`` is how its own methods get there; it has no public
    way to run a function. pyproject pins aiosqlite below the next minor for that reason.)"""
    result: T = await conn._execute(fn, conn._conn, *args, **kwargs)  # type: ignore[no-untyped-call]
    return result


def enqueue(
    conn: aiosqlite.Connection,
    fn: Callable[Concatenate[sqlite3.Connection, P], T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> asyncio.Future[T]:
    """``fn(db, *args)`` queued on the connection's thread now (before anything queued after
    this call returns), without waiting for it: its future. Raises ValueError when the
    connection is closed. (Done as aiosqlite's ``_execute`` does; see on_thread.)"""
    if not conn._running or not conn._connection:
        raise ValueError("Connection closed")
    future: asyncio.Future[T] = asyncio.get_running_loop().create_future()
    conn._tx.put_nowait((future, partial(fn, conn._conn, *args, **kwargs)))
    return future


def idle(conn: aiosqlite.Connection) -> bool:
    """Nothing is queued on the connection's thread. For a caller whose own calls on it are
    all done, the thread then runs nothing, and the connection (opened with
    check_same_thread off) can be used from the caller's thread meanwhile (``here``)."""
    return bool(conn._running and conn._connection is not None and conn._tx.empty())


def here(
    conn: aiosqlite.Connection,
    fn: Callable[Concatenate[sqlite3.Connection, P], T],
    *args: P.args,
    **kwargs: P.kwargs,
) -> T:
    """``fn(db, *args)`` on the caller's thread, for a connection that is ``idle``."""
    return fn(conn._conn, *args, **kwargs)


def marks(n: int) -> str:
    return ",".join("?" * n)


def rows_in(db: sqlite3.Connection, sql: str, values: Sequence[object]) -> list[Any]:
    """The rows of ``sql``, whose ``{}`` is an IN list, over ``values`` in batches."""
    out: list[Any] = []
    for i in range(0, len(values), BATCH):
        part = list(values[i : i + BATCH])
        out += db.execute(sql.format(marks(len(part))), part).fetchall()
    return out


class Changes:
    """What a transaction did to vectors: the store updates its matrices from it once the
    transaction has committed. Only changes to chunks or their vectors bump the generation:
    a touched mtime, a cache entry or a meta key must not make every other process reload."""

    def __init__(self) -> None:
        self.chunks_changed = False
        self.removed: list[int] = []
        self.added: list[tuple[int, str, Vector]] = []  # (chunk id, model, vector)


def replace_files(
    db: sqlite3.Connection, tx: Changes, files: Sequence[FileRows], model_id: str
) -> list[str]:
    """``replace_file`` of each file, in one hand-off to the connection's thread; the appends
    whose file is not stored as they claim are left (their paths returned, see FileRows)."""
    left = []
    for f in files:
        start = _start(db, f)
        if start is None:
            left.append(f.state.path)
            continue
        _replace_file(db, tx, f, model_id, start)
    return left


def replace_file(
    db: sqlite3.Connection,
    tx: Changes,
    state: FileState,
    chunks: Sequence[Chunk],
    vectors: Sequence[Vector | None],
    model_id: str,
    unchanged: int = 0,
    stored_hash: str | None = None,
) -> list[int]:
    """Store a file's chunks; returns their ids in order. Incremental: a chunk whose text is
    unchanged keeps its row, full-text entry and vector (only its position and fields are
    updated), so appending one memory to a file of a thousand costs one insert. With
    ``unchanged`` (see IndexWriter.replace_file) the rows of the first chunks are not even
    read, when the file is stored as ``stored_hash`` with those rows."""
    rows = FileRows(state, chunks, vectors, unchanged, stored_hash)
    start = _start(db, rows) or 0  # every chunk is given: a whole file is never left
    ids = _replace_file(db, tx, rows, model_id, start)
    if start:
        sql = "SELECT chunk_index, id FROM memory_chunks WHERE source_file = ? AND chunk_index < ?"
        ids |= dict(db.execute(sql, (state.path, start)).fetchall())
    return [ids[n] for n in range(len(chunks))]


def _start(db: sqlite3.Connection, f: FileRows) -> int | None:
    """Where a file's rewrite starts: after the rows its claim names (``FileRows.unchanged``)
    when the file is stored so, else at 0; None for an append that is not (it is left)."""
    if f.unchanged and _holds(db, f.state.path, f.stored_hash, f.unchanged):
        return f.unchanged
    return None if f.appended else 0


def _replace_file(
    db: sqlite3.Connection, tx: Changes, f: FileRows, model_id: str, start: int
) -> dict[int, int]:
    """replace_file with its first ``start`` rows known to be stored as they are: the ids of
    the chunks from ``start`` on, by number."""
    stamp = now()
    state, chunks, vectors = f.state, f.chunks, f.vectors
    path = state.path
    unskip(db, [path])
    db.execute(
        "INSERT INTO files (path, content_hash, size, mtime_ns, indexed_at) "
        "VALUES (?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET "
        "content_hash=excluded.content_hash, size=excluded.size, "
        "mtime_ns=excluded.mtime_ns, indexed_at=excluded.indexed_at",
        (path, state.content_hash, state.size, state.mtime_ns, stamp),
    )
    old = db.execute(
        f"SELECT {OLD_CHUNK_COLUMNS} FROM memory_chunks WHERE source_file = ? "
        "AND chunk_index >= ? ORDER BY chunk_index",
        (path, start),
    ).fetchall()
    kept, gone = match_kept(chunks, old, start)
    delete_chunks(db, tx, gone)
    refreshed = _move_kept(db, chunks, kept, stamp)
    _revector_kept(db, tx, kept, vectors, model_id)
    fresh = []
    for n in range(start, len(chunks)):
        if n in kept:
            continue
        c, v = chunks[n], vectors[n]
        fresh.append((
            c.path, n, c.heading, c.start_line, c.end_line, c.text, c.heading, c.text,
            c.content_hash, None if v is None else encode_vector(v),
            None if v is None else model_id, *fresh_chunk_fields(c), stamp,
        ))  # fmt: skip
    if fresh:
        tx.chunks_changed = True
        first = _take_ids(db, len(fresh))
        db.executemany(
            "INSERT INTO memory_chunks (id, source_file, chunk_index, heading_path, "
            "start_line, end_line, content, fts_text, content_hash, embedding, "
            "embedding_model, tags, date, metadata, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, memcore_fts(?, ?), ?, ?, ?, ?, ?, ?, ?)",
            [(first + n, *row) for n, row in enumerate(fresh)],
        )
    ids: dict[int, int] = dict(
        db.execute(
            "SELECT chunk_index, id FROM memory_chunks WHERE source_file = ? AND chunk_index >= ?",
            (path, start),
        ).fetchall()
    )
    tx.added += [
        (ids[n], model_id, v)
        for n in range(start, len(chunks))
        if n not in kept and (v := vectors[n]) is not None
    ]
    touched = [n for n in range(start, len(chunks)) if n not in kept or n in refreshed]
    _put_memories(db, path, [chunks[n] for n in touched], [ids[n] for n in touched], stamp)
    return ids


def _holds(db: sqlite3.Connection, path: str, stored_hash: str | None, first: int) -> bool:
    """Whether the file is stored as ``stored_hash``, with rows for its first chunks."""
    row = db.execute("SELECT content_hash FROM files WHERE path = ?", (path,)).fetchone()
    if row is None or row[0] != stored_hash:
        return False
    sql = "SELECT count(*) FROM memory_chunks WHERE source_file = ? AND chunk_index < ?"
    return bool(db.execute(sql, (path, first)).fetchone()[0] == first)


def delete_files(db: sqlite3.Connection, tx: Changes, paths: Sequence[str]) -> int:
    """Remove files and their chunks; returns how many chunks went."""
    if not paths:
        return 0
    unskip(db, paths)
    tx.chunks_changed = True
    ids = [
        r[0] for r in rows_in(db, "SELECT id FROM memory_chunks WHERE source_file IN ({})", paths)
    ]
    tx.removed += ids
    homeless = _homes_of(db, ids)
    keep_vectors(db, ids)
    db.executemany("DELETE FROM files WHERE path = ?", [(p,) for p in paths])
    _rehome(db, homeless)
    return len(ids)


def keep_vectors(db: sqlite3.Connection, ids: Sequence[int]) -> None:
    """The vectors of chunks about to go, into the embedding cache (a chunk's row held them:
    the file moved, or its text comes back, need not be embedded again)."""
    stamp = now()
    for i in range(0, len(ids), BATCH):
        part = list(ids[i : i + BATCH])
        db.execute(
            "INSERT OR IGNORE INTO embedding_cache (content_hash, model, embedding, created_at) "
            "SELECT content_hash, embedding_model, embedding, ? FROM memory_chunks "
            f"WHERE id IN ({marks(len(part))}) AND embedding IS NOT NULL",
            [stamp, *part],
        )


def touch_file(db: sqlite3.Connection, state: FileState) -> None:
    unskip(db, [state.path])
    db.execute(
        "UPDATE files SET size = ?, mtime_ns = ? WHERE path = ?",
        (state.size, state.mtime_ns, state.path),
    )


def unskip(db: sqlite3.Connection, paths: Sequence[str]) -> None:
    db.executemany("DELETE FROM skipped_files WHERE path = ?", [(p,) for p in paths])


def delete_chunks(db: sqlite3.Connection, tx: Changes, ids: Sequence[int]) -> None:
    if not ids:
        return
    tx.chunks_changed = True
    tx.removed += ids
    homeless = _homes_of(db, ids)
    keep_vectors(db, ids)
    for i in range(0, len(ids), BATCH):
        part = list(ids[i : i + BATCH])
        db.execute(f"DELETE FROM memory_chunks WHERE id IN ({marks(len(part))})", part)
    _rehome(db, homeless)


def _move_kept(
    db: sqlite3.Connection, chunks: Sequence[Chunk], kept: Mapping[int, Any], stamp: str
) -> set[int]:
    """Give kept rows their new position and fields; chunk_index goes through -id first so no
    two rows of a file ever share one (a UNIQUE constraint). Returns the chunk numbers whose
    metadata changed (their memory rows need writing)."""
    changed = kept_changes(chunks, kept)
    if not changed:
        return set()
    moving = [(rid,) for rid, moved, _ in changed if moved]
    db.executemany("UPDATE memory_chunks SET chunk_index = -id WHERE id = ?", moving)
    db.executemany(
        "UPDATE memory_chunks SET chunk_index = ?, heading_path = ?, start_line = ?, "
        "end_line = ?, tags = ?, date = ?, metadata = ?, updated_at = ? WHERE id = ?",
        [(*new, stamp, rid) for rid, _, new in changed],
    )
    meta = {row[0]: row[8] for row in kept.values()}
    return {int(new[0]) for rid, _, new in changed if new[6] != meta[rid]}


def _take_ids(db: sqlite3.Connection, n: int) -> int:
    """The first of ``n`` fresh chunk ids; an id is never handed out twice (0005)."""
    rows = db.execute("UPDATE chunk_ids SET next = next + ? RETURNING next", (n,)).fetchall()
    return int(rows[0][0]) - n


def _revector_kept(
    db: sqlite3.Connection,
    tx: Changes,
    kept: Mapping[int, Any],
    vectors: Sequence[Vector | None],
    model_id: str,
) -> None:
    """A kept row embedded by another model (or not yet) takes the vector given now."""
    rows = [
        (row[0], vectors[n])
        for n, row in kept.items()
        if vectors[n] is not None and row[9] != model_id
    ]
    if not rows:
        return
    tx.chunks_changed = True
    db.executemany(
        "UPDATE memory_chunks SET embedding = ?, embedding_model = ? WHERE id = ?",
        [(encode_vector(v), model_id, rid) for rid, v in rows if v is not None],
    )
    tx.removed += [rid for rid, _ in rows]
    tx.added += [(rid, model_id, v) for rid, v in rows if v is not None]


def _put_memories(
    db: sqlite3.Connection, path: str, chunks: Sequence[Chunk], ids: Sequence[int], stamp: str
) -> None:
    """Memory rows of new or changed chunks (rows of deleted chunks went with them). An id that
    is already at home in a file with a smaller path becomes a copy."""
    if not ids:
        return
    for i in range(0, len(ids), BATCH):
        part = list(ids[i : i + BATCH])
        for table in ("memories", "memory_copies"):
            db.execute(f"DELETE FROM {table} WHERE chunk_id IN ({marks(len(part))})", part)
    rows = memory_rows(path, chunks, ids, stamp)
    if not rows:
        return
    found = rows_in(
        db,
        "SELECT memory_id, chunk_id, path FROM memories WHERE memory_id IN ({})",
        list({r[0] for r in rows}),
    )
    homes = choose_homes(rows, {r[0]: (r[1], r[2]) for r in found})
    db.executemany(
        "INSERT INTO memory_copies (memory_id, chunk_id, path) VALUES (?,?,?) "
        "ON CONFLICT(chunk_id) DO NOTHING",
        [*homes.copies, *homes.demoted],
    )
    db.executemany(
        INSERT_MEMORY + " ON CONFLICT(memory_id) DO UPDATE SET chunk_id = excluded.chunk_id, "
        "path = excluded.path, user_id = excluded.user_id, agent_id = excluded.agent_id, "
        "run_id = excluded.run_id, category = excluded.category, key = excluded.key, "
        "created = excluded.created, updated = excluded.updated, "
        "metadata = excluded.metadata, app_id = excluded.app_id",
        homes.homes,
    )


def _homes_of(db: sqlite3.Connection, chunk_ids: Sequence[int]) -> list[str]:
    """The memory ids whose home is one of these chunks."""
    rows = rows_in(db, "SELECT memory_id FROM memories WHERE chunk_id IN ({})", chunk_ids)
    return [r[0] for r in rows]


def _rehome(db: sqlite3.Connection, memory_ids: Sequence[str]) -> None:
    """Memories whose home went (its file deleted, or the item gone from it) move to their next
    copy, the smallest path, if there is one."""
    copies = rows_in(
        db,
        "SELECT c.memory_id, c.chunk_id, c.path, k.metadata FROM memory_copies c "
        "JOIN memory_chunks k ON k.id = c.chunk_id WHERE c.memory_id IN ({}) "
        "AND c.memory_id NOT IN (SELECT memory_id FROM memories)",
        memory_ids,
    )
    homes = next_homes(copies, now())
    db.executemany(INSERT_MEMORY, homes)
    db.executemany("DELETE FROM memory_copies WHERE chunk_id = ?", [(h[1],) for h in homes])
