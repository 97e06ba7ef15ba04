"""What every HTTP route group shares: body parsing and typing, the token's scope, and the one
mapping of memcore's errors to statuses and one-line JSON errors."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Collection, Mapping
from typing import Any

import numpy as np
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from memcore.core.errors import (
    ConfigError,
    InputError,
    LLMError,
    MemcoreError,
    NotFound,
    StorageBusy,
    VaultError,
    WriteConflict,
)
from memcore.core.models import MemoryRecord
from memcore.storage.base import Vector

MAX_BODY = 2_000_000  # a memory may hold 1 MB of text; JSON escaping can double it
Handler = Callable[[Request], Awaitable[Response]]


class BadRequest(Exception):
    """A request memcore cannot take: 400 with this message."""


class Forbidden(Exception):
    """The token may not do this (it is bound to another scope): 403."""


SCOPE_KEYS = ("user_id", "agent_id", "run_id")


def bound(request: Request) -> dict[str, str]:
    """The scope the request's token is bound to ({} for a full-access token)."""
    return dict(request.scope.get("state", {}).get("bound") or {})


def within(request: Request, given: Mapping[str, Any]) -> dict[str, Any]:
    """The caller's scope with the token's binding applied: a bound field is filled in, and
    asking for another value of it is refused."""
    scope = {k: given.get(k) for k in SCOPE_KEYS}
    for key, value in bound(request).items():
        if scope[key] not in (None, value):
            raise Forbidden(f"this token is bound to {key}={value}")
        scope[key] = value
    return scope


def owned(request: Request, record: MemoryRecord) -> MemoryRecord:
    """A record the token may see; to a bound token another scope's memory does not exist."""
    for key, value in bound(request).items():
        if getattr(record, key) != value:
            raise NotFound(f"no memory with id {record.id!r}")
    return record


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


STATUS: list[tuple[type[Exception], int]] = [
    (BadRequest, 400),
    (Forbidden, 403),
    (InputError, 400),
    (ConfigError, 400),
    (NotFound, 404),
    (WriteConflict, 409),
    (VaultError, 409),
    (StorageBusy, 503),
    (LLMError, 502),
    (MemcoreError, 500),
]


def handle(fn: Handler) -> Handler:
    """Map memcore's errors to one-line JSON responses (the one place that does)."""

    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request)
        except Exception as exc:
            for kind, status in STATUS:
                if isinstance(exc, kind):
                    return error(status, str(exc))
            raise

    return wrapped


async def body_of(
    request: Request, allowed: Collection[str], required: Collection[str] = ()
) -> dict[str, Any]:
    """The JSON object body, with only ``allowed`` keys and every ``required`` one."""
    raw = await request.body()
    try:
        data = json.loads(raw or b"{}")
    except ValueError as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    unknown = set(data) - set(allowed)
    if unknown:
        raise BadRequest(f"unknown field(s): {', '.join(sorted(unknown))}")
    missing = set(required) - set(data)
    if missing:
        raise BadRequest(f"missing field(s): {', '.join(sorted(missing))}")
    return data


def vector_of(values: list[Any] | None) -> Vector | None:
    """A query vector from JSON: a list of numbers (the searcher rejects an empty, zero or
    non-finite one, and one of the wrong size, with a one-line 400)."""
    if values is None:
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        raise BadRequest("query_vector must be a list of numbers")
    return np.asarray(values, dtype=np.float32)


def typed(
    data: Mapping[str, Any], key: str, kind: type | tuple[type, ...], default: Any = None
) -> Any:
    value = data.get(key, default)
    if value is not None and (
        not isinstance(value, kind) or (isinstance(value, bool) and kind is int)
    ):
        raise BadRequest(f"{key} has the wrong type")
    return value
