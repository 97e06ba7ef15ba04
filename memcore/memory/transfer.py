"""Export and import: every memory as one JSON object per line, and back.

An exported row carries what makes the memory itself, in Mem0's field names: ``id``,
``memory``, ``user_id``, ``agent_id``, ``run_id``, ``category`` (and Mem0's ``categories``),
``key``, ``metadata``, ``created_at``, ``updated_at``; with history, its ADD/UPDATE/DELETE
events. Import takes such rows, or Mem0's own export (a JSON list, or ``{"results": [...]}``
as Mem0's get_all answers), and writes each memory into the Markdown with its id, scope,
metadata and timestamps. A memory whose id the vault already holds is skipped (an import run
twice adds nothing); a row that is not a memory is reported by its line and skipped.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from memcore.core.errors import InputError, MemcoreError
from memcore.core.ids import check_id
from memcore.core.lines import split_lines
from memcore.core.models import SCOPE_KEYS, MemoryQuery, MemoryRecord
from memcore.memory.adding import NewMemory
from memcore.memory.batch_plan import cut_rows
from memcore.memory.port import Memory
from memcore.memory.supplied import own_vector
from memcore.memory.writer import MemoryWriter
from memcore.vault.memory_format import Scope, check_content, check_expiry, check_name

PAGE = 1000  # memories read at a time
MAX_ID = 128


@dataclass(slots=True)
class ImportReport:
    """What an import did: memories added, ids already there, and lines it could not use."""

    added: int = 0
    present: int = 0
    bad: list[tuple[int, str]] = field(default_factory=list)  # (line or item number, why)

    def summary(self) -> str:
        parts = [f"imported {self.added}", f"{self.present} already there"]
        if self.bad:
            parts.append(f"{len(self.bad)} skipped")
        return ", ".join(parts)


def export_row(record: MemoryRecord) -> dict[str, Any]:
    return {
        "id": record.id,
        "memory": record.text,
        "user_id": record.user_id,
        "agent_id": record.agent_id,
        "run_id": record.run_id,
        "app_id": record.app_id,
        "category": record.category,
        "categories": [record.category],
        "key": record.key,
        "metadata": dict(record.metadata),
        "created_at": record.created,
        "updated_at": record.updated,
    }


async def export_rows(writer: MemoryWriter, history: bool = False) -> AsyncIterator[dict[str, Any]]:
    """Every memory of the vault (every scope, conversation turns too), oldest first, as one
    snapshot sees them: a write meanwhile neither shows half nor moves a memory between pages.
    Each page starts where the last ended (``MemoryQuery.after``), so a million memories are
    read in one pass, not sorted again a page."""
    query = MemoryQuery(include_turns=True, limit=PAGE)
    async with writer.store.snapshot() as reader:
        while True:
            page = await reader.memories(query)
            for record in page:
                row = export_row(record)
                if history:
                    row["history"] = await writer.history_of(record.id)
                yield row
            if len(page) < PAGE:
                return
            last = page[-1]
            query = dataclasses.replace(
                query, after=(last.created, last.path, last.start_line, last.id)
            )


async def memory_rows(memory: Memory) -> list[dict[str, Any]]:
    """Every memory another adapter holds (a Mem0 server), a page at a time, as export rows."""
    rows: list[dict[str, Any]] = []
    while page := await memory.get_all(limit=PAGE, offset=len(rows)):
        rows += [export_row(record) for record in page]
        if len(page) < PAGE:
            break
    return rows


def read_rows(text: str) -> Iterator[tuple[int, Any]]:
    """(line or item number, value) of each row: JSON Lines, or one JSON document that is a
    list of memories or Mem0's ``{"results": [...]}``."""
    stripped = text.lstrip()
    if stripped.startswith(("[", "{")):
        try:
            whole = json.loads(text)
        except ValueError:
            whole = None  # JSON Lines whose first line is an object
        else:
            if isinstance(whole, Mapping) and isinstance(whole.get("results"), list):
                whole = whole["results"]
            if isinstance(whole, list):
                yield from enumerate(whole, 1)
                return
    for number, line in enumerate(split_lines(text), 1):
        if not line.strip():
            continue
        try:
            yield number, json.loads(line)
        except ValueError as exc:
            yield number, InputError(f"not JSON ({exc})")


