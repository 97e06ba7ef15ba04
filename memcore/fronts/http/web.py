"""The web page at / (Jinja2, rendered on the server; every page and form works without
JavaScript): search with scope pickers and why each result ranked, lists of a scope's
memories (paged, sorted, filtered, bulk forget / export), a memory's page (its Markdown
rendered, history, a strength plot with axes, edit / forget / restore as POST forms), a note
opened at its line, browse, a session's transcript, status, and a login form."""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from memcore.core.channel import VIA
from memcore.core.errors import Forbidden, InputError, MemcoreError, NotFound, NotSupported
from memcore.core.models import MemoryRecord, ScopeIds, SearchFilters, scope_ids
from memcore.core.version import __version__
from memcore.fronts.daemon_state import daemon_status
from memcore.fronts.http.common import caller_of, memories_of
from memcore.fronts.http.session import (
    Sessions,
    clear_cookie,
    form_fields,
    safe_next,
    session_of,
    set_cookie,
)
from memcore.memory.access import bind_scope
from memcore.memory.operations import MemoryApi
from memcore.search.filters import read_filters
from memcore.search.searcher import MAX_LIMIT
from memcore.service import MemoryService
from memcore.storage.filters_sql import folder_patterns, like_matches
from memcore.vault.render import render_markdown

WEB = Path(__file__).resolve().parent.parent / "web"
SCOPE_PARAMS = {"user": "user_id", "agent": "agent_id", "run": "run_id", "app": "app_id"}
PLOT_W, PLOT_H = 640, 220
PAD_L, PAD_R, PAD_T, PAD_B = 48, 16, 12, 40  # room for the axes' labels
PAGE_SIZES = (25, 50, 100, 200)
SORTS = {"newest": "newest first", "oldest": "oldest first", "strongest": "strongest first",
         "weakest": "weakest first"}  # fmt: skip
STRENGTH_SORT_MAX = 10_000  # a sort by strength reads this many of the list at most


class BadPage(Exception):
    """A request the page cannot answer: a 400 page saying why, in words."""


def explain(hit: Any, best_keywords: float, weights: tuple[float, float]) -> dict[str, Any]:
    """Why a hit ranked, on one 0-1 scale: meaning (the cosine of the query's and the text's
    vectors), keywords (its BM25 as a share of the best match here), and their weights."""
    keywords = None
    if hit.keyword_score is not None and best_keywords > 0:
        keywords = hit.keyword_score / best_keywords
    return {"score": hit.score, "meaning": hit.vector_score, "keywords": keywords,
            "raw_keywords": hit.keyword_score, "weights": weights}  # fmt: skip


def _plot(
    curve: Sequence[tuple[dt.datetime, float]], threshold: float, tier: str
) -> dict[str, Any]:
    """An SVG of retrievability over time with its axes (days from the memory's birth,
    retrievability 0-1), the archive threshold and today, and a sentence when it does not
    decay."""
    if not curve:
        return {}
    now = dt.datetime.now(dt.UTC)
    start, end = curve[0][0], curve[-1][0]
    span = max((end - start).total_seconds(), 1.0)
    left = start - dt.timedelta(seconds=span * 0.04)  # today on the birth day stays visible
    span = (end - left).total_seconds()
    inner_w, inner_h = PLOT_W - PAD_L - PAD_R, PLOT_H - PAD_T - PAD_B

    def x(at: dt.datetime) -> float:
        return round(PAD_L + (at - left).total_seconds() / span * inner_w, 1)

    def y(value: float) -> float:
        return round(PAD_T + (1 - value) * inner_h, 1)

    days = max(round((end - start).total_seconds() / 86400), 1)
    ticks = [(x(start + dt.timedelta(days=d)), f"{d}") for d in range(0, days + 1, 15)]
    flat = min(r for _, r in curve) >= 0.999
    why = None
    if tier == "core":
        why = ("It does not decay: memories in MEMORY.md, in the core category or pinned "
               "keep full strength.")  # fmt: skip
    elif flat:
        why = "It has not decayed in this window."
    return {
        "points": " ".join(f"{x(at)},{y(r)}" for at, r in curve),
        "threshold": y(threshold) if threshold > 0 else None,
        "threshold_value": threshold,
        "now": x(min(max(now, start), end)),
        "width": PLOT_W, "height": PLOT_H, "left": PAD_L, "right": PLOT_W - PAD_R,
        "top": PAD_T, "bottom": PLOT_H - PAD_B,
        "y_ticks": [(y(v), f"{v:.1f}") for v in (0.0, 0.5, 1.0)],
        "x_ticks": ticks,
        "start": start.date().isoformat(), "end": end.date().isoformat(),
        "lowest": min(r for _, r in curve), "why": why,
    }  # fmt: skip


