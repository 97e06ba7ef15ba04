"""The MCP server (official `mcp` SDK): memory tools for agent hosts, over stdio (`memcore
mcp`) or streamable HTTP (mounted at /mcp by `memcore serve`). Tools call the shared service;
a memcore error comes back to the host as a tool error with its one-line message."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Annotated, Any, Literal, TypeVar

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import Field, ValidationError

from memcore.core.channel import VIA
from memcore.core.errors import InputError, MemcoreError, validation_message
from memcore.core.models import LOCAL, Caller
from memcore.core.version import __version__
from memcore.fronts.http.common import BadRequest, check_json
from memcore.memory.port import Memory
from memcore.search.filters import read_filters
from memcore.search.searcher import MAX_LIMIT
from memcore.service import MemoryService

Limit = Annotated[int, Field(ge=1, le=MAX_LIMIT, description=f"1-{MAX_LIMIT}")]
Offset = Annotated[int, Field(ge=0, le=10_000_000)]
Score = Annotated[float, Field(ge=0, le=1)]

INSTRUCTIONS = """memcore is this workspace's long-term memory: Markdown notes plus memories
written by agents. Search it before answering questions about past decisions, people,
preferences or projects; add a memory when you learn something worth keeping."""


F = TypeVar("F", bound=Callable[..., Awaitable[Any]])


def one_line_errors(fn: F) -> F:
    """memcore's errors reach the host with their message (the SDK hides other exceptions')."""

    @functools.wraps(fn)
    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        VIA.set("agent")  # the tool call's own context: the history attributes it to an agent
        try:
            return await fn(*args, **kwargs)
        except MemcoreError as exc:
            raise ToolError(str(exc)) from exc

    return wrapped  # type: ignore[return-value]


class MemcoreMCP(MCPServer):
    """The SDK's server, with arguments that fail validation reported in one line (the SDK
    reports pydantic's multi-line dump)."""

    async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
        tool = self._tool_manager.get_tool(name)
        if tool is not None:
            unknown = set(arguments) - set(tool.parameters.get("properties", {}))
            if unknown:
                raise ToolError(f"{name}: unknown argument(s): {', '.join(sorted(unknown))}")
        try:
            check_json(arguments)
        except BadRequest as exc:
            raise ToolError(f"{name}: {exc}") from None
        caller = CALLER.set(_caller_of(context))
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                message = validation_message(cause.errors(include_url=False))
                raise ToolError(f"{name}: {message}") from cause
            raise
        finally:
            CALLER.reset(caller)


# Who calls the tool running now: the token of the HTTP request that carried the call (the
# Guard in fronts/http/app.py names it), or the vault's owner over stdio.
CALLER: ContextVar[Caller] = ContextVar("memcore_mcp_caller", default=LOCAL)


def _caller_of(context: Any) -> Caller:
    try:
        request = context.request_context.request if context is not None else None
    except ValueError:  # no request context: stdio, or a call made in-process
        return LOCAL
    state = getattr(request, "scope", {}).get("state", {}) if request is not None else {}
    caller = state.get("caller")
    return caller if isinstance(caller, Caller) else LOCAL


