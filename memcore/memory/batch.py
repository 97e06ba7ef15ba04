"""Memories from JSON lines (``memcore add --file``): one object per line, checked line by
line so that a bad line is named and skipped and the rest go in. Pure.

A line is ``{"memory": "..."}`` (or ``"content"`` / ``"text"``) with optional ``user_id``,
``agent_id``, ``run_id``, ``app_id``, ``category``, ``key``, ``metadata`` and ``id``: the fields of
memcore's own records (``memcore list --json``), so an export reads back as it was. ``vector``
(and ``vector_model``) carry the caller's own vector for the text (memory/supplied.py); one of
the wrong size or model refuses its chunk of the file whole, naming both.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass

from memcore.core.errors import InputError
from memcore.core.ids import check_id
from memcore.core.models import SCOPE_KEYS
from memcore.memory.adding import NewMemory
from memcore.memory.supplied import own_vector
from memcore.vault.memory_format import Scope, check_content, check_metadata, check_name

TEXT_FIELDS = ("memory", "content", "text")
KNOWN = {*TEXT_FIELDS, *SCOPE_KEYS, "category", "key", "metadata", "id", "vector",
         "vector_model"}  # fmt: skip
# what a record of `memcore list --json` also holds, derived or read-only: taken and ignored
DERIVED = {"created_at", "updated_at", "path", "start_line", "end_line", "score", "strength",
           "event", "hash"}  # fmt: skip
_ID_CHARS = set("0123456789abcdef")


@dataclass(frozen=True, slots=True)
class BadLine:
    number: int  # 1-based
    reason: str


def parse_lines(
    lines: Iterable[str | None],
    defaults: Scope | None = None,
    category: str | None = None,
    first: int = 1,
) -> tuple[list[NewMemory], list[BadLine]]:
    """The memories of JSON lines, and the lines that are not one (blank lines, and None for
    a line the caller could not read, are skipped). ``defaults`` and ``category`` fill what a
    line leaves out; ``first`` is the number of the first line."""
    return parse_numbered(enumerate(lines, first), defaults, category)


def parse_numbered(
    lines: Iterable[tuple[int, str | None]],
    defaults: Scope | None = None,
    category: str | None = None,
) -> tuple[list[NewMemory], list[BadLine]]:
    """``parse_lines`` of lines given with their numbers (a part of a file, not a range)."""
    good: list[NewMemory] = []
    bad: list[BadLine] = []
    defaults = defaults or Scope()
    for number, line in lines:
        if line is None or not line.strip():
            continue
        try:
            good.append(_memory(line, defaults, category))
        except InputError as exc:
            bad.append(BadLine(number, str(exc)))
    return good, bad


def _memory(line: str, defaults: Scope, category: str | None) -> NewMemory:
    try:
        data = json.loads(line)
    except ValueError as exc:
        raise InputError(f"not JSON ({str(exc).split(':')[0]})") from None
    if not isinstance(data, dict):
        raise InputError("not a JSON object")
    unknown = set(data) - KNOWN - DERIVED
    if unknown:
        raise InputError(f"unknown field(s): {', '.join(sorted(unknown))}")
    text = next((data[f] for f in TEXT_FIELDS if f in data), None)
    if not isinstance(text, str):
        raise InputError("no text: give memory, content or text")
    scope = {
        name: check_id(data[name], name) if data.get(name) is not None else getattr(defaults, name)
        for name in SCOPE_KEYS
    }
    key = data.get("key")
    if key is not None and (not isinstance(key, str) or not key.strip()):
        raise InputError("key must be a non-empty string")
    vector, model = data.get("vector"), data.get("vector_model")
    memory = NewMemory(
        check_content(text),
        Scope(**scope),
        _name(data.get("category") or category or "core", "category"),
        key,
        check_metadata(data.get("metadata")),
        vector=own_vector(vector, model),
        vector_model=None if model is None else str(model),
    )
    given = data.get("id")
    if given is not None:
        if not isinstance(given, str) or not _is_id(given):
            raise InputError(f"id {given!r} is not a memory id (m- and 16 hex digits)")
        memory = dataclasses.replace(memory, id=given)
    return memory


def _name(value: object, what: str) -> str:
    if not isinstance(value, str):
        raise InputError(f"{what} must be text")
    return check_name(value, what)


def _is_id(value: str) -> bool:
    return value.startswith("m-") and len(value) == 18 and set(value[2:]) <= _ID_CHARS
