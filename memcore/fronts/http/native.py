"""memcore's own HTTP routes under /api: search, context, status, memories, conversations."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from memcore.core.heap import paused_collection
from memcore.core.models import SearchFilters
from memcore.fronts.daemon_state import daemon_status
from memcore.fronts.http.common import (
    BadRequest,
    caller_of,
    contract,
    entities_page,
    handle,
    links,
    memories_of,
    parsed,
    parsed_list,
    query_of,
    reply,
    scope_fields,
    spooled,
    vector_of,
)
from memcore.fronts.http.schemas import (
    AddBody,
    ContextBody,
    ContextOut,
    ConversationBody,
    ConversationQuery,
    CountedOut,
    CountOut,
    CountQuery,
    DeletedOut,
    EntitiesOut,
    ForgetManyBody,
    HistoryOut,
    ListQuery,
    MemoriesOut,
    MemoryOut,
    Message,
    MessagesOut,
    ReadFields,
    SavedOut,
    SearchBody,
    SearchOut,
    StatusOut,
    UpdateBody,
    WriteMemoryBody,
    WrittenOut,
    message_dicts,
)
from memcore.fronts.http.strength import strength_routes
from memcore.search.filters import read_filters
from memcore.service import MemoryService


def _joined(messages: list[dict[str, Any]]) -> str:
    return ",".join(json.dumps(m, ensure_ascii=False) for m in messages)


async def streamed_messages(pages: AsyncIterator[list[dict[str, Any]]]) -> AsyncIterator[bytes]:
    """``{"messages": [...]}`` written a page of messages at a time."""
    yield b'{"messages":['
    first = True
    with paused_collection():  # as a save: no full collection walking what it builds
        async for messages in pages:
            if messages:  # encoded in a worker thread: the event loop answers others meanwhile
                text = await asyncio.to_thread(_joined, messages)
                yield (text if first else "," + text).encode()
                first = False
    yield b"]}"


def native_routes(service: MemoryService) -> list[Route]:  # noqa: C901 - a route table
    """memcore's own API: search, context, status and the memory operations."""

    def filters_of(data: ReadFields, include_turns: bool) -> SearchFilters:
        return read_filters(
            **scope_fields(data),
            include_shared=data.include_shared and not data.scope_only,  # now the default
            include_turns=include_turns if data.include_turns is None else data.include_turns,
            category=data.category, metadata=data.filters, tag=data.tag, path=data.path,
            since=data.since, until=data.until, show_expired=data.show_expired,
        )  # fmt: skip

    @contract(SearchOut, body=SearchBody)
    @handle
    async def search(request: Request) -> Response:
        """Hybrid search: notes and memories, each with a score from 0 to 1."""
        data = await parsed(request, SearchBody)
        if data.query is None and data.query_vector is None:
            raise BadRequest("missing field(s): query (or query_vector)")
        result = await service.search(
            data.query or "", data.limit or 5, filters_of(data, True),
            min_score=data.threshold, query_vector=vector_of(data.query_vector),
            caller=caller_of(request),
        )  # fmt: skip
        if data.reinforce:
            await memories_of(service, request).reinforce_hits(result.hits)
        out = result.to_dict()
        for row in out["results"]:  # type: ignore[attr-defined]
            row["memory_id"] = None if row["id"].startswith("note:") else row["id"]
        return reply(SearchOut, out)

    @contract(ContextOut, body=ContextBody)
    @handle
    async def context(request: Request) -> Response:
        """A "## Relevant Memories" block for a prompt (empty when nothing is relevant)."""
        data = await parsed(request, ContextBody)
        block = await service.context(
            data.query, data.limit or 3, filters_of(data, False), min_score=data.min_score,
            caller=caller_of(request),
        )  # fmt: skip
        return reply(ContextOut, {"context": block})

    @contract(StatusOut)
    @handle
    async def status(request: Request) -> Response:
        """What the index holds, how far its catch-up is, and the watcher's state."""
        document = await service.status_document()
        return reply(StatusOut, {**document, "daemon": daemon_status(service.settings)})

    @contract(MemoriesOut, body=AddBody, links={"memory_id": "$response.body#/results/0/id"})
    @handle
    async def add(request: Request) -> Response:
        """Add a memory (content) or a conversation's memories (messages)."""
        data = await parsed(request, AddBody)
        content = message_dicts(data.messages) if data.messages is not None else data.content
        if content is None:
            raise BadRequest("give content (text) or messages (a list)")
        records = await memories_of(service, request).add(
            content, metadata=data.metadata, key=data.key, category=data.category,
            infer=data.infer, **scope_fields(data),
            idempotency_key=request.headers.get("idempotency-key"), created=data.timestamp,
            expiration_date=data.expiration_date, immutable=data.immutable,
            vector=data.vector, vector_model=data.vector_model,
        )  # fmt: skip
        return reply(MemoriesOut, {"results": [r.to_dict() for r in records]})

    @contract(MemoriesOut, query=ListQuery)
    @handle
    async def list_all(request: Request) -> Response:
        """Memories of a scope, oldest first."""
        q = query_of(request, ListQuery)
        records = await memories_of(service, request).get_all(
            **scope_fields(q), category=q.category,
            tag=q.tag, limit=q.limit, offset=q.offset, show_expired=q.show_expired,
        )  # fmt: skip
        return reply(MemoriesOut, {"results": [r.to_dict() for r in records]})

    @contract(CountedOut, query=CountQuery)
    @handle
    async def count(request: Request) -> Response:
        """How many memories a scope holds (turns only when the category asks for them)."""
        q = query_of(request, CountQuery)
        n = await memories_of(service, request).count(
            **scope_fields(q), category=q.category, show_expired=q.show_expired
        )
        return reply(CountedOut, {"count": n})

    @contract(MemoryOut)
    @handle
    async def get_one(request: Request) -> Response:
        """One memory, with its strength (reading it counts as a review)."""
        memory_id = request.path_params["memory_id"]
        return reply(MemoryOut, (await memories_of(service, request).get(memory_id)).to_dict())

    @contract(MemoryOut, body=UpdateBody)
    @handle
    async def update(request: Request) -> Response:
        """Change a memory's text or metadata; its id stays."""
        memory_id = request.path_params["memory_id"]
        data = await parsed(request, UpdateBody)
        expiry = data.expiration_date if data.expiration_date is not None else (
            "" if "expiration_date" in data.model_fields_set else None
        )  # fmt: skip
        record = await memories_of(service, request).update(
            memory_id, data.content, data.metadata, created=data.timestamp,
            expiration_date=expiry, vector=data.vector, vector_model=data.vector_model,
        )  # fmt: skip
        return reply(MemoryOut, record.to_dict())

    @contract(DeletedOut)
    @handle
    async def delete(request: Request) -> Response:
        """Delete a memory (its history keeps it; restore brings it back)."""
        memory_id = request.path_params["memory_id"]
        await memories_of(service, request).delete(memory_id)
        return reply(DeletedOut, {"deleted": memory_id})

    @contract(WrittenOut, body=WriteMemoryBody)
    @handle
    async def write_memory(request: Request) -> Response:
        """Append a block of Markdown to a vault file (seed 003's write_memory) and index
        it; a token held to a scope may not (403)."""
        data = await parsed(request, WriteMemoryBody)
        path = await memories_of(service, request).write_memory(data.content, data.file)
        return reply(WrittenOut, {"path": path})

    @contract(CountOut, body=ForgetManyBody)
    @handle
    async def forget_many(request: Request) -> Response:
        """Delete many memories in one call: all of them, or none (an id that is not a
        memory, or not the caller's, is a 404 and nothing is deleted)."""
        data = await parsed(request, ForgetManyBody)
        gone = await memories_of(service, request).delete_many(data.memory_ids)
        return reply(CountOut, {"deleted": gone})

    @contract(HistoryOut)
    @handle
    async def history(request: Request) -> Response:
        """What happened to a memory: ADD, UPDATE, DELETE, when and by whom."""
        memory_id = request.path_params["memory_id"]
        return reply(
            HistoryOut, {"results": await memories_of(service, request).history(memory_id)}
        )

    @contract(EntitiesOut)
    @handle
    async def entities(request: Request) -> Response:
        """Every user, agent and run that holds memories, with how many."""
        return reply(
            EntitiesOut, entities_page(await memories_of(service, request).entities(), request)
        )

    def session_of(request: Request) -> str:
        return str(request.path_params["session_id"])

    @contract(MessagesOut, query=ConversationQuery)
    @handle
    async def load(request: Request) -> Response:
        """A session's transcript as chat messages: a page (``page``, ``page_size``; with
        ``count``, ``next`` and ``previous``), the last ``limit``, or all of it, streamed a
        page file at a time."""
        session = session_of(request)
        asked = query_of(request, ConversationQuery)
        talks = service.conversations_for(caller_of(request))
        if asked.page is not None or asked.page_size is not None:
            if asked.limit is not None:
                raise BadRequest("give limit, or page and page_size, not both")
            page, size = asked.page or 1, asked.page_size or 100
            messages, total = await talks.window(session, page, size)
            paging = links(page, size, total, request)
            return reply(MessagesOut, {"messages": messages, "count": total, **paging})
        if asked.limit is not None:
            return reply(MessagesOut, {"messages": await talks.load(session, asked.limit)})
        return StreamingResponse(streamed_messages(talks.stream(session)),
                                 media_type="application/json")  # fmt: skip

    @contract(SavedOut, body=ConversationBody)
    @handle
    async def save(request: Request) -> Response:
        """Replace a session's transcript with these messages."""
        session = session_of(request)
        # up to 64 MB: streamed to a file, then parsed a message at a time off the event loop,
        # with no cyclic collection walking the large heap it builds meanwhile
        body = await spooled(request)
        with paused_collection():
            messages = await asyncio.to_thread(parsed_list, body, "messages", Message)
            saved = await service.conversations_for(caller_of(request)).save(session, messages)
        return reply(SavedOut, {"saved": saved})

    @contract(CountOut)
    @handle
    async def reset(request: Request) -> Response:
        """Forget a session's transcript."""
        session = session_of(request)
        return reply(
            CountOut,
            {"deleted": await service.conversations_for(caller_of(request)).reset(session)},
        )

    return [
        Route("/api/memory/search", search, methods=["POST"]),
        Route("/api/memory/context", context, methods=["POST"]),
        Route("/api/memory/count", count, methods=["GET"]),
        Route("/api/status", status, methods=["GET"]),
        Route("/api/memories", add, methods=["POST"]),
        Route("/api/memories", list_all, methods=["GET"]),
        Route("/api/entities", entities, methods=["GET"]),
        Route("/api/memories/delete", forget_many, methods=["POST"]),
        Route("/api/notes", write_memory, methods=["POST"]),
        Route("/api/memories/{memory_id}", get_one, methods=["GET"]),
        Route("/api/memories/{memory_id}", update, methods=["PUT"]),
        Route("/api/memories/{memory_id}", delete, methods=["DELETE"]),
        Route("/api/memories/{memory_id}/history", history, methods=["GET"]),
        Route("/api/conversations/{session_id:path}", load, methods=["GET"]),
        Route("/api/conversations/{session_id:path}", save, methods=["PUT"]),
        Route("/api/conversations/{session_id:path}", reset, methods=["DELETE"]),
        *strength_routes(service),
    ]
