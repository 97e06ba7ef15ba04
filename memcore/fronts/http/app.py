"""The HTTP app (Starlette): health, memcore's routes (native.py), Mem0's (mem0.py), the OpenAPI
document and the middleware that checks tokens and body sizes.

Every route calls the one MemoryService the process shares with its watcher. Requests and
answers are typed (schemas.py); errors are one line of JSON (``{"error": {"code", "message"}}``)
with a 4xx/5xx status; bodies are capped; requests need the bearer token when one is set
(always, off loopback: `memcore serve` refuses to start without).
"""

from __future__ import annotations

import hmac
import logging
import re
import urllib.parse
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from pydantic import TypeAdapter
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from memcore.core.channel import VIA, VIAS
from memcore.core.models import Caller
from memcore.core.version import __version__
from memcore.fronts.http.common import (
    BadRequest,
    Contract,
    TooLarge,
    body_limit,
    contract,
    error,
    reply,
)
from memcore.fronts.http.mem0 import mem0_routes
from memcore.fronts.http.native import native_routes
from memcore.fronts.http.observed import Observed, metrics_route
from memcore.fronts.http.schemas import ErrorOut, HealthOut, ReadyOut
from memcore.fronts.http.session import Sessions, session_of
from memcore.service import MemoryService

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")
log = logging.getLogger("memcore.http")
OPEN_PATHS = ("/health", "/ready", "/login", "/favicon.ico")  # answered without the token
WRITES = ("POST", "PUT", "PATCH", "DELETE")
# the web page's forms post form encoding (no JavaScript needed); every other write is JSON
FORM = "application/x-www-form-urlencoded"
FORM_PATHS = re.compile(r"/(login|logout|list/act|memories/[^/]+/(edit|forget|restore))")


def host_name(host_header: str) -> str:
    """The name in a Host header, without its port ("[::1]:8765" -> "[::1]"). A port that is
    not a number leaves the header whole ("127.0.0.1:evil.com" names no host of ours)."""
    if host_header.startswith("["):
        name, _, rest = host_header.partition("]")
        return name + "]" if rest == "" or (rest[:1] == ":" and rest[1:].isdigit()) else host_header
    name, colon, port = host_header.partition(":")
    if not colon:
        return host_header
    return name if port.isdigit() else host_header


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
        sessions: Sessions | None = None,
    ) -> None:
        self.app = app
        self.tokens = {t: Caller.of_token(t, binding) for t, binding in scoped.items()}
        if token is not None:
            self.tokens[token] = Caller.of_token(token)
        self.hosts = None if hosts is None else {h.lower() for h in hosts}
        self.sessions = sessions or Sessions(self.tokens)

    def _refusal(
        self, method: str, headers: Mapping[str, str], path: str = ""
    ) -> JSONResponse | None:
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
        has_body = headers.get("content-length", "0") != "0" or "transfer-encoding" in headers
        if kind == FORM and FORM_PATHS.fullmatch(path) and method == "POST":
            return None  # the web page's own forms, each checked for its CSRF token
        if has_body and kind != "application/json":
            return error(415, "a request body must be JSON (Content-Type: application/json)")
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refused = self._refusal(scope["method"], headers, scope["path"])
        if refused is not None:
            await refused(scope, receive, send)
            return
        if self.tokens and scope["path"] not in OPEN_PATHS and not _static(scope["path"]):
            scheme, _, value = headers.get("authorization", "").partition(" ")
            port = (scope.get("server") or (None, None))[1]
            if not scheme and (held := self.sessions.token_of(session_of(headers, port))):
                scheme, value = "bearer", held  # the web page's session (see session.py)
            caller = next(
                (
                    c for t, c in self.tokens.items()
                    if hmac.compare_digest(value.strip().encode(), t.encode())
                ),
                None,
            ) if scheme.lower() in ("bearer", "token") else None  # fmt: skip
            if caller is None:
                if scope["method"] == "GET" and "text/html" in headers.get("accept", ""):
                    await _to_login(scope, receive, send)  # a person at the web page
                    return
                if scope["method"] == "POST" and FORM_PATHS.fullmatch(scope["path"]):
                    await _to_login(scope, receive, send)  # a form whose session ended
                    return
                await error(401, "missing or wrong token")(scope, receive, send)
                return
            scope.setdefault("state", {})["caller"] = caller
        length = headers.get("content-length")
        limit = body_limit(scope["method"], scope["path"])
        if length is not None and (not length.isdigit() or int(length) > limit):
            await error(413, f"request body over {limit:,} bytes")(scope, receive, send)
            return
        # every request says which front took it: the CLI through the daemon's private socket
        # says so; anything else is the API (the page and MCP say web and agent themselves).
        # Never the context the server was started in (`memcore serve` is a CLI command).
        said = headers.get("memcore-via")
        VIA.set(said if self.hosts is None and said in VIAS else "api")
        try:
            await self.app(scope, _capped(receive, limit), send)
        except ClientDisconnect:  # gone before its body came (closed too slow): no one to answer
            log.debug("%s %s: the client left before its body came", scope["method"], scope["path"])


