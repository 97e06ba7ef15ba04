"""The web page at / (Jinja2, rendered on the server; works without JavaScript, which only
sends edits through the same JSON API): search with scope pickers and why each result
ranked, a memory's page (history, strength over time, edit / forget / restore), browse
(users, agents, runs, categories, a session's transcript) and status."""

from __future__ import annotations

import datetime as dt
import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup, escape
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from memcore.core.errors import Forbidden, InputError, MemcoreError, NotFound, NotSupported
from memcore.core.models import MemoryRecord, ScopeIds, scope_ids
from memcore.core.version import __version__
from memcore.fronts.daemon_state import daemon_status
from memcore.fronts.http.common import caller_of, memories_of
from memcore.memory.access import bind_scope
from memcore.memory.operations import MemoryApi
from memcore.search.filters import read_filters
from memcore.service import MemoryService

WEB = Path(__file__).resolve().parent.parent / "web"
SCOPE_PARAMS = {"user": "user_id", "agent": "agent_id", "run": "run_id", "app": "app_id"}
PLOT_W, PLOT_H = 600, 160


def _highlight(text: str, query: str) -> Markup:
    """``text`` escaped, with the query's words marked."""
    words = sorted({w for w in re.findall(r"\w+", query.lower()) if len(w) > 1}, key=len)
    safe = str(escape(text))
    if not words:
        return Markup(safe)
    pattern = re.compile("|".join(re.escape(w) for w in reversed(words)), re.IGNORECASE)
    return Markup(pattern.sub(lambda m: f"<mark>{m.group(0)}</mark>", safe))


def _plot(curve: Sequence[tuple[dt.datetime, float]], threshold: float) -> dict[str, Any]:
    """An SVG polyline of retrievability over time, the archive threshold and today."""
    if not curve:
        return {}
    start, end = curve[0][0], curve[-1][0]
    span = max((end - start).total_seconds(), 1.0)

    def x(at: dt.datetime) -> float:
        return round((at - start).total_seconds() / span * PLOT_W, 1)

    def y(value: float) -> float:
        return round((1 - value) * (PLOT_H - 10) + 5, 1)

    now = dt.datetime.now(dt.UTC)
    return {
        "points": " ".join(f"{x(at)},{y(r)}" for at, r in curve),
        "threshold": y(threshold) if threshold > 0 else None,
        "now": x(min(max(now, start), end)),
        "width": PLOT_W, "height": PLOT_H,
        "start": start.date().isoformat(), "end": end.date().isoformat(),
        "lowest": min(r for _, r in curve),
    }  # fmt: skip


def web_routes(service: MemoryService) -> list[Route | Mount]:  # noqa: C901 - a route table
    env = Environment(
        loader=FileSystemLoader(WEB / "templates"),
        autoescape=select_autoescape(),
        enable_async=True,
    )
    env.filters["highlight"] = _highlight
    env.filters["json"] = lambda value: json.dumps(value, ensure_ascii=False, indent=2)
    kind = service.memories.kind

    async def page(request: Request, name: str, status: int = 200, **values: Any) -> Response:
        template = env.get_template(name)
        html = await template.render_async(
            request=request, version=__version__, memory_kind=kind, **values
        )
        return HTMLResponse(html, status_code=status)

    def scope_of(request: Request) -> ScopeIds:
        q = request.query_params
        return scope_ids({v: q.get(k) or None for k, v in SCOPE_PARAMS.items()})

    async def refused(request: Request, exc: Forbidden) -> Response:
        return await page(request, "missing.html", 403, memory_id=None, reason=str(exc))

    async def search(request: Request) -> Response:
        q = request.query_params
        fields = ("q", "user", "agent", "run", "app", "category", "tag", "path")
        form = {k: q.get(k, "") for k in fields}
        hits, warnings, error = [], [], None
        if q.get("q") or q.get("tag"):
            try:
                limit = int(q.get("limit") or 10)
                scope = scope_of(request)
                filters = read_filters(
                    **scope, category=q.get("category") or None, tag=q.get("tag") or None,
                    path=q.get("path") or None,
                )  # fmt: skip
                result = await service.search(
                    q.get("q", ""), limit, filters, caller=caller_of(request)
                )
                hits, warnings = list(result.hits), list(result.warnings)
            except Forbidden as exc:
                return await refused(request, exc)
            except (MemcoreError, ValueError) as exc:
                error = str(exc)
        return await page(request, "search.html", 400 if error else 200, form=form,
                          hits=hits, warnings=warnings, error=error)  # fmt: skip

    async def memory(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        m = memories_of(service, request)
        record: MemoryRecord | None = None
        archived = False
        try:
            record = await m.get(memory_id, review=False)
        except NotFound:
            try:
                record, archived = await m.archived(memory_id), True
            except (NotFound, NotSupported):
                record = None
        try:
            history = await m.history(memory_id)
        except (NotFound, NotSupported):
            history = []
        if record is None and not history:
            return await page(request, "missing.html", 404, memory_id=memory_id)
        plot: dict[str, Any] = {}
        if record is not None and isinstance(service.memories, MemoryApi) and not archived:
            curve = await service.recall.curve(record)
            plot = _plot(curve, service.settings.strength.forget_below)
        return await page(request, "memory.html", memory_id=memory_id, record=record,
                          archived=archived, history=history, plot=plot)  # fmt: skip

    async def browse(request: Request) -> Response:
        caller = caller_of(request)
        entities = await service.memories_for(caller).entities()
        raw = service.memories
        categories = (
            await raw.categories(**bind_scope(caller, {})) if isinstance(raw, MemoryApi) else {}
        )
        return await page(request, "browse.html", entities=entities, categories=categories)

    async def conversation(request: Request) -> Response:
        session = request.path_params["session_id"]
        try:
            messages = await service.conversations_for(caller_of(request)).load(session)
        except (Forbidden, NotFound, InputError):
            return await page(request, "missing.html", 404, memory_id=f"session {session}")
        return await page(request, "conversation.html", session=session, messages=messages)

    async def status(request: Request) -> Response:
        document = await service.status_document()
        daemon = daemon_status(service.settings)
        return await page(request, "status.html", index=document, daemon=daemon,
                          ready=service.readiness)  # fmt: skip

    async def login(request: Request) -> Response:
        return await page(request, "login.html")

    return [
        Route("/", search, methods=["GET"]),
        Route("/memories/{memory_id}", memory, methods=["GET"]),
        Route("/browse", browse, methods=["GET"]),
        Route("/conversations/{session_id:path}", conversation, methods=["GET"]),
        Route("/status", status, methods=["GET"]),
        Route("/login", login, methods=["GET"]),
        Mount("/static", StaticFiles(directory=WEB / "static"), name="static"),
    ]
