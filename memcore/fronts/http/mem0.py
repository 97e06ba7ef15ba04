"""Mem0's REST API on memcore: the routes the official ``mem0ai`` MemoryClient calls
(``MemoryClient(api_key=token, host="http://127.0.0.1:8765")``).

Mem0's filters (``{"user_id": "alice"}``, ``{"AND": [{"user_id": ...}, {"agent_id": ...}]}``)
become memcore's scope; memcore's own read filters (``category``, ``tag``, ``path``, ``since``,
``until``, ``include_shared``, ``include_turns``) are read from there too, the same as on every
other front; any other key is a metadata filter.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from memcore.core.models import SCOPE_KEYS, MemoryRecord
from memcore.fronts.http.common import (
    BadRequest,
    contract,
    entities_page,
    error,
    handle,
    links,
    memories_of,
    parsed,
    query_of,
    reply,
    scope_fields,
)
from memcore.fronts.http.mem0_requests import (
    IGNORED,
    add_scope,
    created_between,
    inference,
    joined_scope,
    metadata_conditions,
    parsed_filters,
    split_filters,
    split_read_filters,
    with_conditions,
    with_scope,
)
from memcore.fronts.http.schemas import (
    DeletedCountOut,
    EntitiesOut,
    Mem0AddBody,
    Mem0BatchBody,
    Mem0DeleteOneQuery,
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
    Mem0Params,
    Mem0SearchBody,
    Mem0UpdateBody,
    MessageOut,
    PingOut,
    message_dicts,
)
from memcore.service import MemoryService

DEFAULT_THRESHOLD = 0.3  # Mem0's search default, on memcore's 0-1 score (docs/mem0.md)


def record(r: MemoryRecord) -> dict[str, Any]:
    """A memory as Mem0 answers it: memcore's fields plus Mem0's own."""
    out = r.to_dict()
    out["categories"] = [r.category]
    out["hash"] = hashlib.md5(r.text.encode(), usedforsecurity=False).hexdigest()
    out["expiration_date"] = r.expiration_date
    out["immutable"] = r.immutable
    return out


def ignored(*given: Any, filters: Sequence[str] = ()) -> dict[str, str]:
    """The ``Memcore-Ignored`` header: the Mem0 fields and parameters a request set that
    change nothing here, and those its ``filters`` held (as ``filters.<name>``); none: no
    header."""
    names = sorted({n for g in given for n in g.model_fields_set if n in IGNORED} | {
        n for g in given for n in (g.model_extra or {}) if n in IGNORED
    } | {f"filters.{n}" for n in filters})  # fmt: skip
    return {"Memcore-Ignored": ", ".join(names)} if names else {}


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
        params = query_of(request, Mem0Params)
        messages: list[dict[str, Any]] = (
            [{"role": "user", "content": data.messages}]
            if isinstance(data.messages, str)
            else message_dicts(data.messages)
        )
        scope, skipped = add_scope(data)
        metadata = dict(data.metadata or {})
        if data.source is not None:
            metadata.setdefault("source", data.source)
        # a caller's own vector is for the text it sends: stored as given, never inferred from
        asked = False if data.vector is not None and data.infer is None else data.infer
        infer, warned = inference(service, asked)
        if not infer:  # as Mem0 stores messages it does not infer from: the system's are not
            messages = [m for m in messages if m.get("role") != "system"] or messages
        records = await memories_of(service, request).add(
            messages, metadata=metadata or None, infer=infer, **scope,
            idempotency_key=request.headers.get("idempotency-key"), created=data.timestamp,
            expiration_date=data.expiration_date, immutable=bool(data.immutable),
            vector=data.vector, vector_model=data.vector_model,
        )  # fmt: skip
        out: dict[str, Any] = {"results": [{**record(r), "event": r.event or "ADD"}
                                           for r in records]}  # fmt: skip
        headers = ignored(data, params, filters=skipped)
        if warned:
            out["warnings"] = [warned]
            headers["Memcore-Warning"] = warned
        return reply(Mem0MemoriesOut, out, headers=headers)

    async def page_of(
        request: Request, filters: Any, page: int, size: int, show_expired: bool, *given: Any
    ) -> Response:
        """One page of the memories Mem0 filters match; ``count`` is all of them."""
        scope, meta, skipped = split_filters(filters)
        m = memories_of(service, request)
        total = await m.count(**scope, filters=meta, show_expired=show_expired)
        rows = await m.get_all(
            **scope, filters=meta, limit=size, offset=(page - 1) * size,
            show_expired=show_expired,
        )  # fmt: skip
        out: dict[str, Any] = {"count": total, **links(page, size, total, request),
                               "results": [record(r) for r in rows]}  # fmt: skip
        if warned := scope_warnings(scope, meta, rows):
            out["warnings"] = warned
        return reply(Mem0PageOut, out, headers=ignored(*given, filters=skipped))

    @contract(Mem0PageOut, body=Mem0ListBody, query=Mem0PageQuery)
    @handle
    async def get_all(request: Request) -> Response:
        """A page of the memories the filters match (v2 and v3 listings)."""
        data = await parsed(request, Mem0ListBody)
        q = query_of(request, Mem0PageQuery)
        filters = with_conditions(
            with_scope(data.filters, scope_fields(data)),
            [*metadata_conditions(data.metadata), *created_between(data.start_date, data.end_date)],
        )
        page, size = q.page or data.page or 1, q.page_size or data.page_size or 100
        return await page_of(request, filters, page, size, bool(data.show_expired), data, q)

    @contract(Mem0PageOut, query=Mem0ListQuery)
    @handle
    async def list_v1(request: Request) -> Response:
        """Mem0's v1 listing: GET /v1/memories?user_id=... (``limit`` or ``page_size``)."""
        q = query_of(request, Mem0ListQuery)
        if q.limit is not None and q.page_size is not None and q.limit != q.page_size:
            raise BadRequest("give limit or page_size, not two different sizes")
        size = q.page_size or q.limit or 100
        filters = with_scope(None, scope_fields(q))
        return await page_of(request, filters, q.page, size, bool(q.show_expired), q)

    @contract(Mem0MemoriesOut, body=Mem0SearchBody)
    @handle
    async def search(request: Request) -> Response:
        """Search memories; each result has a score from 0 to 1 (Mem0's default threshold,
        0.3, unless the request gives one)."""
        data = await parsed(request, Mem0SearchBody)
        params = query_of(request, Mem0Params)
        read, rest = split_read_filters(data.filters)
        given, meta, skipped = split_filters(
            with_conditions(rest, metadata_conditions(data.metadata))
        )
        for key, value in scope_fields(data).items():
            if value is not None and given.get(key, value) != value:
                raise BadRequest(f"{key} differs between the body and its filters")
            given.setdefault(key, value)
        threshold = DEFAULT_THRESHOLD if data.threshold is None else data.threshold
        ceiling = service.settings.mem0.threshold_ceiling
        lowered = (
            f"threshold {threshold:g} was applied as {ceiling:g} (mem0.threshold_ceiling): "
            "memcore's scores run lower than Mem0's cosine for the same hits"
            if threshold > ceiling
            else ""
        )
        threshold = min(threshold, ceiling)
        rows = await memories_of(service, request).search(
            data.query, **given, **read, filters=meta, limit=data.top_k or data.limit or 10,
            threshold=threshold, show_expired=bool(data.show_expired),
            include_notes=bool(data.include_notes),
        )  # fmt: skip
        out: dict[str, Any] = {"results": [record(r) for r in rows]}
        warned = scope_warnings(given, meta, rows)
        if (pending := service.readiness.warning()) is not None:
            warned.append(pending)
        headers = ignored(data, params, filters=skipped)
        if lowered:
            warned.append(lowered)
            headers["Memcore-Warning"] = lowered
        if warned:
            out["warnings"] = warned
        return reply(Mem0MemoriesOut, out, headers=headers)

    @contract(Mem0MemoryOut, query=Mem0Params)
    @handle
    async def get_one(request: Request) -> Response:
        """One memory (a read: nothing about it changes, its strength included)."""
        params = query_of(request, Mem0Params)
        m = memories_of(service, request)
        found = await m.get(request.path_params["memory_id"], review=False)
        return reply(Mem0MemoryOut, record(found), headers=ignored(params))

    @contract(Mem0MemoryOut, body=Mem0UpdateBody, query=Mem0Params)
    @handle
    async def update(request: Request) -> Response:
        """Change a memory's text, metadata or created_at (an immutable memory: 409)."""
        memory_id = request.path_params["memory_id"]
        data = await parsed(request, Mem0UpdateBody)
        params = query_of(request, Mem0Params)
        if data.text is not None and data.content is not None and data.text != data.content:
            raise BadRequest("give text or content, not two different texts")
        text = data.text if data.text is not None else data.content
        # expiration_date: null takes the date away (Mem0's client sends it so)
        expiry = data.expiration_date if data.expiration_date is not None else (
            "" if "expiration_date" in data.model_fields_set else None
        )  # fmt: skip
        changed = await memories_of(service, request).update(
            memory_id,
            text,
            data.metadata,
            created=data.timestamp,
            expiration_date=expiry,
            vector=data.vector,
            vector_model=data.vector_model,
        )
        return reply(Mem0MemoryOut, record(changed), headers=ignored(data, params))

    @contract(MessageOut, query=Mem0DeleteOneQuery)
    @handle
    async def delete(request: Request) -> Response:
        """Delete a memory (``delete_linked`` changes nothing: memcore keeps no superseded
        memories to link)."""
        params = query_of(request, Mem0DeleteOneQuery)
        await memories_of(service, request).delete(request.path_params["memory_id"])
        return reply(
            MessageOut, {"message": "Memory deleted successfully!"}, headers=ignored(params)
        )

    @contract(DeletedCountOut, query=Mem0DeleteQuery)
    @handle
    async def delete_all(request: Request) -> Response:
        """Delete every memory of a scope (a scope is required)."""
        q = query_of(request, Mem0DeleteQuery)
        unknown = set(q.model_extra or {}) - IGNORED
        if unknown:
            raise BadRequest(f"unknown parameter(s): {', '.join(sorted(unknown))}")
        scope = joined_scope(scope_fields(q), parsed_filters(q.filters))
        gone = await memories_of(service, request).delete_all(**scope)
        return reply(
            DeletedCountOut, {"message": "Memories deleted successfully!", "deleted": gone},
            headers=ignored(q),
        )  # fmt: skip

    @contract(EntitiesOut, query=Mem0PageQuery)
    @handle
    async def entities(request: Request) -> Response:
        """Every user, agent, run and app holding memories (Mem0's users()), paged when
        ``page_size`` is given."""
        q = query_of(request, Mem0PageQuery)
        found = await memories_of(service, request).entities()
        return reply(
            EntitiesOut, entities_page(found, request, q.page or 1, q.page_size), headers=ignored(q)
        )

    @contract(DeletedCountOut, query=Mem0Params)
    @handle
    async def delete_entity(request: Request) -> Response:
        """Delete every memory of one user, agent, run or app (Mem0's delete_users()); one
        with none is deleted already (``deleted: 0``)."""
        params = query_of(request, Mem0Params)
        kind, name = request.path_params["kind"], request.path_params["name"]
        gone = await memories_of(service, request).delete_entity(kind, name, missing_ok=True)
        return reply(
            DeletedCountOut, {"message": "Entity deleted successfully!", "deleted": gone},
            headers=ignored(params),
        )  # fmt: skip

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

    @contract(list[Mem0HistoryEvent], query=Mem0Params)
    @handle
    async def history(request: Request) -> Response:
        """What happened to a memory, oldest first (an unknown id: 404)."""
        params = query_of(request, Mem0Params)
        memory_id = request.path_params["memory_id"]
        m = memories_of(service, request)
        events = await m.history(memory_id)
        now = await m.get(memory_id, review=False) if any_left(events) else None
        kept = events[-1].get("memory") if events else None
        was = now.to_dict() if now is not None else dict(kept if isinstance(kept, Mapping) else {})
        rows = [mem0_event(memory_id, n, e, was) for n, e in enumerate(events)]
        return reply(list[Mem0HistoryEvent], rows, headers=ignored(params))

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
        # all of them the caller's before any goes, and then all of them or none
        await memories_of(service, request).delete_many([m.memory_id for m in data.memories])
        return reply(MessageOut, {"message": f"Successfully deleted {len(data.memories)} memories"})

    def platform(what: str) -> Any:
        async def not_here(request: Request) -> Response:
            return error(501, f"not supported by memcore: {what} ({request.method} "
                              f"{request.url.path}) are a feature of Mem0's platform")  # fmt: skip

        return not_here

    one = [("GET", get_one), ("PUT", update), ("DELETE", delete)]
    both = ["GET", "POST", "PUT", "PATCH", "DELETE"]
    return [
        Route("/v1/ping/", ping, methods=["GET"]),
        Route("/v3/memories/add/", add, methods=["POST"]),
        Route("/v3/memories/", get_all, methods=["POST"]),
        Route("/v2/memories/", get_all, methods=["POST"], name="get_all_v2"),
        Route("/v3/memories/search/", search, methods=["POST"]),
        Route("/v2/memories/search/", search, methods=["POST"], name="search_v2"),
        Route("/v1/memories/{memory_id}/history/", history, methods=["GET"]),
        Route("/v1/batch/", batch_update, methods=["PUT"]),
        Route("/v1/batch/", batch_delete, methods=["DELETE"]),
        Route("/v1/entities/", entities, methods=["GET"]),
        # Mem0's platform only: 501, so that a client says what is missing, not "not found"
        Route("/v2/entities/{kind}/{name:path}/profile/", platform("profiles"), methods=both),
        Route("/v2/profiles/{rest:path}", platform("profiles"), methods=both),
        Route("/v1/exports/", platform("memory exports"), methods=both),
        Route("/v1/exports/get/", platform("memory exports"), methods=both),
        Route("/v1/summary/", platform("summaries"), methods=both),
        Route("/api/v1/orgs/{rest:path}", platform("organizations and projects"), methods=both),
        Route("/api/v1/webhooks/{rest:path}", platform("webhooks"), methods=both),
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


def scope_warnings(scope: Mapping[str, Any], meta: Any, rows: list[MemoryRecord]) -> list[str]:
    """Where memcore's answer differs from Mem0's on purpose: a scope names only the levels
    given, so a bare user_id also finds that user's memories with an agent or a run."""
    if meta is not None or not scope.get("user_id") or scope.get("agent_id"):
        return []
    if not any(r.agent_id or r.run_id for r in rows):
        return []
    return [
        "user_id alone also matches that user's memories with an agent_id or run_id "
        '(memcore\'s scope); add {"NOT": {"agent_id": "*"}} to leave them out'
    ]


def any_left(events: list[dict[str, object]]) -> bool:
    """Whether the memory is still in its file after its events (an unknown id has none: the
    get that follows answers 404; a deleted or archived one is described by its events)."""
    return not events or events[-1].get("event") not in ("DELETE", "ARCHIVE")


def mem0_event(
    memory_id: str, n: int, e: Mapping[str, Any], was: Mapping[str, Any]
) -> dict[str, Any]:
    """One history event in Mem0's shape: memcore's fields, plus the memory's scope,
    categories and metadata (``was``: as they are now, or as they were when deleted)."""
    return {
        "id": f"{memory_id}:{n}", **e, "input": [],
        **{k: was.get(k) for k in SCOPE_KEYS},
        "categories": [str(was["category"])] if was.get("category") else [],
        "metadata": dict(was.get("metadata") or {}),
        "updated_at": e.get("created_at"),
    }  # fmt: skip
