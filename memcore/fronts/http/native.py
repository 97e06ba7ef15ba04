"""memcore's own HTTP routes under /api: search, context, status, memories, conversations."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from memcore.core.models import SearchFilters
from memcore.fronts.http.common import (
    SCOPE_KEYS,
    BadRequest,
    Forbidden,
    body_of,
    bound,
    handle,
    owned,
    typed,
    vector_of,
    within,
)
from memcore.fronts.http.strength import strength_routes
from memcore.search.filters import read_filters
from memcore.search.searcher import MAX_LIMIT
from memcore.service import MemoryService

READ_FIELDS = {
    "query", "limit", "user_id", "agent_id", "run_id", "include_shared", "scope_only",
    "include_turns", "category", "filters", "tag", "path", "since", "until",
}  # fmt: skip


def limit_of(data: Mapping[str, Any], default: int) -> int:
    limit = int(typed(data, "limit", int, default))
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest(f"limit must be 1-{MAX_LIMIT}")
    return limit


def native_routes(service: MemoryService) -> list[Route]:  # noqa: C901 - a route table
    """memcore's own API: search, context, status and the memory operations."""
    m = service.memories

    def scope_of(request: Request, data: Mapping[str, Any]) -> dict[str, Any]:
        return within(request, {k: typed(data, k, str) for k in SCOPE_KEYS})

    def filters_of(request: Request, data: Mapping[str, Any]) -> SearchFilters:
        legacy_scope_only = bool(typed(data, "scope_only", bool, False))  # now the default
        return read_filters(
            **scope_of(request, data),
            include_shared=bool(typed(data, "include_shared", bool, False))
            and not legacy_scope_only,
            include_turns=bool(typed(data, "include_turns", bool, True)),
            category=typed(data, "category", str), metadata=typed(data, "filters", dict),
            tag=typed(data, "tag", str), path=typed(data, "path", str),
            since=typed(data, "since", str), until=typed(data, "until", str),
        )  # fmt: skip

    @handle
    async def search(request: Request) -> Response:
        data = await body_of(request, {*READ_FIELDS, "threshold", "query_vector", "reinforce"})
        if "query" not in data and "query_vector" not in data:
            raise BadRequest("missing field(s): query (or query_vector)")
        result = await service.search(
            typed(data, "query", str, ""), limit_of(data, 5), filters_of(request, data),
            min_score=typed(data, "threshold", (int, float)),
            query_vector=vector_of(typed(data, "query_vector", list)),
        )  # fmt: skip
        if typed(data, "reinforce", bool, False):
            await m.recall.review([h.id for h in result.hits])
        out = result.to_dict()
        for row in out["results"]:  # type: ignore[attr-defined]
            row["memory_id"] = None if row["id"].startswith("note:") else row["id"]
        return JSONResponse(out)

    @handle
    async def context(request: Request) -> Response:
        data = await body_of(request, {*READ_FIELDS, "min_score"}, {"query"})
        block = await service.context(
            typed(data, "query", str), limit_of(data, 3),
            dataclasses.replace(
                filters_of(request, data),
                include_turns=bool(typed(data, "include_turns", bool, False)),
            ),
            min_score=typed(data, "min_score", (int, float)),
        )  # fmt: skip
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
            idempotency_key=request.headers.get("idempotency-key"),
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
        binding = bound(request)
        if binding and binding != {"run_id": session}:
            # a transcript belongs to its session alone: only a token bound to exactly that
            # run reaches it (a user's or an agent's token would reach every session)
            raise Forbidden(f"a token bound to {_named(binding)} cannot reach session {session}")
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


def _named(binding: Mapping[str, str]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(binding.items()))
