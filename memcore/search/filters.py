"""One reading of a read request's filters for every front (Python, CLI, HTTP, Mem0 REST, MCP):
the same names, checks and defaults, so the same request finds the same things everywhere."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping

from memcore.core.errors import InputError
from memcore.core.models import SearchFilters
from memcore.vault.memory_format import Scope, check_name


def read_filters(
    *,
    user_id: str | None = None,
    agent_id: str | None = None,
    run_id: str | None = None,
    app_id: str | None = None,
    include_shared: bool = False,
    include_turns: bool = True,
    category: str | None = None,
    metadata: Mapping[str, object] | None = None,
    tag: str | None = None,
    path: str | None = None,
    since: str | None = None,
    until: str | None = None,
    include_notes: bool = True,
    show_expired: bool = False,
) -> SearchFilters:
    """SearchFilters from a request's values, checked: scope and category names, ISO dates
    (``since`` <= ``until``), a non-empty tag. Raises InputError naming the bad value."""
    Scope(user_id, agent_id, run_id, app_id)  # validates the ids
    if category is not None:
        check_name(category, "category")
    if metadata is not None and (not isinstance(metadata, Mapping) or not metadata):
        raise InputError("filters must be a non-empty JSON object of metadata conditions")
    if tag is not None:
        tag = tag.strip().lstrip("#")
        if not tag or any(ch.isspace() for ch in tag):
            raise InputError("tag must be one word, like 'project' or '#project'")
    date_from, date_to = _day(since, "since"), _day(until, "until")
    if date_from and date_to and date_from > date_to:
        raise InputError(f"since ({date_from}) is after until ({date_to})")
    return SearchFilters(
        path_prefix=path or None, tag=tag, date_from=date_from, date_to=date_to,
        user_id=user_id, agent_id=agent_id, run_id=run_id, app_id=app_id,
        include_shared=include_shared, include_turns=include_turns, category=category,
        metadata=metadata or None, memories_only=not include_notes, show_expired=show_expired,
    )  # fmt: skip


def _day(value: str | None, name: str) -> str | None:
    if value is None:
        return None
    try:
        return dt.date.fromisoformat(value).isoformat()
    except (TypeError, ValueError):
        raise InputError(f"{name} must be a date like 2024-05-31, got {value!r}") from None