def _int(raw: str | None, name: str, default: int, low: int, high: int) -> int:
    if raw in (None, ""):
        return default
    try:
        value = int(raw)
    except ValueError:
        raise BadPage(f"{name} must be a whole number from {low} to {high}, not {raw!r}") from None
    if not low <= value <= high:
        raise BadPage(f"{name} must be a whole number from {low} to {high}, not {value}")
    return value


def _day(raw: str | None, name: str) -> str | None:
    if not raw:
        return None
    try:
        return dt.date.fromisoformat(raw).isoformat()
    except ValueError:
        raise BadPage(f"{name} must be a date like 2024-05-31, not {raw!r}") from None


def _note_allowed(path: str, binding: Mapping[str, str]) -> bool:
    """Whether a caller bound to a scope may open a note: one in its scope's folders."""
    if not binding:
        return True
    patterns = folder_patterns(SearchFilters(**binding))  # type: ignore[arg-type]
    return any(like_matches(like, path) for like in patterns)


def _front_matter_lines(text: str) -> int:
    """How many lines a file's YAML front matter takes (0 without one)."""
    if not text.startswith("---\n"):
        return 0
    end = text.find("\n---\n", 4)
    return 0 if end < 0 else text.count("\n", 0, end + 5)


def web_routes(service: MemoryService, sessions: Sessions | None = None) -> list[Route | Mount]:  # noqa: C901
    sessions = sessions or Sessions(())
    env = Environment(
        loader=FileSystemLoader(WEB / "templates"),
        autoescape=select_autoescape(),
        enable_async=True,
    )
    env.filters["markdown"] = lambda text, query="": Markup(render_markdown(text, query))
    env.filters["json"] = lambda value: json.dumps(value, ensure_ascii=False, indent=2)
    kind = service.memories.kind
    s = service.settings.search
    weights = (s.vector_weight, s.keyword_weight)

    def port_of(request: Request) -> int | None:
        return (request.scope.get("server") or (None, None))[1]

    def sid_of(request: Request) -> str | None:
        return session_of(request.headers, port_of(request))  # headers: any case

    async def page(request: Request, name: str, status: int = 200, **values: Any) -> Response:
        template = env.get_template(name)
        sid = sid_of(request)
        html = await template.render_async(
            request=request, version=__version__, memory_kind=kind, csrf=sessions.csrf(sid),
            logged_in=sid is not None, needs_login=sessions.needed, **values,
        )  # fmt: skip
        return HTMLResponse(html, status_code=status)

    async def bad_page(request: Request, message: str, status: int = 400) -> Response:
        return await page(request, "missing.html", status, memory_id=None, reason=message,
                          title="Bad request" if status == 400 else "Not allowed")  # fmt: skip

    async def form_of(request: Request) -> dict[str, list[str]]:
        """The posted form, its CSRF token checked (Forbidden otherwise)."""
        fields = form_fields(await request.body())
        given = fields.get("csrf") or [""]
        if not sessions.csrf_ok(sid_of(request), given[0]):
            raise Forbidden("this form is stale or from another site: reload the page and retry")
        return fields

    def scope_of(request: Request) -> ScopeIds:
        q = request.query_params
        return scope_ids({v: q.get(k) or None for k, v in SCOPE_PARAMS.items()})

    async def search(request: Request) -> Response:
        q = request.query_params
        fields = ("q", "user", "agent", "run", "app", "category", "tag", "path", "since",
                  "until", "turns", "limit")  # fmt: skip
        form = {k: q.get(k, "") for k in fields}
        hits: list[Any] = []
        warnings: list[str] = []
        why: list[dict[str, Any]] = []
        mode = "hybrid"
        try:
            limit = _int(q.get("limit"), "limit", 10, 1, MAX_LIMIT)
            since, until = _day(q.get("since"), "since"), _day(q.get("until"), "until")
            if q.get("q") or q.get("tag"):
                filters = read_filters(
                    **scope_of(request), category=q.get("category") or None,
                    tag=q.get("tag") or None, path=q.get("path") or None, since=since,
                    until=until, include_turns=q.get("turns") == "on",
                )  # fmt: skip
                result = await service.search(
                    q.get("q", ""), limit, filters, caller=caller_of(request)
                )
                hits, warnings, mode = list(result.hits), list(result.warnings), result.mode
                best = max((h.keyword_score or 0.0 for h in hits), default=0.0)
                why = [explain(h, best, weights) for h in hits]
        except Forbidden as exc:
            return await bad_page(request, str(exc), 403)
        except (MemcoreError, BadPage) as exc:
            return await page(request, "search.html", 400, form=form, hits=[], why=[],
                              warnings=[], error=str(exc))  # fmt: skip
        return await page(request, "search.html", form=form, hits=hits, why=why,
                          warnings=warnings, mode=mode, error=None)  # fmt: skip

    async def listing(request: Request) -> Response:
        """A scope's memories: paged, sorted, filtered by text, dates, tag and category."""
        q = request.query_params
        form = {k: q.get(k, "") for k in (*SCOPE_PARAMS, "category", "q", "tag", "since",
                                          "until", "sort", "size", "page")}  # fmt: skip
        try:
            size = _int(q.get("size"), "size", 50, 1, max(PAGE_SIZES))
            number = _int(q.get("page"), "page", 1, 1, 1_000_000)
            sort = q.get("sort") or "newest"
            if sort not in SORTS:
                raise BadPage(f"sort must be one of {', '.join(SORTS)}, not {sort!r}")
            since, until = _day(q.get("since"), "since"), _day(q.get("until"), "until")
            conds: list[dict[str, Any]] = []
            if q.get("q"):
                conds.append({"keywords": {"icontains": q["q"]}})
            if since:
                conds.append({"created_at": {"gte": since}})
            if until:
                conds.append({"created_at": {"lte": until}})
            filters = {"AND": conds} if conds else None
            m = memories_of(service, request)
            scope = scope_of(request)
            what: dict[str, Any] = {"category": q.get("category") or None, "filters": filters}
            tag = q.get("tag") or None
            total = (
                await m.count(**scope, **what)
                if tag is None
                else len(await m.get_all(**scope, **what, tag=tag, limit=STRENGTH_SORT_MAX))
            )
            rows = await _page_of(m, scope, what, tag, sort, number, size, total)
        except Forbidden as exc:
            return await bad_page(request, str(exc), 403)
        except (MemcoreError, BadPage) as exc:
            return await page(request, "list.html", 400, form=form, rows=[], total=0,
                              pages=0, error=str(exc), sorts=SORTS, sizes=PAGE_SIZES,
                              query="")  # fmt: skip
        pages = max((total + size - 1) // size, 1)
        keep = {k: v for k, v in form.items() if v and k != "page"}
        return await page(request, "list.html", form=form, rows=rows, total=total, pages=pages,
                          page_no=number, error=None, sorts=SORTS, sizes=PAGE_SIZES,
                          query=keep, capped=sort in ("strongest", "weakest")
                          and total > STRENGTH_SORT_MAX)  # fmt: skip

    async def list_act(request: Request) -> Response:
        """Bulk forget or export of the memories ticked in a list (forget asks first)."""
        fields = await form_of(request)
        ids = [i for i in fields.get("id", []) if i]
        action = (fields.get("action") or [""])[0]
        back = safe_next((fields.get("back") or ["/list"])[0])
        if not ids:
            return await bad_page(request, "no memory was selected")
        m = memories_of(service, request)
        records = [await m.get(i, review=False) for i in ids]  # each the caller's, or 404
        if action == "export":
            lines = "".join(json.dumps(r.to_dict(), ensure_ascii=False) + "\n" for r in records)
            return Response(lines, media_type="application/x-ndjson", headers={
                "Content-Disposition": 'attachment; filename="memories.jsonl"'})  # fmt: skip
        if action != "forget":
            return await bad_page(request, f"unknown action {action!r}: forget or export")
        if (fields.get("confirm") or [""])[0] != "yes":
            return await page(request, "confirm.html", records=records, back=back)
        VIA.set("web")
        for r in records:
            await m.delete(r.id)
        return RedirectResponse(f"{back}{'&' if '?' in back else '?'}forgot={len(records)}",
                                status_code=303)  # fmt: skip

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
            tier = record.strength.tier if record.strength else "decaying"
            plot = _plot(curve, service.settings.strength.forget_below, tier)
        said = request.query_params.get("done")
        return await page(request, "memory.html", memory_id=memory_id, record=record,
                          archived=archived, history=history, plot=plot, done=said,
                          error=None)  # fmt: skip

    async def change(request: Request) -> Response:
        """Edit, forget or restore a memory from its page's forms."""
        memory_id = request.path_params["memory_id"]
        action = request.url.path.rsplit("/", 1)[-1]
        fields = await form_of(request)
        m = memories_of(service, request)
        VIA.set("web")
        try:
            if action == "edit":
                content = (fields.get("content") or [""])[0].replace("\r\n", "\n")
                await m.update(memory_id, content)
            elif action == "forget":
                await m.delete(memory_id)
            else:
                await m.restore(memory_id)
        except (MemcoreError, ValueError) as exc:
            status = 404 if isinstance(exc, NotFound) else 403 if isinstance(exc, Forbidden) else (
                409 if "immutable" in str(exc) else 400
            )  # fmt: skip
            return await bad_page(request, str(exc), status)
        done = {"edit": "saved", "forget": "forgotten", "restore": "restored"}[action]
        return RedirectResponse(f"/memories/{memory_id}?done={done}", status_code=303)

    async def note(request: Request) -> Response:
        """A note of the vault, rendered, opened at a line (``?line=``)."""
        rel = request.path_params["path"]
        vault = service.settings.vault.resolve()
        target = (vault / rel).resolve()
        binding = caller_of(request).bound or {}
        if (
            not target.is_relative_to(vault) or target.suffix.lower() != ".md"
            or any(p.startswith(".") for p in target.relative_to(vault).parts)
            or not target.is_file() or not _note_allowed(rel, binding)
        ):  # fmt: skip
            return await page(request, "missing.html", 404, memory_id=f"note {rel}")
        try:
            line = _int(request.query_params.get("line"), "line", 0, 0, 10_000_000) or None
        except BadPage as exc:
            return await bad_page(request, str(exc))
        text = target.read_text(encoding="utf-8", errors="replace")
        skip = _front_matter_lines(text)
        body = "\n".join(text.split("\n")[skip:])
        html = Markup(render_markdown(body, request.query_params.get("q", ""), line, skip))
        return await page(request, "note.html", path=rel, html=html, line=line)

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
        target = safe_next(request.query_params.get("next"))
        return await page(request, "login.html", next=target, wrong=False)

    async def login_post(request: Request) -> Response:
        fields = form_fields(await request.body())
        target = safe_next((fields.get("next") or ["/"])[0])
        token = (fields.get("token") or [""])[0]
        if not sessions.needed:
            return RedirectResponse(target, status_code=303)
        if not sessions.valid(token):
            return await page(request, "login.html", 401, next=target, wrong=True)
        sessions.drop(sid_of(request))
        sid = sessions.issue(token)
        answer = RedirectResponse(target, status_code=303)
        answer.headers["Set-Cookie"] = set_cookie(port_of(request), sid)
        return answer

    async def logout(request: Request) -> Response:
        await form_of(request)
        sessions.drop(sid_of(request))
        answer = RedirectResponse("/login", status_code=303)
        answer.headers["Set-Cookie"] = clear_cookie(port_of(request))
        return answer

    async def favicon(request: Request) -> Response:
        return Response((WEB / "static" / "favicon.svg").read_bytes(), media_type="image/svg+xml",
                        headers={"Cache-Control": "max-age=86400"})  # fmt: skip

    async def forbidden(request: Request, exc: Exception) -> Response:
        return await bad_page(request, str(exc), 403)

    def guarded(fn: Any) -> Any:
        async def run(request: Request) -> Response:
            try:
                answer: Response = await fn(request)
                return answer
            except Forbidden as exc:
                return await forbidden(request, exc)
            except NotFound as exc:
                return await page(request, "missing.html", 404, memory_id=None, reason=str(exc))

        return run

    return [
        Route("/", search, methods=["GET"]),
        Route("/list", listing, methods=["GET"]),
        Route("/list/act", guarded(list_act), methods=["POST"]),
        Route("/memories/{memory_id}", memory, methods=["GET"]),
        Route("/memories/{memory_id}/edit", guarded(change), methods=["POST"]),
        Route("/memories/{memory_id}/forget", guarded(change), methods=["POST"]),
        Route("/memories/{memory_id}/restore", guarded(change), methods=["POST"]),
        Route("/notes/{path:path}", note, methods=["GET"]),
        Route("/browse", browse, methods=["GET"]),
        Route("/conversations/{session_id:path}", conversation, methods=["GET"]),
        Route("/status", status, methods=["GET"]),
        Route("/login", login, methods=["GET"]),
        Route("/login", login_post, methods=["POST"], name="login_post"),
        Route("/logout", guarded(logout), methods=["POST"]),
        Route("/favicon.ico", favicon, methods=["GET"]),
        Mount("/static", StaticFiles(directory=WEB / "static"), name="static"),
    ]


async def _page_of(
    m: Any,
    scope: ScopeIds,
    what: dict[str, Any],
    tag: str | None,
    sort: str,
    number: int,
    size: int,
    total: int,
) -> list[MemoryRecord]:
    """One page of a list in the asked order (memories are stored oldest first)."""
    if sort in ("strongest", "weakest"):
        every = await m.get_all(**scope, **what, tag=tag, limit=STRENGTH_SORT_MAX)
        every.sort(key=lambda r: r.strength.retrievability if r.strength else 1.0,
                   reverse=sort == "strongest")  # fmt: skip
        return list(every[(number - 1) * size : number * size])
    if sort == "oldest":
        return list(await m.get_all(**scope, **what, tag=tag, limit=size,
                                    offset=(number - 1) * size))  # fmt: skip
    end = total - (number - 1) * size
    if end <= 0:
        return []
    start = max(end - size, 0)
    rows = await m.get_all(**scope, **what, tag=tag, limit=end - start, offset=start)
    return list(reversed(rows))