def _static(path: str) -> bool:
    return path.startswith("/static/")


async def _to_login(scope: Scope, receive: Receive, send: Send) -> None:
    """To the login form, which sends the person back to the page they asked for."""
    asked = scope["path"] + (f"?{scope['query_string'].decode()}" if scope["query_string"] else "")
    if scope["method"] != "GET":
        asked = "/"
    target = "/login" if asked == "/" else f"/login?next={urllib.parse.quote(asked, safe='')}"
    await RedirectResponse(target, status_code=303)(scope, receive, send)


def _capped(receive: Receive, limit: int) -> Receive:
    seen = 0

    async def wrapped() -> Any:
        nonlocal seen
        message = await receive()
        seen += len(message.get("body", b""))
        if seen > limit:
            raise TooLarge(f"request body over {limit:,} bytes")
        return message

    return wrapped


def build_app(
    service: MemoryService,
    token: str | None,
    extra: Sequence[BaseRoute] = (),
    scoped: Mapping[str, Mapping[str, str]] | None = None,
    hosts: Collection[str] | None = None,
    pages: bool = False,
) -> Starlette:
    """The whole HTTP app: health, memcore's routes, Mem0's, and ``extra`` (the MCP endpoint);
    with ``pages``, the web page at /. ``hosts``: the names the Host header may carry (see
    Guard)."""

    @contract(HealthOut)
    async def health(request: Request) -> Response:
        """Liveness: the process answers (whatever the index is doing)."""
        return reply(HealthOut, {"ok": True, "version": __version__})

    @contract(ReadyOut)
    async def ready(request: Request) -> Response:
        """Readiness: 200 once the index has caught up with the vault, 503 until then."""
        r = service.readiness
        return reply(ReadyOut, {"ready": r.ready, **r.to_dict()}, 200 if r.ready else 503)

    routes = [
        Route("/health", health, methods=["GET"]), Route("/ready", ready, methods=["GET"]),
        *native_routes(service), *mem0_routes(service), *extra,
    ]  # fmt: skip
    scraped = metrics_route(service)  # not in the OpenAPI document: text, not JSON
    tokens = [*(scoped or {}), *([token] if token is not None else [])]
    sessions = Sessions(tokens)
    if pages:
        from memcore.fronts.http.web import web_routes  # Jinja2 loads only for the page

        routes += web_routes(service, sessions)
    schema = openapi(routes)

    async def openapi_json(request: Request) -> Response:
        return JSONResponse(schema)

    routes += [Route("/openapi.json", openapi_json, methods=["GET"]), scraped]

    async def not_found(request: Request, exc: Exception) -> Response:
        return error(404, f"no route {request.method} {request.url.path}")

    async def not_allowed(request: Request, exc: Exception) -> Response:
        return error(405, f"{request.url.path} does not take {request.method}")

    async def bad(request: Request, exc: Exception) -> Response:
        return error(413 if isinstance(exc, TooLarge) else 400, str(exc))

    async def crash(request: Request, exc: Exception) -> Response:
        log.error("%s %s failed: %s", request.method, request.url.path, exc, exc_info=exc)
        return error(500, f"internal error: {type(exc).__name__}")

    return Starlette(
        routes=routes,
        middleware=[
            Middleware(Observed, metrics=service.metrics, routes=routes),
            Middleware(Guard, token=token, scoped=scoped or {}, hosts=hosts, sessions=sessions),
        ],
        exception_handlers={404: not_found, 405: not_allowed, BadRequest: bad, Exception: crash},
    )