# What an imported id may hold: UUIDs, Mem0's and memcore's ids; never a path ("../x", "a/b"),
# a space, or what would end the Markdown comment the id is written in ("-->")
ID_CHARS = re.compile(r"[A-Za-z0-9_:@+=~-][A-Za-z0-9_.:@+=~-]*")


def new_memory(row: Any) -> NewMemory:
    """The memory a row describes. Raises InputError saying what is wrong with it."""
    if isinstance(row, InputError):
        raise row
    if not isinstance(row, Mapping):
        raise InputError("not a JSON object")
    text = row.get("memory", row.get("content", row.get("text")))
    if not isinstance(text, str):
        raise InputError("no memory text (memory, content or text)")
    check_content(text)
    memory_id = row.get("id")
    if memory_id is not None and (
        not isinstance(memory_id, str)
        or not 0 < len(memory_id) <= MAX_ID
        or not ID_CHARS.fullmatch(memory_id)
    ):
        raise InputError(
            f"id must be 1-{MAX_ID} letters, digits and - _ . : @ + = ~, not starting with '.' "
            f"(got {str(memory_id)[:40]!r})"
        )
    scope = Scope(*(_name(row, k) for k in SCOPE_KEYS))
    category = row.get("category")
    if category is None and isinstance(row.get("categories"), list) and row["categories"]:
        category = row["categories"][0]
    metadata = row.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        raise InputError("metadata must be an object")
    key = row.get("key")
    if key is not None and not isinstance(key, str):
        raise InputError("key must be text")
    created, updated = _stamp(row, "created_at"), _stamp(row, "updated_at")
    vector, model = row.get("vector"), row.get("vector_model")
    made = NewMemory(
        content=text, scope=scope, category=check_name(str(category or "core"), "category"),
        key=key, metadata=dict(metadata), created=created, updated=updated or created,
        expires=check_expiry(row.get("expiration_date")), immutable=row.get("immutable") is True,
        vector=own_vector(vector, model),
        vector_model=None if model is None else str(model),
    )  # fmt: skip
    return dataclasses.replace(made, id=memory_id) if memory_id else made


def _name(row: Mapping[str, Any], key: str) -> str | None:
    value = row.get(key)
    return None if value in (None, "") else check_id(value, key)


def _stamp(row: Mapping[str, Any], key: str) -> str | None:
    value = row.get(key)
    if value in (None, ""):
        return None
    try:
        when = dt.datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        raise InputError(f"{key} is not an ISO timestamp: {value!r}") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return when.isoformat(timespec="milliseconds")


def in_parts(rows: Iterable[tuple[int, Any]], size: int) -> Iterator[list[tuple[int, Any]]]:
    """Rows held in memory, in parts of at most ``size`` made of whole lists, as a planned
    file is cut (memory/batch_plan.py); a list's rows keep their order."""
    held = list(rows)
    for part in cut_rows([row for _, row in held], size):
        yield [held[i] for i in part]


async def import_rows(
    writer: MemoryWriter,
    parts: Iterable[Iterable[tuple[int, Any]]],
    progress: Callable[[int], None] | None = None,
    report: ImportReport | None = None,
) -> ImportReport:
    """Write the memories of each part of rows in one load (one write a file it touches);
    the ids the vault holds already, or an earlier row of the import, are counted, not
    written. A failure leaves the parts before it in (``report``, if given, says how many):
    the same import run again adds the rest."""
    report = ImportReport() if report is None else report
    for part in parts:
        fresh: dict[str, NewMemory] = {}
        rows = 0
        for number, row in part:
            rows += 1
            try:
                memory = new_memory(row)
            except MemcoreError as exc:
                report.bad.append((number, str(exc)))
                continue
            if memory.id in fresh:
                report.present += 1
            else:
                fresh[memory.id] = memory
        held = {r.id for r in await writer.records(list(fresh), missing_ok=True)}
        report.present += len(held)
        if held:
            fresh = {i: m for i, m in fresh.items() if i not in held}
        if fresh:
            report.added += await writer.load(list(fresh.values()))
        if progress is not None:
            progress(rows)
    report.bad.sort()
    return report
