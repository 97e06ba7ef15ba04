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
from starlette.responses import Response
from starlette.routing import Route

from memcore.core.models import SCOPE_KEYS, MemoryRecord
from memcore.fronts.http.common import (
    BadRequest,
    contract,
    entities_page,
    handle,
    memories_of,
    parsed,
    query_of,
    reply,
    scope_fields,
)
from memcore.fronts.http.schemas import (
    MEM0_IGNORED,
    DeletedCountOut,
    EntitiesOut,
    Mem0AddBody,
    Mem0BatchBody,
    Mem0DeleteQuery,
    Mem0Feedback,
    Mem0FeedbackOut,
    Mem0HistoryEvent,
    Mem0ListBody,
    Mem0ListQuery,
    Mem0MemoriesOut,
    Mem0MemoryOut,
    Mem0PageOut,
    Mem0PageQuery,
    Mem0SearchBody,
    Mem0UpdateBody,
    MessageOut,
    PingOut,
    message_dicts,
)
from memcore.service import MemoryService

IGNORED = set(MEM0_IGNORED)


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


def split_filters(filters: Any) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """Mem0 filters -> (scope, the rest as a filter memcore evaluates in SQL).

    A scope key with a plain name, at the top or in a top-level AND, is the scope (a scoped
    read: the scope's memories, and its notes); ``"*"`` means any. Everything else: OR, NOT,
    operators (``{"user_id": {"in": [...]}}``), ``created_at`` / ``updated_at`` ranges,
    ``categories`` and metadata keys becomes one filter over the memories
    (storage/filters_sql.py), whose unknown operators are refused by name."""
    if filters is None:
        return {}, None
    if not isinstance(filters, Mapping):
        raise BadRequest("filters must be an object")
    if "AND" in filters and not isinstance(filters["AND"], list):
        raise BadRequest("filters.AND must be a list of objects")
    parts = list(filters["AND"]) if set(filters) == {"AND"} else [filters]
    scope: dict[str, Any] = {}
    rest: list[dict[str, Any]] = []
    for part in parts:
        if not isinstance(part, Mapping):
            raise BadRequest("each AND filter must be an object")
        for key, value in part.items():
            if key in SCOPE_KEYS and isinstance(value, str):
                if scope.get(key, value) != value:
                    raise BadRequest(f"filters name two values of {key}")
                scope[key] = None if value == "*" else value
            elif key in IGNORED and key != "categories":
                continue
            else:
                rest.append({key: value})
    return scope, ({"AND": rest} if rest else None)


