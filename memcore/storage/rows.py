"""What every SQL adapter does the same way with rows: no SQL dialect, no driver. Pure.

Both adapters keep a chunk's tags and front matter as JSON text, so a kept chunk's fields can be
compared with the new ones as written, and return rows in the column orders named here.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from memcore.core.lru import ByIdentity
from memcore.core.models import TURNS_CATEGORY, Chunk, FileState, MemoryRecord
from memcore.storage.base import ChunkRow, StoredFile, Vector

# Columns of the old rows of a file that replace_file compares (chunk_index first at 2).
OLD_CHUNK_COLUMNS = (
    "id, content_hash, chunk_index, heading_path, start_line, end_line, tags, date, metadata, "
    "embedding_model"
)
CHUNK_ROW_COLUMNS = (
    "id, source_file, start_line, end_line, heading_path, content, date, tags, metadata"
)
MEMORY_SELECT = (
    "SELECT m.memory_id, c.content, m.path, c.start_line, c.end_line, m.category, m.user_id, "
    "m.agent_id, m.run_id, m.key, m.created, m.updated, m.metadata, m.app_id, m.expires, "
    "m.immutable, m.chunk_id "
    "FROM memories m JOIN memory_chunks c ON c.id = m.chunk_id"
)
# A list's order: oldest first, ties in file order (the id only parts equal lines, which no two
# memories share); MemoryQuery.after continues it
MEMORY_ORDER = "ORDER BY m.created, m.path, c.start_line, m.memory_id"


# An entity's memories, as `count` counts them: a session's transcript turns are not memories
# (a run holding only a transcript is listed, with 0)
COUNTED = f"count(*) FILTER (WHERE category <> '{TURNS_CATEGORY}')"
# Mem0's entities: the kind of each scope column of the memories table
ENTITY_COLUMNS = (
    ("agent", "agent_id"), ("app", "app_id"), ("run", "run_id"), ("user", "user_id")
)  # fmt: skip


# Columns stored_files reads, in order; the embedding comes as the backend's own value.
STORED_CHUNK_COLUMNS = (
    "source_file, chunk_index, heading_path, start_line, end_line, content, content_hash, tags, "
    "date, metadata, embedding_model, embedding"
)


def stored_files(
    states: Mapping[str, FileState],
    rows: Sequence[Sequence[Any]],
    vector: Callable[[Any], Vector | None],
) -> list[StoredFile]:
    """StoredFiles from file states and chunk rows (STORED_CHUNK_COLUMNS, in file and chunk
    order); ``vector`` decodes the backend's embedding value."""
    by_path: dict[str, list[Sequence[Any]]] = {path: [] for path in states}
    for r in rows:
        by_path[r[0]].append(r)
    out = []
    for path, chunk_rows in by_path.items():
        chunks = tuple(
            Chunk(
                path=path, index=r[1], heading_path=tuple(r[2].split(" > ")) if r[2] else (),
                start_line=r[3], end_line=r[4], text=r[5], content_hash=r[6],
                tags=tuple(json.loads(r[7])), date=r[8], metadata=json.loads(r[9]),
            )
            for r in chunk_rows
        )  # fmt: skip
        out.append(
            StoredFile(
                states[path],
                chunks,
                tuple(None if r[11] is None else vector(r[11]) for r in chunk_rows),
                tuple(r[10] for r in chunk_rows),
            )
        )
    return out


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


def chunk_row(r: Sequence[Any]) -> ChunkRow:
    """A ChunkRow from a row in CHUNK_ROW_COLUMNS order."""
    return ChunkRow(
        r[0], r[1], r[2], r[3], r[4], r[5], r[6], tuple(json.loads(r[7])), json.loads(r[8])
    )


def memory_record(r: Sequence[Any]) -> MemoryRecord:
    """A MemoryRecord from a row in MEMORY_SELECT order."""
    return MemoryRecord(
        id=r[0], text=r[1], path=r[2], start_line=r[3], end_line=r[4], category=r[5],
        user_id=r[6], agent_id=r[7], run_id=r[8], key=r[9], created=r[10], updated=r[11],
        metadata=json.loads(r[12] or "{}"), app_id=r[13], expiration_date=r[14],
        immutable=bool(r[15]),
    )  # fmt: skip


def file_states(rows: Sequence[Sequence[Any]]) -> dict[str, FileState]:
    return {r[0]: FileState(r[0], r[1], r[2], r[3]) for r in rows}


def match_kept(
    chunks: Sequence[Chunk], old: Sequence[Sequence[Any]], start: int = 0
) -> tuple[dict[int, Any], list[int]]:
    """Which old rows (OLD_CHUNK_COLUMNS) the new chunks from ``start`` on keep, by text:
    {chunk number: row}, and the ids of old rows no chunk keeps. A chunk whose text is
    unchanged keeps its row, full-text entry and vector."""
    pool: dict[str, list[Any]] = {}
    for row in old:
        pool.setdefault(row[1], []).append(row)
    kept: dict[int, Any] = {}
    for n in range(start, len(chunks)):
        if pool.get(h := chunks[n].content_hash):
            kept[n] = pool[h].pop(0)
    return kept, [row[0] for rows in pool.values() for row in rows]


