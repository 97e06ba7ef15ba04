"""Search results when memories live elsewhere (memory.adapter = mem0): the vault's notes,
searched here, and the adapter's memories, as one list by score."""

from __future__ import annotations

import dataclasses

from memcore.core.errors import InputError, MemcoreError
from memcore.core.models import Hit, MemoryRecord, SearchFilters, SearchResult
from memcore.memory.port import Memory

DISABLED = "memory is disabled (memory.adapter = none): nothing is stored or searched"


def remote_hit(record: MemoryRecord, n: int) -> Hit:
    """A memory of another store as a search hit: no file, no lines; where it lives by id."""
    return Hit(
        chunk_id=-1 - n, path=f"{record.path or 'mem0'}/{record.id}", start_line=0, end_line=0,
        heading="", score=record.score or 0.0, text=record.text,
        date=record.created[:10] or None, id=record.id,
    )  # fmt: skip


async def with_remote_memories(
    memories: Memory,
    local: SearchResult,
    query: str,
    limit: int,
    filters: SearchFilters,
    min_score: float | None,
) -> SearchResult:
    """``local`` (the notes) and the adapter's best ``limit`` memories for the same query and
    scope, highest score first, cut at ``limit``. A filter the remote cannot apply (a path, a
    tag, dates) keeps its memories out rather than answer without it; a server that fails
    leaves them out with a warning."""
    if filters.path_prefix or filters.tag or filters.date_from or filters.date_to:
        return local
    try:
        records = await memories.search(
            query, user_id=filters.user_id, agent_id=filters.agent_id, run_id=filters.run_id,
            category=filters.category, filters=filters.metadata, limit=limit,
            threshold=min_score,
        )  # fmt: skip
    except InputError:
        raise  # the caller's mistake: said as for any search
    except MemcoreError as exc:  # the server is away: the notes still answer, and say so
        warning = f"memories from memory.adapter = {memories.kind} left out: {exc}"
        return dataclasses.replace(local, warnings=(*local.warnings, warning))
    hits = [remote_hit(r, n) for n, r in enumerate(records)]
    merged = sorted([*local.hits, *hits], key=lambda h: -h.score)[:limit]
    return dataclasses.replace(local, hits=tuple(merged))
