"""The HTTP app (Starlette): health, memcore's routes (native.py), Mem0's (mem0.py), the OpenAPI
document and the middleware that checks tokens and body sizes.

Every route calls the one MemoryService the process shares with its watcher. Errors are one
line of JSON (``{"error": "..."}``) with a 4xx/5xx status; bodies are capped; requests need the
bearer token when one is set (always, off loopback: `memcore serve` refuses to start without).
"""

from __future__ import annotations

import hmac
from collections.abc import Collection, Mapping, Sequence
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

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")
WRITES = ("POST", "PUT", "PATCH", "DELETE")


def host_name(host_header: str) -> str:
    """The name in a Host header, without its port ("[::1]:8765" -> "[::1]")."""
    if host_header.startswith("["):
        return host_header.split("]")[0] + "]"
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


class Guard:
    """ASGI middleware, in order: the Host header must name this server (a web page that
    rebinds its own name to 127.0.0.1 is refused, 421); a write from a browser must come from
    this server's own origin (no cross-site request, 403) with a JSON body (415); the bearer
    token (when set; a scoped token binds the request to its scope); a cap on body size.
    ``hosts`` None: no Host or Origin check (the daemon's private Unix socket)."""

    def __init__(
        self,
        app: ASGIApp,
        token: str | None,
        scoped: Mapping[str, Mapping[str, str]],
        hosts: Collection[str] | None = None,
    ) -> None:
        self.app = app
        self.tokens: dict[str, Mapping[str, str]] = dict(scoped)
        if token is not None:
            self.tokens[token] = {}
        self.hosts = None if hosts is None else {h.lower() for h in hosts}

    def _refusal(self, method: str, headers: Mapping[str, str]) -> JSONResponse | None:
        if self.hosts is None:
            return None
        host = headers.get("host", "").lower()
        if host_name(host) not in self.hosts:
            return error(
                421, f"this server does not answer for host {host!r} (serve --allow-host NAME)"
            )
        if method not in WRITES:
            return None
        origin = headers.get("origin")
        if origin is not None and origin.lower() not in (f"http://{host}", f"https://{host}"):
            return error(403, f"cross-site request from {origin} refused")
        kind = headers.get("content-type", "").split(";")[0].strip().lower()
        if headers.get("content-length", "0") != "0" and kind != "application/json":
            return error(415, "a request body must be JSON (Content-Type: application/json)")
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refused = self._refusal(scope["method"], headers)
        if refused is not None:
            await refused(scope, receive, send)
            return
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
    hosts: Collection[str] | None = None,
) -> Starlette:
    """The whole HTTP app: health, memcore's routes, Mem0's, and ``extra`` (the MCP endpoint).
    ``hosts``: the names the Host header may carry (see Guard)."""

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
        middleware=[Middleware(Guard, token=token, scoped=scoped or {}, hosts=hosts)],
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
