"""How Mem0's requests read as memcore's: filters taken apart into a scope, read filters and
one filter over the memories; a scope named in two places; the conditions Mem0's fields add
(``metadata``, ``start_date`` / ``end_date``); whether an add infers."""

from __future__ import annotations

import ast
import json
from collections.abc import Mapping
from typing import Any, NamedTuple

from memcore.core.models import SCOPE_KEYS
from memcore.fronts.http.common import BadRequest, scope_fields
from memcore.fronts.http.schemas import MEM0_IGNORED, MEM0_IGNORED_PARAMS, Mem0AddBody
from memcore.service import MemoryService

IGNORED = set(MEM0_IGNORED) | set(MEM0_IGNORED_PARAMS)


READ_KEYS = {"category": str, "tag": str, "path": str, "since": str, "until": str,
             "include_shared": bool, "include_turns": bool}  # fmt: skip


def split_read_filters(filters: Any) -> tuple[dict[str, Any], Any]:
    """memcore's read filters out of Mem0 filters (top level, or parts of a top-level AND):
    (those, the rest)."""
    if not isinstance(filters, Mapping):
        return {}, filters
    found: dict[str, Any] = {}

    def take(part: Mapping[str, Any]) -> dict[str, Any]:
        rest = {}
        for key, value in part.items():
            if key not in READ_KEYS:
                rest[key] = value
            elif not isinstance(value, READ_KEYS[key]):
                raise BadRequest(f"filters.{key} must be {READ_KEYS[key].__name__}")
            else:
                found[key] = value
        return rest

    if set(filters) == {"AND"} and isinstance(filters["AND"], list):
        parts = [take(p) if isinstance(p, Mapping) else p for p in filters["AND"]]
        rest: Any = {"AND": [p for p in parts if p != {}]}
        return found, (rest if rest["AND"] else None)
    left = take(filters)
    return found, (left or None)


class Split(NamedTuple):
    """Mem0 filters taken apart: the scope, the rest as one filter memcore evaluates in SQL,
    and the names of the keys that change nothing here (``org_id`` ...), for the header."""

    scope: dict[str, Any]
    rest: dict[str, Any] | None
    ignored: tuple[str, ...] = ()


def split_filters(filters: Any) -> Split:
    """Mem0 filters -> (scope, the rest as a filter memcore evaluates in SQL, ignored keys).

    A scope key with a plain name, at the top or in a top-level AND, is the scope (a scoped
    read: the scope's memories); ``"*"`` (any non-empty value) is a condition. Everything
    else: OR, NOT,
    operators (``{"user_id": {"in": [...]}}``), ``created_at`` / ``updated_at`` ranges,
    ``categories`` and metadata keys becomes one filter over the memories
    (storage/filters_sql.py), whose unknown operators are refused by name."""
    if filters is None:
        return Split({}, None)
    if not isinstance(filters, Mapping):
        raise BadRequest("filters must be an object")
    if "AND" in filters and not isinstance(filters["AND"], list):
        raise BadRequest("filters.AND must be a list of objects")
    parts = list(filters["AND"]) if set(filters) == {"AND"} else [filters]
    scope: dict[str, Any] = {}
    rest: list[dict[str, Any]] = []
    skipped: list[str] = []
    for part in parts:
        if not isinstance(part, Mapping):
            raise BadRequest("each AND filter must be an object")
        for key, value in part.items():
            if key in SCOPE_KEYS and isinstance(value, str) and value != "*":
                if scope.get(key, value) != value:
                    raise BadRequest(f"filters name two values of {key}")
                scope[key] = value
            elif key in IGNORED and key != "categories":
                skipped.append(key)
            else:
                rest.append({key: value})
    return Split(scope, {"AND": rest} if rest else None, tuple(dict.fromkeys(skipped)))


def with_scope(filters: Any, scope: Mapping[str, Any]) -> Any:
    """Mem0 filters with a scope named beside them (v1 parameters, a 0.1.x client's v2
    body) joined in."""
    named = [{k: v} for k, v in scope.items() if v is not None]
    if not named:
        return filters
    return {"AND": [*named, filters]} if filters else {"AND": named}


def inference(service: MemoryService, asked: bool | None) -> tuple[bool, str]:
    """Whether an add infers, and the warning when it cannot as asked. Mem0 infers by
    default; memcore only with an LLM. ``infer: true`` without one stores the messages as
    Mem0 does with ``infer: false``, unless ``mem0.infer_without_llm = "refuse"`` (then the
    memory layer refuses it: 400)."""
    if service.llm is not None:
        return (True if asked is None else asked), ""
    if not asked or service.settings.mem0.infer_without_llm == "refuse":
        return bool(asked), ""
    return False, (
        "infer=true needs an LLM (llm.provider) and none is set: the messages were stored as "
        "given, one memory each, as Mem0 does with infer=false (mem0.infer_without_llm)"
    )


def add_scope(data: Mem0AddBody) -> tuple[dict[str, Any], tuple[str, ...]]:
    """An add's scope: its top-level ids (0.x and 1.x clients) joined with those in
    ``filters`` (the 2.x client), and the names of the filters an add cannot use."""
    split = split_filters(data.filters)
    rest = split.rest["AND"] if split.rest else []
    named = tuple(dict.fromkeys([*split.ignored, *(k for part in rest for k in part)]))
    return joined_scope(scope_fields(data), split.scope), named


def joined_scope(given: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """A scope named in two places (parameters and filters): one scope, or a 400."""
    scope = {k: v for k, v in given.items() if v is not None}
    for key, value in more.items():
        if scope.get(key, value) != value:
            raise BadRequest(f"{key} differs between the request and its filters")
        scope[key] = value
    return scope


def parsed_filters(text: str | None) -> dict[str, Any]:
    """The scope of delete_all's ``filters`` parameter: JSON, or a Python dict's text (the
    2.x client sends ``str(dict)``). Only scope ids: a delete_all by anything else is a 400."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except ValueError:
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            raise BadRequest("filters must be an object, as JSON") from None
    split = split_filters(value)
    if split.rest is not None:
        raise BadRequest("delete_all's filters name a scope only (user_id, agent_id, ...)")
    return split.scope


def metadata_conditions(metadata: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """Mem0 v1's ``metadata`` on a search or a listing: memories whose metadata holds each
    key with that value."""
    return [{k: v} for k, v in (metadata or {}).items()]


def created_between(start: Any, end: Any) -> list[dict[str, Any]]:
    """``start_date`` / ``end_date`` of a listing: created_at on or after, on or before."""
    bounds = {op: v for op, v in (("gte", start), ("lte", end)) if v is not None}
    return [{"created_at": bounds}] if bounds else []


def with_conditions(filters: Any, conditions: list[dict[str, Any]]) -> Any:
    """Mem0 filters and more conditions, all of which must hold."""
    if not conditions:
        return filters
    if filters is None:
        return {"AND": conditions}
    if (
        isinstance(filters, Mapping)
        and set(filters) == {"AND"}
        and isinstance(filters["AND"], list)
    ):
        return {"AND": [*filters["AND"], *conditions]}
    return {"AND": [filters, *conditions]}