def openapi(routes: Sequence[BaseRoute]) -> dict[str, Any]:
    """The OpenAPI 3.1 document, generated from each route's contract (schemas.py): its body,
    query parameters and answer, and the one error shape."""
    models: dict[str, Any] = {}

    def ref(kind: Any) -> dict[str, Any]:
        schema = TypeAdapter(kind).json_schema(ref_template="#/components/schemas/{model}")
        models.update(schema.pop("$defs", {}))
        if "title" in schema and schema.get("type") == "object":  # a model: by reference
            models[schema["title"]] = schema
            return {"$ref": f"#/components/schemas/{schema['title']}"}
        return schema

    error_body = {"description": "one-line error",
                  "content": {"application/json": {"schema": ref(ErrorOut)}}}  # fmt: skip
    paths: dict[str, dict[str, Any]] = {}
    for route in routes:
        terms: Contract | None = getattr(getattr(route, "endpoint", None), "contract", None)
        if not isinstance(route, Route) or terms is None:
            continue
        for method in sorted((route.methods or set()) - {"HEAD"}):
            answer = {
                "description": "OK",
                "content": {"application/json": {"schema": ref(terms.out)}},
            }
            op: dict[str, Any] = {
                "operationId": re.sub(r"\W+", "_", f"{method} {template(route)}")
                .strip("_")
                .lower(),
                "summary": terms.summary,
                "responses": {"200": answer, "4XX": error_body, "5XX": error_body},
            }
            if terms.body is not None:
                op["requestBody"] = {
                    "required": True,
                    "content": {"application/json": {"schema": ref(terms.body)}},
                }
            params = [
                {"name": p.strip("{}"), "in": "path", "required": True,
                 "schema": {"type": "string", "minLength": 1}}
                for p in template(route).split("/") if p.startswith("{")
            ]  # fmt: skip
            if terms.query is not None:
                fields = terms.query.model_json_schema()["properties"]
                params += [
                    {"name": name, "in": "query", "required": False, "schema": schema}
                    for name, schema in fields.items()
                ]
            if params:
                op["parameters"] = params
            paths.setdefault(template(route), {})[method.lower()] = op
    _link(paths, routes)
    return {
        "openapi": "3.1.0",
        "info": {"title": "memcore", "version": __version__},
        "components": {
            "schemas": dict(sorted(models.items())),
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"bearer": []}],
        "paths": paths,
    }


def template(route: Route) -> str:
    """A route's path as OpenAPI writes it: ``{name}`` for Starlette's ``{name:path}``."""
    return re.sub(r"\{(\w+):\w+\}", r"{\1}", route.path)


def _link(paths: dict[str, dict[str, Any]], routes: Sequence[BaseRoute]) -> None:
    """OpenAPI links from an answer that holds an id to every operation of the same API
    (memcore's /api, or Mem0's) whose path takes it."""

    def api(path: str) -> str:
        return "native" if path.startswith("/api/") else "mem0"

    for route in routes:
        terms: Contract | None = getattr(getattr(route, "endpoint", None), "contract", None)
        if not isinstance(route, Route) or terms is None or not terms.links:
            continue
        for method in (route.methods or set()) - {"HEAD"}:
            links = {
                op["operationId"]: {"operationId": op["operationId"],
                                    "parameters": {param: source}}
                for param, source in terms.links.items()
                for path, ops in paths.items()
                if f"{{{param}}}" in path and api(path) == api(route.path)
                for op in ops.values()
            }  # fmt: skip
            paths[template(route)][method.lower()]["responses"]["200"]["links"] = links
