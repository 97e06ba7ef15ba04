"""HTTP routes for memory strength: reinforce a memory, forget the weak ones, restore one."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from memcore.fronts.http.common import (
    contract,
    handle,
    memories_of,
    parsed,
    reply,
    scope_fields,
)
from memcore.fronts.http.schemas import FeedbackBody, ForgetBody, MemoriesOut, MemoryOut
from memcore.service import MemoryService


def strength_routes(service: MemoryService) -> list[Route]:
    """POST /api/memories/{id}/reinforce, .../{id}/feedback, POST /api/memories/forget,
    POST .../{id}/restore."""

    @contract(MemoryOut)
    @handle
    async def reinforce(request: Request) -> Response:
        """Count a use of the memory: one FSRS review, it grows stronger."""
        memory_id = request.path_params["memory_id"]
        (record,) = await memories_of(service, request).reinforce(memory_id)
        return reply(MemoryOut, record.to_dict())

    @contract(MemoryOut, body=FeedbackBody)
    @handle
    async def feedback(request: Request) -> Response:
        """Rate a memory: POSITIVE strengthens it, NEGATIVE weakens it, VERY_NEGATIVE (wrong)
        makes it fade."""
        memory_id = request.path_params["memory_id"]
        data = await parsed(request, FeedbackBody)
        rated = await memories_of(service, request).feedback(memory_id, data.feedback)
        return reply(MemoryOut, rated.to_dict())

    @contract(MemoriesOut, body=ForgetBody)
    @handle
    async def forget(request: Request) -> Response:
        """Archive the memories whose retrievability fell below the threshold."""
        data = await parsed(request, ForgetBody)
        weak = await memories_of(service, request).forget_below(
            data.threshold, category=data.category, dry_run=data.dry_run, **scope_fields(data)
        )
        return reply(MemoriesOut, {"results": [r.to_dict() for r in weak]})

    @contract(MemoryOut)
    @handle
    async def restore(request: Request) -> Response:
        """Bring an archived memory back."""
        memory_id = request.path_params["memory_id"]
        return reply(MemoryOut, (await memories_of(service, request).restore(memory_id)).to_dict())

    return [
        Route("/api/memories/forget", forget, methods=["POST"]),
        Route("/api/memories/{memory_id}/reinforce", reinforce, methods=["POST"]),
        Route("/api/memories/{memory_id}/restore", restore, methods=["POST"]),
        Route("/api/memories/{memory_id}/feedback", feedback, methods=["POST"]),
    ]
