"""The HTTP API (Starlette): memcore's own routes under /api, Mem0's REST routes (mem0_api.py).

Every route calls the one MemoryService the process shares with its watcher. Errors are one
line of JSON (``{"error": "..."}``) with a 4xx/5xx status; bodies are capped; requests need the
bearer token when one is set (always, off loopback: `memcore serve` refuses to start without).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

import numpy as np
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from memcore.errors import (
    ConfigError,
    InputError,
    LLMError,
    MemcoreError,
    NotFound,
    StorageBusy,
    VaultError,
    WriteConflict,
)
from memcore.models import MemoryRecord, SearchFilters
from memcore.service import MemoryService
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


class Guard:
    """ASGI middleware: bearer token (when set; a scoped token binds the request to its scope)
    and a cap on body size."""

    def __init__(
        self, app: ASGIApp, token: str | None, scoped: Mapping[str, Mapping[str, str]]
    ) -> None:
        self.app = app
        self.tokens: dict[str, Mapping[str, str]] = dict(scoped)
        if token is not None:
            self.tokens[token] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if self.tokens and scope["path"] != "/health":
            scheme, _, value = headers.get("authorization", "").partition(" ")
            binding = next(
                (
                    b for t, b in self.tokens.items()
                    if hmac.compare_digest(value.strip().encode(), t.encode())
                ),
                None,
            ) if scheme.lower() in ("bearer", "token") else None  # fmt: skip
            if binding is None:
                await error(401, "missing or wrong token")(scope, receive, send)
                return
            if binding and scope["path"].startswith("/mcp"):
                await error(403, "a scope-bound token cannot use /mcp yet")(scope, receive, send)
                return
            scope.setdefault("state", {})["bound"] = binding
        length = headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY):
            await error(413, f"request body over {MAX_BODY:,} bytes")(scope, receive, send)
            return
        await self.app(scope, _capped(receive), send)


def _capped(receive: Receive) -> Receive:
    seen = 0

    async def wrapped() -> Any:
        nonlocal seen
        message = await receive()
        seen += len(message.get("body", b""))
        if seen > MAX_BODY:
            raise BadRequest(f"request body over {MAX_BODY:,} bytes")
        return message

    return wrapped


def native_routes(service: MemoryService) -> list[Route]:  # noqa: C901 - a route table
    """memcore's own API: search, context, status and the memory operations."""
    from memcore.strength_api import strength_routes

    m = service.memories

    def scope_of(request: Request, data: Mapping[str, Any]) -> dict[str, Any]:
        return within(request, {k: typed(data, k, str) for k in SCOPE_KEYS})

    @handle
    async def search(request: Request) -> Response:
        data = await body_of(
            request,
            {"query", "limit", "user_id", "agent_id", "run_id", "scope_only", "category",
             "filters", "tag", "path", "since", "until", "threshold", "query_vector",
             "reinforce"},
        )  # fmt: skip
        if "query" not in data and "query_vector" not in data:
            raise BadRequest("missing field(s): query (or query_vector)")
        limit = typed(data, "limit", int, 5)
        if not 1 <= limit <= 1000:
            raise BadRequest("limit must be 1-1000")
        filters = SearchFilters(
            path_prefix=typed(data, "path", str), tag=typed(data, "tag", str),
            date_from=typed(data, "since", str), date_to=typed(data, "until", str),
            scope_only=bool(typed(data, "scope_only", bool, False)),
            category=typed(data, "category", str), metadata=typed(data, "filters", dict),
            **scope_of(request, data),
        )  # fmt: skip
        query = typed(data, "query", str, "")
        result = await service.search(
            query, limit, filters, min_score=typed(data, "threshold", (int, float)),
            query_vector=vector_of(typed(data, "query_vector", list)),
        )  # fmt: skip
        async with service.store.snapshot() as reader:
            records = await reader.memories_of_chunks([h.chunk_id for h in result.hits])
        if typed(data, "reinforce", bool, False):
            await m.reinforce_hits(result.hits, records)
        out = result.to_dict()
        for hit, row in zip(result.hits, out["results"], strict=True):  # type: ignore[call-overload]
            row["memory_id"] = records[hit.chunk_id].id if hit.chunk_id in records else None
        return JSONResponse(out)

    @handle
    async def context(request: Request) -> Response:
        data = await body_of(request, {"query", "limit", "tag", "path"}, {"query"})
        filters = SearchFilters(
            tag=typed(data, "tag", str), path_prefix=typed(data, "path", str), **within(request, {})
        )
        block = await service.context(
            typed(data, "query", str), typed(data, "limit", int, 3), filters
        )
        return JSONResponse({"context": block})

    @handle
    async def status(request: Request) -> Response:
        return JSONResponse((await service.status()).to_dict())

    @handle
    async def add(request: Request) -> Response:
        data = await body_of(
            request,
            {"content", "messages", "user_id", "agent_id", "run_id", "metadata", "category",
             "key", "infer"},
        )  # fmt: skip
        content = data.get("messages", data.get("content"))
        if not isinstance(content, str | list):
            raise BadRequest("give content (text) or messages (a list)")
        records = await m.add(
            content, metadata=typed(data, "metadata", dict), key=typed(data, "key", str),
            category=typed(data, "category", str, "core"),
            infer=bool(typed(data, "infer", bool, False)), **scope_of(request, data),
        )  # fmt: skip
        return JSONResponse({"results": [r.to_dict() for r in records]})

    @handle
    async def list_all(request: Request) -> Response:
        q = request.query_params
        unknown = set(q) - {"user_id", "agent_id", "run_id", "category", "tag", "limit", "offset"}
        if unknown:
            raise BadRequest(f"unknown parameter(s): {', '.join(sorted(unknown))}")
        try:
            limit, offset = int(q.get("limit", "100")), int(q.get("offset", "0"))
        except ValueError:
            raise BadRequest("limit and offset must be numbers") from None
        records = await m.get_all(
            **within(request, q), category=q.get("category"), tag=q.get("tag"), limit=limit,
            offset=offset,
        )  # fmt: skip
        return JSONResponse({"results": [r.to_dict() for r in records]})

    @handle
    async def one(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        found = owned(request, await m.get(memory_id, review=request.method == "GET"))
        if request.method == "GET":
            return JSONResponse(found.to_dict())
        if request.method == "DELETE":
            await m.delete(memory_id)
            return JSONResponse({"deleted": memory_id})
        data = await body_of(request, {"content", "metadata"})
        record = await m.update(
            memory_id, typed(data, "content", str), typed(data, "metadata", dict)
        )
        return JSONResponse(record.to_dict())

    @handle
    async def history(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        if bound(request):
            owned(request, await m.get(memory_id, review=False))  # deleted: full access only
        return JSONResponse({"results": await m.history(memory_id)})

    @handle
    async def conversation(request: Request) -> Response:
        session = request.path_params["session_id"]
        if bound(request) and within(request, {"run_id": session})["user_id"] is not None:
            raise Forbidden("conversations have no user; a user-bound token cannot reach them")
        if request.method == "GET":
            raw = request.query_params.get("limit")
            limit = int(raw) if raw and raw.isdigit() else None
            return JSONResponse({"messages": await service.conversations.load(session, limit)})
        if request.method == "DELETE":
            return JSONResponse({"deleted": await service.conversations.reset(session)})
        data = await body_of(request, {"messages"}, {"messages"})
        messages = typed(data, "messages", list)
        saved = await service.conversations.save(session, messages)
        return JSONResponse({"saved": len(saved)})

    return [
        Route("/api/memory/search", search, methods=["POST"]),
        Route("/api/memory/context", context, methods=["POST"]),
        Route("/api/status", status, methods=["GET"]),
        Route("/api/memories", add, methods=["POST"]),
        Route("/api/memories", list_all, methods=["GET"]),
        Route("/api/memories/{memory_id}", one, methods=["GET", "PUT", "DELETE"]),
        Route("/api/memories/{memory_id}/history", history, methods=["GET"]),
        Route("/api/conversations/{session_id}", conversation, methods=["GET", "PUT", "DELETE"]),
        *strength_routes(service),
    ]


def build_app(
    service: MemoryService,
    token: str | None,
    extra: Sequence[BaseRoute] = (),
    scoped: Mapping[str, Mapping[str, str]] | None = None,
) -> Starlette:
    """The whole HTTP app: health, memcore's routes, Mem0's, and ``extra`` (the MCP endpoint)."""
    from memcore.mem0_api import mem0_routes

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    routes = [Route("/health", health), *native_routes(service), *mem0_routes(service), *extra]
    schema = openapi(routes)

    async def openapi_json(request: Request) -> Response:
        return JSONResponse(schema)

    routes.append(Route("/openapi.json", openapi_json, methods=["GET"]))

    async def not_found(request: Request, exc: Exception) -> Response:
        return error(404, f"no route {request.method} {request.url.path}")

    async def bad(request: Request, exc: Exception) -> Response:
        return error(400, str(exc))

    async def crash(request: Request, exc: Exception) -> Response:
        return error(500, f"internal error: {type(exc).__name__}")

    return Starlette(
        routes=routes,
        middleware=[Middleware(Guard, token=token, scoped=scoped or {})],
        exception_handlers={404: not_found, 405: not_found, BadRequest: bad, Exception: crash},
    )


def openapi(routes: Sequence[BaseRoute]) -> dict[str, Any]:
    """An OpenAPI 3.1 document of the routes: paths, methods, JSON bodies, one-line errors."""
    from memcore import __version__

    error_body = {
        "description": "one-line error",
        "content": {"application/json": {"schema": {
            "type": "object", "properties": {"error": {"type": "string"}}}}},
    }  # fmt: skip
    json_object = {"content": {"application/json": {"schema": {"type": "object"}}}}
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        if not isinstance(route, Route):
            continue
        for method in sorted((route.methods or set()) - {"HEAD"}):
            op: dict[str, Any] = {
                "operationId": f"{method.lower()}_{route.path.strip('/').replace('/', '_')}",
                "responses": {"200": {"description": "OK", **json_object}, "4XX": error_body},
            }
            if method in ("POST", "PUT"):
                op["requestBody"] = {"required": method == "POST", **json_object}
            params = [p.strip("{}") for p in route.path.split("/") if p.startswith("{")]
            if params:
                op["parameters"] = [
                    {"name": p, "in": "path", "required": True, "schema": {"type": "string"}}
                    for p in params
                ]
            paths.setdefault(route.path, {})[method.lower()] = op
    return {
        "openapi": "3.1.0",
        "info": {"title": "memcore", "version": __version__},
        "components": {"securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}},
        "security": [{"bearer": []}],
        "paths": paths,
    }
