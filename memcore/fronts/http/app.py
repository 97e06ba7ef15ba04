"""The HTTP app (Starlette): health, memcore's routes (native.py), Mem0's (mem0.py), the OpenAPI
document and the middleware that checks tokens and body sizes.

Every route calls the one MemoryService the process shares with its watcher. Errors are one
line of JSON (``{"error": "..."}``) with a 4xx/5xx status; bodies are capped; requests need the
bearer token when one is set (always, off loopback: `memcore serve` refuses to start without).
"""

from __future__ import annotations

import hmac
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from memcore.core.version import __version__
from memcore.fronts.http.common import MAX_BODY, BadRequest, error
from memcore.fronts.http.mem0 import mem0_routes
from memcore.fronts.http.native import native_routes
from memcore.service import MemoryService


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


def build_app(
    service: MemoryService,
    token: str | None,
    extra: Sequence[BaseRoute] = (),
    scoped: Mapping[str, Mapping[str, str]] | None = None,
) -> Starlette:
    """The whole HTTP app: health, memcore's routes, Mem0's, and ``extra`` (the MCP endpoint)."""

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
