"""HTTP routes for memory strength: reinforce a memory, forget the weak ones, restore one."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from memcore.fronts.http.common import SCOPE_KEYS, BadRequest, body_of, handle, owned, typed, within
from memcore.service import MemoryService


def strength_routes(service: MemoryService) -> list[Route]:
    """POST /api/memories/{id}/reinforce, POST /api/memories/forget, POST .../{id}/restore."""
    m = service.memories

    @handle
    async def reinforce(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        owned(request, await m.get(memory_id, review=False))
        (record,) = await m.reinforce(memory_id)
        return JSONResponse(record.to_dict())

    @handle
    async def forget(request: Request) -> Response:
        data = await body_of(
            request, {"threshold", "dry_run", "category", *SCOPE_KEYS}, {"threshold"}
        )
        threshold = typed(data, "threshold", (int, float))
        if not 0 < threshold < 1:
            raise BadRequest("threshold must be between 0 and 1")
        scope = within(request, {k: typed(data, k, str) for k in SCOPE_KEYS})
        weak = await m.forget_below(
            float(threshold),
            category=typed(data, "category", str),
            dry_run=bool(typed(data, "dry_run", bool, False)),
            **scope,
        )
        return JSONResponse({"results": [r.to_dict() for r in weak]})

    @handle
    async def restore(request: Request) -> Response:
        memory_id = request.path_params["memory_id"]
        owned(request, await m.archive.peek(memory_id))
        return JSONResponse((await m.restore(memory_id)).to_dict())

    return [
        Route("/api/memories/forget", forget, methods=["POST"]),
        Route("/api/memories/{memory_id}/reinforce", reinforce, methods=["POST"]),
        Route("/api/memories/{memory_id}/restore", restore, methods=["POST"]),
    ]