def kept_changes(
    chunks: Sequence[Chunk], kept: Mapping[int, Any]
) -> list[tuple[int, bool, tuple[Any, ...]]]:
    """(row id, moved, new fields) of kept rows whose position or fields differ. Pure CPU
    (two JSON encodings a row): it runs on the writer's thread, off the event loop."""
    changed = []
    for n, row in kept.items():
        c = chunks[n]
        new = (n, c.heading, c.start_line, c.end_line, *fresh_chunk_fields(c))
        if tuple(row[2:9]) != new:
            changed.append((row[0], row[2] != n, new))
    return changed


# one encoder for every row (json.dumps with options builds one a call, a third of its cost)
_ENCODE = json.JSONEncoder(ensure_ascii=False, default=str).encode


def fresh_chunk_fields(c: Chunk) -> tuple[Any, ...]:
    """(tags JSON, date, metadata JSON) of a chunk, as stored. Remembered for memories'
    chunks, which a memory file's parse hands out again (a write to a file of a thousand
    memories compares the fields of the thousand rows it keeps); a note's chunks are made
    anew on every read, so remembering theirs would only hold them in memory."""
    if "memory" not in c.metadata:
        return _chunk_fields(c)
    return _FIELDS.get(c, None, partial(_chunk_fields, c))


_FIELDS: ByIdentity[Chunk, tuple[Any, ...]] = ByIdentity(16_384)


def _chunk_fields(c: Chunk) -> tuple[Any, ...]:
    return (_ENCODE(list(c.tags)) if c.tags else "[]", c.date, _ENCODE(dict(c.metadata)))


def memory_row(m: Mapping[str, Any], chunk_id: int, path: str, stamp: str) -> tuple[Any, ...]:
    """(memory_id, chunk_id, path, user_id, agent_id, run_id, category, key, created, updated,
    metadata JSON, app_id, expires, immutable) of one memory record, as a chunk's metadata
    carries it."""
    return (
        m["id"], chunk_id, path, m.get("user_id"), m.get("agent_id"), m.get("run_id"),
        m.get("category") or "core", m.get("key"), m.get("created") or stamp,
        m.get("updated") or m.get("created") or stamp,
        json.dumps(m.get("metadata") or {}, ensure_ascii=False), m.get("app_id"),
        m.get("expires"), m.get("immutable") is True,
    )  # fmt: skip


def memory_rows(
    path: str, chunks: Sequence[Chunk], ids: Sequence[int], stamp: str
) -> list[tuple[Any, ...]]:
    """memory_row of each chunk that holds a memory."""
    return [
        memory_row(m, i, path, stamp)
        for c, i in zip(chunks, ids, strict=True)
        if isinstance(m := c.metadata.get("memory"), dict)
    ]


@dataclass(frozen=True, slots=True)
class Homes:
    """Where each memory id of a write lives: rows to make (or keep) its home, rows that are
    copies of a home elsewhere, and former homes that become copies."""

    homes: list[tuple[Any, ...]]
    copies: list[tuple[str, int, str]]  # (memory_id, chunk_id, path)
    demoted: list[tuple[str, int, str]]


def choose_homes(rows: Sequence[tuple[Any, ...]], current: Mapping[str, tuple[int, str]]) -> Homes:
    """A memory's home is the smallest path that holds its id, whatever order files come in.
    ``rows``: memory_rows of one file; ``current``: memory_id -> (chunk_id, path) of homes
    already in the index."""
    out = Homes([], [], [])
    for row in rows:
        memory_id, chunk_id, path = row[0], row[1], row[2]
        home = current.get(memory_id)
        if home is None or home[1] == path:
            out.homes.append(row)
        elif path < home[1]:
            out.homes.append(row)
            out.demoted.append((memory_id, home[0], home[1]))
        else:
            out.copies.append((memory_id, chunk_id, path))
    return out


def next_homes(copies: Sequence[tuple[Any, ...]], stamp: str) -> list[tuple[Any, ...]]:
    """The memory rows that take over for homeless ids: from (memory_id, chunk_id, path,
    chunk metadata JSON) of their copies, the smallest path of each id."""
    first: dict[str, tuple[Any, ...]] = {}
    for copy in sorted(copies, key=lambda c: (c[0], c[2], c[1])):
        first.setdefault(copy[0], copy)
    out = []
    for _, chunk_id, path, metadata in first.values():
        record = json.loads(metadata or "{}").get("memory")
        if isinstance(record, dict):
            out.append(memory_row(record, chunk_id, path, stamp))
    return out


def copies_by_id(rows: Sequence[tuple[Any, ...]]) -> dict[str, list[str]]:
    """(memory_id, path) rows, ordered, as id -> paths."""
    out: dict[str, list[str]] = {}
    for memory_id, path in rows:
        out.setdefault(str(memory_id), []).append(str(path))
    return out
