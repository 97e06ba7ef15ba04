"""Many files' chunks written in a few statements: what a batch (a thousand users' pages) or a
catch-up sends to PostgreSQL. A file's rows are still replaced whole, inside the caller's
transaction; what changes is the number of round trips. Each step below is one statement for
every file of the call (not one a file, nor one a row): the files' states, the old rows, the
deleted, the kept, the new rows (COPY, binary, into a temporary table, then one INSERT that
computes their full-text vectors), the memories.
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
from psycopg.adapt import Dumper
from psycopg.pq import Format

from memcore.core.models import Chunk
from memcore.core.own_words import Words
from memcore.core.tokenize import fts_text
from memcore.storage.base import FileRows, Vector
from memcore.storage.postgres.queries import TS, Conn, VectorParam
from memcore.storage.rows import (
    OLD_CHUNK_COLUMNS,
    Homes,
    choose_homes,
    fresh_chunk_fields,
    kept_changes,
    match_kept,
    memory_rows,
)


class PostgresWriter(Protocol):
    """What these steps need of the write transaction (writer.py's PostgresWriter); declared
    here so that this module never imports the writer back."""

    conn: Conn
    ns: str
    chunks_changed: bool

    @property
    def bm25(self) -> str: ...

    @property
    def own_words(self) -> Words: ...

    async def all(self, query: str, params: Sequence[object] = ()) -> list[Any]: ...

    async def holding(self, claims: Sequence[tuple[str, str | None, int]]) -> set[str]: ...

    async def unskip(self, paths: Sequence[str]) -> None: ...

    async def delete_chunks(self, ids: Sequence[int]) -> None: ...

    async def revector_kept(
        self, kept: Sequence[tuple[Any, Vector | None]], model_id: str
    ) -> None: ...

    async def stage(self) -> None: ...

    def type_oid(self, name: str) -> int: ...

    async def count_bulk(self, chunks: int) -> None: ...

    def vectors_changed(self, ids: Sequence[int], *, added: bool, removed: bool) -> None: ...

    async def ensure_vector_index(
        self, model_id: str, vectors: Sequence[Vector | None]
    ) -> None: ...


STAGE = "memcore_chunk_stage"  # a temporary table of the writer's connection
_STAGE_COLUMNS = (
    ("source_file", "text"), ("chunk_index", "int4"), ("heading_path", "text"),
    ("start_line", "int4"), ("end_line", "int4"), ("content", "text"), ("body", "text"),
    ("content_hash", "text"), ("embedding", "vector"), ("embedding_model", "text"),
    ("tags", "text"), ("date", "text"), ("metadata", "text"),
)  # fmt: skip
CREATE_STAGE = (
    f"CREATE TEMP TABLE IF NOT EXISTS {STAGE} ("
    + ", ".join(f"{name} {kind}" for name, kind in _STAGE_COLUMNS)
    + ") ON COMMIT DELETE ROWS"
)
_FROM_STAGE = (
    "INSERT INTO memory_chunks (ns, source_file, chunk_index, heading_path, start_line, "
    "end_line, content, fts, content_hash, embedding, embedding_model, tags, date, metadata, "
    "updated_at, body) SELECT %s, source_file, chunk_index, heading_path, start_line, end_line, "
    f"content, to_tsvector('{TS}', body), content_hash, embedding, embedding_model, tags, "
    f"date, metadata, %s, CASE WHEN %s THEN body END FROM {STAGE} "
    "RETURNING source_file, chunk_index, id"
)
_MEMORY_COLUMNS = (
    ("memory_id", "text"), ("chunk_id", "int8"), ("path", "text"), ("user_id", "text"),
    ("agent_id", "text"), ("run_id", "text"), ("category", "text"), ("key", "text"),
    ("created", "text"), ("updated", "text"), ("metadata", "text"), ("app_id", "text"),
    ("expires", "text"), ("immutable", "bool"),
)  # fmt: skip
_UNNEST_MEMORIES = (
    "SELECT %s, * FROM unnest("
    + ", ".join(f"%s::{kind}[]" for _, kind in _MEMORY_COLUMNS)
    + ") AS u("
    + ", ".join(name for name, _ in _MEMORY_COLUMNS)
    + ")"
)
UPSERT_MEMORIES = (
    "INSERT INTO memories (ns, "
    + ", ".join(n for n, _ in _MEMORY_COLUMNS)
    + ") "
    + _UNNEST_MEMORIES
    + " ON CONFLICT (ns, memory_id) DO UPDATE SET "
    + ", ".join(f"{n} = excluded.{n}" for n, _ in _MEMORY_COLUMNS[1:12])
)
_KEPT_FIELDS = (
    "UPDATE memory_chunks c SET chunk_index = u.n, heading_path = u.heading, "
    "start_line = u.first, end_line = u.last, tags = u.tags, date = u.date, "
    "metadata = u.metadata, updated_at = %s FROM unnest(%s::int8[], %s::int4[], %s::text[], "
    "%s::int4[], %s::int4[], %s::text[], %s::text[], %s::text[]) "
    "AS u(id, n, heading, first, last, tags, date, metadata) WHERE c.id = u.id"
)


class VectorBinary(Dumper):
    """A float32 vector in pgvector's binary form (dimensions, a reserved 0, big-endian
    floats), for COPY and for a VectorParam. Its ``oid`` is the database's:
    ``vector_dumper`` makes the class."""

    format = Format.BINARY

    def dump(self, obj: Any) -> bytes:
        if isinstance(obj, VectorParam):
            obj = obj.values
        values = np.asarray(obj, dtype=">f4").ravel()
        return struct.pack(">HH", values.size, 0) + values.tobytes()


def vector_dumper(oid: int) -> type[Dumper]:
    """The dumper of ``vector`` values for a database whose type has this oid."""
    return type("VectorDumper", (VectorBinary,), {"oid": oid})


def register_vectors(conn: Conn, oid: int) -> None:
    """``vector`` values on this connection in binary: COPY's (by the type's ``oid``) and
    every VectorParam."""
    dumper = vector_dumper(oid)
    conn.adapters.register_dumper(None, dumper)
    conn.adapters.register_dumper(VectorParam, dumper)


@dataclass(slots=True)
class _File:
    """One file of the call, as planned: where its rewrite starts, its old rows kept (by chunk
    number) and the ids of its chunks from ``start`` on, as they become known."""

    rows: FileRows
    start: int
    kept: dict[int, Any] = field(default_factory=dict)
    ids: dict[int, int] = field(default_factory=dict)
    refreshed: set[int] = field(default_factory=set)

    @property
    def path(self) -> str:
        return self.rows.state.path

    @property
    def chunks(self) -> Sequence[Chunk]:
        return self.rows.chunks


async def replace_files(
    tx: PostgresWriter, files: Sequence[FileRows], model_id: str, stamp: str, ids: bool = True
) -> tuple[dict[str, list[int]], list[str]]:
    """Replace each file's rows with its new chunks (see ``IndexWriter.replace_file``); the
    paths must differ. Returns each file's chunk ids in chunk order (unless not ``ids``) and
    the appends left unwritten (see FileRows)."""
    plan = [_File(f, f.unchanged) for f in files]
    held = await tx.holding([(f.path, f.rows.stored_hash, f.start) for f in plan if f.start])
    for f in plan:
        if f.path not in held:
            f.start = 0
    left = [f.path for f in plan if f.rows.appended and not f.start]
    plan = [f for f in plan if f.start or not f.rows.appended]
    if not plan:
        return {}, left
    paths = [f.path for f in plan]
    await tx.unskip(paths)
    await _put_states(tx, [f.rows for f in plan], stamp)
    old = await _old_rows(tx, plan)
    gone: list[int] = []
    for f in plan:
        f.kept, dropped = match_kept(f.chunks, old.get(f.path, ()), f.start)
        gone += dropped
        f.ids = {n: int(row[0]) for n, row in f.kept.items()}
    await tx.delete_chunks(gone)
    await _move_kept(tx, plan, stamp)
    await tx.revector_kept(
        [(row, f.rows.vectors[n]) for f in plan for n, row in f.kept.items()], model_id
    )
    await _insert_fresh(tx, plan, model_id, stamp)
    await _put_memories(tx, plan, stamp)
    return (await _all_ids(tx, plan) if ids else {}), left


async def _put_states(tx: PostgresWriter, files: Sequence[FileRows], stamp: str) -> None:
    await tx.conn.execute(
        "INSERT INTO files (ns, path, content_hash, size, mtime_ns, indexed_at) "
        "SELECT %s, p, h, s, m, %s FROM unnest(%s::text[], %s::text[], %s::int8[], %s::int8[]) "
        "AS u(p, h, s, m) ON CONFLICT (ns, path) DO UPDATE SET "
        "content_hash = excluded.content_hash, size = excluded.size, "
        "mtime_ns = excluded.mtime_ns, indexed_at = excluded.indexed_at",
        (
            tx.ns,
            stamp,
            [f.state.path for f in files],
            [f.state.content_hash for f in files],
            [f.state.size for f in files],
            [f.state.mtime_ns for f in files],
        ),
    )


async def _old_rows(tx: PostgresWriter, plan: Sequence[_File]) -> dict[str, list[Any]]:
    """The rows each file holds from its ``start`` on, in chunk order."""
    rows = await tx.all(
        f"SELECT c.source_file, {', '.join('c.' + c for c in OLD_CHUNK_COLUMNS.split(', '))} "
        "FROM memory_chunks c JOIN unnest(%s::text[], %s::int4[]) AS u(p, n) "
        "ON c.source_file = u.p AND c.chunk_index >= u.n WHERE c.ns = %s "
        "ORDER BY c.source_file, c.chunk_index",
        ([f.path for f in plan], [f.start for f in plan], tx.ns),
    )
    out: dict[str, list[Any]] = {}
    for r in rows:
        out.setdefault(r[0], []).append(r[1:])
    return out


async def _move_kept(tx: PostgresWriter, plan: Sequence[_File], stamp: str) -> None:
    """Give kept rows their new position and fields (chunk_index goes through -id first, so
    no two rows of a file ever share one); note in each file the chunk numbers whose metadata
    changed."""
    changes = await asyncio.to_thread(lambda: [kept_changes(f.chunks, f.kept) for f in plan])
    moving = [rid for changed in changes for rid, moved, _ in changed if moved]
    if moving:
        await tx.conn.execute(
            "UPDATE memory_chunks SET chunk_index = -id WHERE id = ANY(%s)", (moving,)
        )
    rows = [(rid, *new) for changed in changes for rid, _, new in changed]
    if rows:
        await tx.conn.execute(_KEPT_FIELDS, (stamp, *map(list, zip(*rows, strict=True))))
    for f, changed in zip(plan, changes, strict=True):
        meta = {row[0]: row[8] for row in f.kept.values()}
        f.refreshed = {int(new[0]) for rid, _, new in changed if new[6] != meta[rid]}


async def _insert_fresh(
    tx: PostgresWriter, plan: Sequence[_File], model_id: str, stamp: str
) -> None:
    """The chunks no old row keeps, every file's in one COPY and one INSERT."""
    fresh = [(f, n) for f in plan for n in range(f.start, len(f.chunks)) if n not in f.kept]
    if not fresh:
        return
    tx.chunks_changed = True
    rows = await asyncio.to_thread(_stage_rows, fresh, model_id, tx.own_words)
    await tx.stage()
    async with tx.conn.cursor() as cur:
        async with cur.copy(f"COPY {STAGE} FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types([tx.type_oid(kind) for _, kind in _STAGE_COLUMNS])
            for row in rows:
                await copy.write_row(row)
        await cur.execute(_FROM_STAGE, (tx.ns, stamp, bool(tx.bm25)))
        made = await cur.fetchall()
        await cur.execute(f"DELETE FROM {STAGE}")  # a second call in this transaction
    await tx.count_bulk(len(fresh))
    by_file = {f.path: f for f in plan}
    for path, n, cid in made:
        by_file[path].ids[int(n)] = int(cid)
    vectored = [
        by_file[p].ids[int(n)] for p, n, _ in made if by_file[p].rows.vectors[int(n)] is not None
    ]
    tx.vectors_changed(vectored, added=True, removed=False)
    await tx.ensure_vector_index(model_id, [f.rows.vectors[n] for f, n in fresh])


def _stage_rows(
    fresh: Sequence[tuple[_File, int]], model_id: str, own: Words
) -> list[tuple[Any, ...]]:
    """The staging table's rows (pure CPU: segmenting and JSON, off the event loop)."""
    out = []
    for f, n in fresh:
        c, v = f.chunks[n], f.rows.vectors[n]
        out.append(
            (
                f.path, n, c.heading, c.start_line, c.end_line, c.text,
                fts_text(c.heading, c.text, own), c.content_hash, v,
                None if v is None else model_id, *fresh_chunk_fields(c),
            )
        )  # fmt: skip
    return out


async def _put_memories(tx: PostgresWriter, plan: Sequence[_File], stamp: str) -> None:
    """Memory rows of new or changed chunks (rows of deleted chunks went with them). An id
    that is already at home in a file with a smaller path becomes a copy; among the files of
    this call, too."""
    touched = {
        f.path: [n for n in range(f.start, len(f.chunks)) if n not in f.kept or n in f.refreshed]
        for f in plan
    }
    ids = [f.ids[n] for f in plan for n in touched[f.path]]
    if not ids:
        return
    for table in ("memories", "memory_copies"):
        await tx.conn.execute(
            f"DELETE FROM {table} WHERE ns = %s AND chunk_id = ANY(%s)", (tx.ns, ids)
        )
    per_file = []
    for f in plan:
        numbers = touched[f.path]
        per_file.append(
            memory_rows(f.path, [f.chunks[n] for n in numbers], [f.ids[n] for n in numbers], stamp)
        )
    wanted = list({r[0] for rows in per_file for r in rows})
    if not wanted:
        return
    current = {
        r[0]: (int(r[1]), r[2])
        for r in await tx.all(
            "SELECT memory_id, chunk_id, path FROM memories WHERE ns = %s AND memory_id = ANY(%s)",
            (tx.ns, wanted),
        )
    }
    homes = Homes([], [], [])
    for rows in per_file:
        chosen = choose_homes(rows, current)
        homes.homes.extend(chosen.homes)
        homes.copies.extend(chosen.copies)
        homes.demoted.extend(chosen.demoted)
        current |= {row[0]: (int(row[1]), row[2]) for row in chosen.homes}
    await _write_homes(tx, homes)


async def _write_homes(tx: PostgresWriter, homes: Homes) -> None:
    # one statement may touch a row once: the last home of an id wins, as row by row
    last = {row[0]: row for row in homes.homes}
    copies = [*homes.copies, *homes.demoted]
    if copies:
        await tx.conn.execute(
            "INSERT INTO memory_copies (ns, memory_id, chunk_id, path) "
            "SELECT %s, * FROM unnest(%s::text[], %s::int8[], %s::text[]) "
            "ON CONFLICT (chunk_id) DO NOTHING",
            (tx.ns, *map(list, zip(*copies, strict=True))),
        )
    if last:
        await tx.conn.execute(
            UPSERT_MEMORIES, (tx.ns, *map(list, zip(*last.values(), strict=True)))
        )


async def _all_ids(tx: PostgresWriter, plan: Sequence[_File]) -> dict[str, list[int]]:
    """Each file's chunk ids in order: those before its ``start`` read back (a file whose
    first chunks were left alone), the rest known already."""
    prefix = [f for f in plan if f.start]
    if prefix:
        rows = await tx.all(
            "SELECT c.source_file, c.chunk_index, c.id FROM memory_chunks c "
            "JOIN unnest(%s::text[], %s::int4[]) AS u(p, n) "
            "ON c.source_file = u.p AND c.chunk_index < u.n WHERE c.ns = %s",
            ([f.path for f in prefix], [f.start for f in prefix], tx.ns),
        )
        by_file = {f.path: f for f in prefix}
        for path, n, cid in rows:
            by_file[path].ids[int(n)] = int(cid)
    return {f.path: [f.ids[n] for n in range(len(f.chunks))] for f in plan}