def build_mcp(service: MemoryService) -> MCPServer:  # noqa: C901 - a tool table
    mcp = MemcoreMCP("memcore", instructions=INSTRUCTIONS, version=__version__)

    def m() -> Memory:
        return service.memories_for(CALLER.get())

    @mcp.tool()
    @one_line_errors
    async def search(
        query: str,
        limit: Limit = 5,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        include_shared: bool = False,
        category: str | None = None,
        filters: dict[str, Any] | None = None,
        tag: str | None = None,
        path: str | None = None,
        since: str | None = None,
        until: str | None = None,
        threshold: Score | None = None,
        include_turns: bool = True,
    ) -> dict[str, Any]:
        """Search memory by meaning and keywords; each result has a score from 0 to 1. With a
        scope (user_id/agent_id/run_id/app_id) only that scope's memories and notes come back, plus
        shared ones with include_shared. filters: metadata conditions, Mem0-style. An empty
        query with a tag lists what carries the tag, newest first."""
        found = await m().search(
            query, user_id=user_id, agent_id=agent_id, run_id=run_id, app_id=app_id,
            include_shared=include_shared, include_turns=include_turns, category=category,
            filters=filters, tag=tag, path=path, since=since, until=until, limit=limit,
            threshold=threshold,
        )  # fmt: skip
        pending = service.readiness.warning()
        return {"results": [r.to_dict() for r in found], "warnings": [pending] if pending else []}

    @mcp.tool()
    @one_line_errors
    async def context(
        query: str,
        limit: Limit = 3,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        include_shared: bool = False,
        category: str | None = None,
        tag: str | None = None,
        path: str | None = None,
        include_turns: bool = False,
        min_score: Score | None = None,
    ) -> str:
        """A "## Relevant Memories" block for the task at hand, scoped like search; empty when
        nothing clears the relevance floor (search.context_min_score)."""
        filters = read_filters(
            user_id=user_id, agent_id=agent_id, run_id=run_id, app_id=app_id,
            include_shared=include_shared, include_turns=include_turns, category=category,
            tag=tag, path=path,
        )  # fmt: skip
        return await service.context(
            query, limit, filters, min_score=min_score, caller=CALLER.get()
        )

    @mcp.tool()
    @one_line_errors
    async def add(
        content: str,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        category: str = "core",
        key: str | None = None,
        metadata: dict[str, Any] | None = None,
        idempotency_key: str | None = None,
        timestamp: int | float | str | None = None,
        expiration_date: str | None = None,
        immutable: bool = False,
        vector: list[float] | None = None,
        vector_model: str | None = None,
    ) -> list[dict[str, Any]]:
        """Remember something (written to the workspace's Markdown, searchable at once). A key
        replaces the memory under that key in the same scope and category. An
        idempotency_key makes a retried call return the first call's memories. timestamp
        (Unix seconds or ISO) is when it was made; after expiration_date (YYYY-MM-DD) reads
        leave it out; an immutable memory refuses updates. vector: your own embedding of the
        content (the index's model and size; vector_model names the model that made it)."""
        added = await m().add(content, user_id=user_id, agent_id=agent_id, run_id=run_id,
                              app_id=app_id, category=category, key=key, metadata=metadata,
                              idempotency_key=idempotency_key, created=timestamp,
                              expiration_date=expiration_date, immutable=immutable,
                              vector=vector, vector_model=vector_model)  # fmt: skip
        return [r.to_dict() for r in added]

    @mcp.tool()
    @one_line_errors
    async def get(memory_id: str) -> dict[str, Any]:
        """One memory by id."""
        return (await m().get(memory_id)).to_dict()

    @mcp.tool(name="list")
    @one_line_errors
    async def list_memories(
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        category: str | None = None,
        limit: Limit = 50,
        offset: Offset = 0,
        show_expired: bool = False,
    ) -> list[dict[str, Any]]:
        """Memories of a scope, oldest first (past their expiration date only with
        show_expired)."""
        rows = await m().get_all(user_id=user_id, agent_id=agent_id, run_id=run_id, app_id=app_id,
                               category=category, limit=limit, offset=offset,
                               show_expired=show_expired)  # fmt: skip
        return [r.to_dict() for r in rows]

    @mcp.tool()
    @one_line_errors
    async def update(
        memory_id: str,
        content: str | None = None,
        vector: list[float] | None = None,
        vector_model: str | None = None,
    ) -> dict[str, Any]:
        """Change a memory's text and/or give your own vector for it; its id stays."""
        changed = await m().update(memory_id, content, vector=vector, vector_model=vector_model)
        return changed.to_dict()

    @mcp.tool()
    @one_line_errors
    async def forget(
        memory_id: str | None = None,
        key: str | None = None,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        memory_ids: list[str] | None = None,
    ) -> str:
        """Delete a memory by id, many by memory_ids (all of them or none), or the one under
        a key in a scope."""
        if memory_ids:
            return f"forgot {await m().delete_many(memory_ids)} memories"
        if memory_id:
            await m().delete(memory_id)
            return f"forgot {memory_id}"
        if key:
            gone = await m().forget(
                key, user_id=user_id, agent_id=agent_id, run_id=run_id, app_id=app_id
            )
            return f"forgot {key}" if gone else f"nothing under key {key!r}"
        raise InputError("forget needs memory_id, memory_ids, or key (with its scope)")

    @mcp.tool()
    @one_line_errors
    async def write_memory(content: str, file: str = "MEMORY.md") -> str:
        """Append a block of Markdown to a vault file (MEMORY.md or memory/**/*.md) and
        index it: a note for people and agents alike, not a scoped memory."""
        path = await m().write_memory(content, file)
        return f"wrote to {path}" if path else "memory is disabled: nothing written"

    @mcp.tool()
    @one_line_errors
    async def history(memory_id: str) -> list[dict[str, Any]]:
        """What happened to a memory: ADD / UPDATE / DELETE, when, by the API or a person."""
        return await m().history(memory_id)

    @mcp.tool()
    @one_line_errors
    async def entities() -> list[dict[str, Any]]:
        """Every user, agent, run and app that holds memories, with how many."""
        return [e.to_dict() for e in await m().entities()]

    @mcp.tool()
    @one_line_errors
    async def feedback(
        memory_id: str, feedback: Literal["POSITIVE", "NEGATIVE", "VERY_NEGATIVE"]
    ) -> dict[str, Any]:
        """Rate a memory after using it: POSITIVE (it helped) strengthens it, NEGATIVE (it did
        not) weakens it, VERY_NEGATIVE (it is wrong) makes it fade and be archived."""
        return (await m().feedback(memory_id, feedback)).to_dict()

    @mcp.tool()
    @one_line_errors
    async def status() -> dict[str, Any]:
        """What the index holds and how far it is with catching up with the vault
        (``readiness``: phase, files_done, files_total): the same document as `memcore
        status --json` and GET /api/status."""
        return await service.status_document()

    return mcp