def mem0_routes(service: MemoryService) -> list[Route]:  # noqa: C901 - a route table

    @contract(PingOut)
    async def ping(request: Request) -> Response:
        """Mem0's client checks its key here."""
        return reply(PingOut, {"status": "ok", "org_id": "memcore", "project_id": "default",
                               "user_email": None})  # fmt: skip

    @contract(
        Mem0MemoriesOut, body=Mem0AddBody, links={"memory_id": "$response.body#/results/0/id"}
    )
    @handle
    async def add(request: Request) -> Response:
        """Add messages (or a text) as memories of a scope."""
        data = await parsed(request, Mem0AddBody)
        messages: str | list[dict[str, Any]] = (
            [{"role": "user", "content": data.messages}]
            if isinstance(data.messages, str)
            else message_dicts(data.messages)
        )
        # Mem0 infers by default; here only when an LLM is configured
        infer = service.llm is not None if data.infer is None else data.infer
        records = await memories_of(service, request).add(
            messages, metadata=data.metadata, infer=infer, **scope_fields(data),
            idempotency_key=request.headers.get("idempotency-key"),
        )  # fmt: skip
        out = [{**record(r), "event": r.event or "ADD"} for r in records]
        return reply(Mem0MemoriesOut, {"results": out})

    @contract(Mem0PageOut, body=Mem0ListBody, query=Mem0PageQuery)
    @handle
    async def get_all(request: Request) -> Response:
        """A page of a scope's memories."""
        data = await parsed(request, Mem0ListBody)
        q = query_of(request, Mem0PageQuery)
        scope, meta = split_filters(data.filters)
        m = memories_of(service, request)
        page, size = q.page or data.page or 1, q.page_size or data.page_size or 100
        total = await m.count(**scope)
        rows = await m.get_all(**scope, filters=meta, limit=size, offset=(page - 1) * size)
        more = page * size < total
        return reply(Mem0PageOut, {
            "count": total if meta is None else len(rows),
            "next": f"?page={page + 1}&page_size={size}" if more else None,
            "previous": f"?page={page - 1}&page_size={size}" if page > 1 else None,
            "results": [record(r) for r in rows],
        })  # fmt: skip

    @contract(Mem0MemoriesOut, body=Mem0SearchBody)
    @handle
    async def search(request: Request) -> Response:
        """Search a scope's memories; each result has a score from 0 to 1."""
        data = await parsed(request, Mem0SearchBody)
        read, rest = split_read_filters(data.filters)
        given, meta = split_filters(rest)
        for key, value in scope_fields(data).items():
            if value is not None and given.get(key, value) != value:
                raise BadRequest(f"{key} differs between the body and its filters")
            given.setdefault(key, value)
        rows = await memories_of(service, request).search(
            data.query, **given, **read, filters=meta, limit=data.top_k or data.limit or 10,
            threshold=data.threshold,
        )  # fmt: skip
        out: dict[str, Any] = {"results": [record(r) for r in rows]}
        if (pending := service.readiness.warning()) is not None:
            out["warnings"] = [pending]
        return reply(Mem0MemoriesOut, out)

    @contract(Mem0MemoryOut)
    @handle
    async def get_one(request: Request) -> Response:
        """One memory."""
        found = await memories_of(service, request).get(request.path_params["memory_id"])
        return reply(Mem0MemoryOut, record(found))

    @contract(Mem0MemoryOut, body=Mem0UpdateBody)
    @handle
    async def update(request: Request) -> Response:
        """Change a memory's text or metadata."""
        memory_id = request.path_params["memory_id"]
        data = await parsed(request, Mem0UpdateBody)
        if data.text is not None and data.content is not None and data.text != data.content:
            raise BadRequest("give text or content, not two different texts")
        text = data.text if data.text is not None else data.content
        changed = await memories_of(service, request).update(memory_id, text, data.metadata)
        return reply(Mem0MemoryOut, record(changed))

    @contract(MessageOut)
    @handle
    async def delete(request: Request) -> Response:
        """Delete a memory."""
        await memories_of(service, request).delete(request.path_params["memory_id"])
        return reply(MessageOut, {"message": "Memory deleted successfully!"})

    @contract(DeletedCountOut, query=Mem0DeleteQuery)
    @handle
    async def delete_all(request: Request) -> Response:
        """Delete every memory of a scope (a scope is required)."""
        q = query_of(request, Mem0DeleteQuery)
        unknown = set(q.model_extra or {}) - IGNORED
        if unknown:
            raise BadRequest(f"unknown parameter(s): {', '.join(sorted(unknown))}")
        gone = await memories_of(service, request).delete_all(**scope_fields(q))
        return reply(
            DeletedCountOut, {"message": "Memories deleted successfully!", "deleted": gone}
        )

    @contract(Mem0PageOut, query=Mem0ListQuery)
    @handle
    async def list_v1(request: Request) -> Response:
        """Mem0's v1 listing: GET /v1/memories?user_id=..."""
        q = query_of(request, Mem0ListQuery)
        scope, m = scope_fields(q), memories_of(service, request)
        total = await m.count(**scope)
        rows = await m.get_all(**scope, limit=q.limit, offset=(q.page - 1) * q.limit)
        more = q.page * q.limit < total
        return reply(Mem0PageOut, {
            "count": total,
            "next": f"?page={q.page + 1}&limit={q.limit}" if more else None,
            "previous": f"?page={q.page - 1}&limit={q.limit}" if q.page > 1 else None,
            "results": [record(r) for r in rows],
        })  # fmt: skip

    @contract(EntitiesOut)
    @handle
    async def entities(request: Request) -> Response:
        """Every user, agent and run that holds memories (Mem0's users())."""
        return reply(EntitiesOut, entities_page(await memories_of(service, request).entities()))

    @contract(DeletedCountOut)
    @handle
    async def delete_entity(request: Request) -> Response:
        """Delete every memory of one user, agent or run (Mem0's delete_users())."""
        kind, name = request.path_params["kind"], request.path_params["name"]
        gone = await memories_of(service, request).delete_entity(kind, name)
        return reply(DeletedCountOut, {"message": "Entity deleted successfully!", "deleted": gone})

    @contract(Mem0FeedbackOut, body=Mem0Feedback)
    @handle
    async def feedback(request: Request) -> Response:
        """Feedback on a memory: an FSRS review rated by it (see MemoryApi.feedback)."""
        data = await parsed(request, Mem0Feedback)
        rated = await memories_of(service, request).feedback(data.memory_id, data.feedback)
        strength = rated.strength.to_dict() if rated.strength is not None else None
        return reply(Mem0FeedbackOut, {"id": rated.id, "feedback": data.feedback,
                                       "feedback_reason": data.feedback_reason,
                                       "strength": strength})  # fmt: skip

    @contract(list[Mem0HistoryEvent])
    @handle
    async def history(request: Request) -> Response:
        """What happened to a memory."""
        memory_id = request.path_params["memory_id"]
        events = await memories_of(service, request).history(memory_id)
        rows = [{"id": f"{memory_id}:{n}", **e} for n, e in enumerate(events)]
        return reply(list[Mem0HistoryEvent], rows)

    @contract(MessageOut, body=Mem0BatchBody)
    @handle
    async def batch_update(request: Request) -> Response:
        """Change up to 1000 memories."""
        data = await parsed(request, Mem0BatchBody)
        m = memories_of(service, request)
        for item in data.memories:  # all of them the caller's before any changes
            await m.get(item.memory_id, review=False)
        for item in data.memories:
            await m.update(item.memory_id, item.text, item.metadata)
        return reply(MessageOut, {"message": f"Successfully updated {len(data.memories)} memories"})

    @contract(MessageOut, body=Mem0BatchBody)
    @handle
    async def batch_delete(request: Request) -> Response:
        """Delete up to 1000 memories."""
        data = await parsed(request, Mem0BatchBody)
        m = memories_of(service, request)
        for item in data.memories:  # all of them the caller's before any goes
            await m.get(item.memory_id, review=False)
        for item in data.memories:
            await m.delete(item.memory_id)
        return reply(MessageOut, {"message": f"Successfully deleted {len(data.memories)} memories"})

    one = [("GET", get_one), ("PUT", update), ("DELETE", delete)]
    return [
        Route("/v1/ping/", ping, methods=["GET"]),
        Route("/v3/memories/add/", add, methods=["POST"]),
        Route("/v3/memories/", get_all, methods=["POST"]),
        Route("/v3/memories/search/", search, methods=["POST"]),
        Route("/v1/memories/{memory_id}/history/", history, methods=["GET"]),
        Route("/v1/batch/", batch_update, methods=["PUT"]),
        Route("/v1/batch/", batch_delete, methods=["DELETE"]),
        Route("/v1/entities/", entities, methods=["GET"]),
        Route("/v2/entities/{kind}/{name:path}/", delete_entity, methods=["DELETE"]),
        Route("/v1/entities/{kind}/{name:path}/", delete_entity, methods=["DELETE"]),  # deleteUser
        Route("/v1/feedback/", feedback, methods=["POST"]),
        # Mem0's v1 REST, with and without the trailing slash (seed 000's adapter omits it)
        *(
            Route(path, handler, methods=[method], name=f"{handler.__name__}{slash}")
            for slash in ("/", "")
            for path, method, handler in [
                (f"/v1/memories{slash}", "POST", add),
                (f"/v1/memories/search{slash}", "POST", search),
                (f"/v1/memories{slash}", "GET", list_v1),
                (f"/v1/memories{slash}", "DELETE", delete_all),
                *((f"/v1/memories/{{memory_id}}{slash}", verb, fn) for verb, fn in one),
            ]
        ),
    ]
