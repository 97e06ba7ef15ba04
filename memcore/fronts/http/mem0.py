"""Mem0's REST API on memcore: the routes the official ``mem0ai`` MemoryClient calls
(``MemoryClient(api_key=token, host="http://127.0.0.1:8765")``).

Mem0's filters (``{"user_id": "alice"}``, ``{"AND": [{"user_id": ...}, {"agent_id": ...}]}``)
become memcore's scope; memcore's own read filters (``category``, ``tag``, ``path``, ``since``,
``until``, ``include_shared``, ``include_turns``) are read from there too, the same as on every
other front; any other key is a metadata filter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from memcore.core.models import MemoryRecord
from memcore.fronts.http.common import BadRequest, body_of, bound, handle, owned, typed, within
from memcore.service import MemoryService

SCOPE_KEYS = ("user_id", "agent_id", "run_id")
# Mem0 fields memcore accepts and has no use for (they change nothing here)
IGNORED = {"async_mode", "version", "output_format", "org_id", "project_id", "app_id",
           "includes", "excludes", "custom_categories", "immutable", "timestamp",
           "expiration_date", "enable_graph", "rerank", "keyword_search", "fields",
           "filter_memories", "latest_only", "categories"}  # fmt: skip


def record(r: MemoryRecord) -> dict[str, Any]:
    out = r.to_dict()
    out["categories"] = [r.category]
    return out


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


def split_filters(filters: Any) -> tuple[dict[str, str | None], dict[str, Any] | None]:
    """Mem0 filters -> (scope, memcore metadata filter)."""
    if filters is None:
        return {}, None
    if not isinstance(filters, Mapping):
        raise BadRequest("filters must be an object")
    parts = list(filters["AND"]) if set(filters) == {"AND"} else [filters]
    scope: dict[str, str | None] = {}
    meta: list[dict[str, Any]] = []
    for part in parts:
        if not isinstance(part, Mapping):
            raise BadRequest("each AND filter must be an object")
        for key, value in part.items():
            if key in SCOPE_KEYS:
                if not isinstance(value, str):
                    raise BadRequest(f"{key} must be a string")
                scope[key] = None if value == "*" else value
            elif key == "metadata" and isinstance(value, Mapping):
                meta += [{k: v} for k, v in value.items()]
            elif key in IGNORED:
                continue
            else:
                meta.append({key: value})
    return scope, ({"AND": meta} if meta else None)


def mem0_routes(service: MemoryService) -> list[Route]:  # noqa: C901 - a route table
    m = service.memories

    async def ping(request: Request) -> Response:
        return JSONResponse({"status": "ok", "org_id": "memcore", "project_id": "default",
                             "user_email": None})  # fmt: skip

    @handle
    async def add(request: Request) -> Response:
        data = await body_of(
            request, {"messages", "metadata", "infer", *SCOPE_KEYS, *IGNORED}, {"messages"}
        )
        messages = data["messages"]
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        if not isinstance(messages, list):
            raise BadRequest("messages must be a list of {role, content}")
        # Mem0 infers by default; here only when an LLM is configured
        infer = typed(data, "infer", bool, service.llm is not None)
        records = await m.add(
            messages, metadata=typed(data, "metadata", dict), infer=infer,
            **within(request, {k: typed(data, k, str) for k in SCOPE_KEYS}),
            idempotency_key=request.headers.get("idempotency-key"),
        )  # fmt: skip
        out = [{**record(r), "event": r.event or "ADD"} for r in records]
        return JSONResponse({"results": out})

    @handle
    async def get_all(request: Request) -> Response:
        data = await body_of(request, {"filters", "page", "page_size", *IGNORED})
        given, meta = split_filters(data.get("filters"))
        scope = within(request, given)
        try:
            page = int(request.query_params.get("page", data.get("page", 1)))
            size = int(request.query_params.get("page_size", data.get("page_size", 100)))
        except (TypeError, ValueError):
            raise BadRequest("page and page_size must be numbers") from None
        if page < 1 or not 1 <= size <= 10_000:
            raise BadRequest("page must be >= 1 and page_size 1-10000")
        total = await m.count(**scope)
        rows = await m.get_all(**scope, filters=meta, limit=size, offset=(page - 1) * size)
        more = page * size < total
        return JSONResponse({"count": total if meta is None else len(rows),
                             "next": f"?page={page + 1}&page_size={size}" if more else None,
                             "previous": f"?page={page - 1}&page_size={size}" if page > 1 else None,
                             "results": [record(r) for r in rows]})  # fmt: skip

    @handle
    async def search(request: Request) -> Response:
        data = await body_of(
            request, {"query", "filters", "top_k", "limit", "threshold", *IGNORED}, {"query"}
        )
        read, rest = split_read_filters(data.get("filters"))
        given, meta = split_filters(rest)
        scope = within(request, given)
        limit = typed(data, "top_k", int) or typed(data, "limit", int) or 10
        if not 1 <= limit <= 1000:
            raise BadRequest("top_k must be 1-1000")
        rows = await m.search(
            typed(data, "query", str), **scope, **read, filters=meta, limit=limit,
            threshold=typed(data, "threshold", (int, float)),
        )  # fmt: skip
        return JSONResponse({"results": [record(r) for r in rows]})

    @handle
    async def one(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        found = owned(request, await m.get(memory_id, review=request.method == "GET"))
        if request.method == "GET":
            return JSONResponse(record(found))
        if request.method == "DELETE":
            await m.delete(memory_id)
            return JSONResponse({"message": "Memory deleted successfully!"})
        data = await body_of(request, {"text", "metadata", *IGNORED})
        updated = await m.update(memory_id, typed(data, "text", str), typed(data, "metadata", dict))
        return JSONResponse(record(updated))

    @handle
    async def delete_all(request: Request) -> Response:
        q = request.query_params
        unknown = set(q) - {*SCOPE_KEYS, *IGNORED}
        if unknown:
            raise BadRequest(f"unknown parameter(s): {', '.join(sorted(unknown))}")
        gone = await m.delete_all(**within(request, q))
        return JSONResponse({"message": f"Memories deleted successfully! ({gone})"})

    @handle
    async def history(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        if bound(request):
            owned(request, await m.get(memory_id, review=False))
        events = await m.history(memory_id)
        return JSONResponse([{"id": f"{memory_id}:{n}", **e} for n, e in enumerate(events)])

    @handle
    async def batch(request: Request) -> Response:
        data = await body_of(request, {"memories"}, {"memories"})
        items = typed(data, "memories", list)
        if not items or len(items) > 1000 or not all(isinstance(i, Mapping) for i in items):
            raise BadRequest("memories must be a list of 1-1000 objects")
        for item in items:
            if not isinstance(item.get("memory_id"), str):
                raise BadRequest("each memory needs a memory_id")
            owned(request, await m.get(item["memory_id"], review=False))
        if request.method == "DELETE":
            for item in items:
                await m.delete(item["memory_id"])
            return JSONResponse({"message": f"Successfully deleted {len(items)} memories"})
        for item in items:
            await m.update(item["memory_id"], item.get("text"), item.get("metadata"))
        return JSONResponse({"message": f"Successfully updated {len(items)} memories"})

    return [
        Route("/v1/ping/", ping, methods=["GET"]),
        Route("/v3/memories/add/", add, methods=["POST"]),
        Route("/v1/memories/", add, methods=["POST"]),
        Route("/v3/memories/", get_all, methods=["POST"]),
        Route("/v3/memories/search/", search, methods=["POST"]),
        Route("/v1/memories/", delete_all, methods=["DELETE"]),
        Route("/v1/memories/{memory_id}/", one, methods=["GET", "PUT", "DELETE"]),
        Route("/v1/memories/{memory_id}/history/", history, methods=["GET"]),
        Route("/v1/batch/", batch, methods=["PUT", "DELETE"]),
    ]
