"""The one authorization rule: a caller's scope intersected with every memory operation.

Every front hands the service the ``Caller`` a request came from (its token's identity and
the scope a scoped token holds it to); ``ScopedMemory`` wraps the memory port for that
caller, so no route, tool or page can reach another scope's memories by forgetting a check:

- a read or write naming a scope gets the caller's binding filled in, and naming another
  value of a bound field is refused (``Forbidden``, 403);
- a memory of another scope, asked for by id, does not exist for the caller (``NotFound``);
- idempotency keys are the caller's own: the same key from two callers guards two writes.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from memcore.core.errors import Forbidden, InputError, NotFound
from memcore.core.models import (
    SCOPE_KEYS,
    Caller,
    Entity,
    Hit,
    MemoryRecord,
    ScopeIds,
    SearchFilters,
    scope_ids,
)
from memcore.core.vectors import VectorLike
from memcore.memory.port import Memory, Message

if TYPE_CHECKING:
    from memcore.memory.adding import NewMemory
    from memcore.memory.conversations import Conversations
    from memcore.storage.base import Vector

MAX_KEY = 256  # an idempotency key: 1-256 characters of text


def bind_scope(caller: Caller, given: Mapping[str, str | None]) -> ScopeIds:
    """``given`` (user_id, agent_id, run_id, app_id) with the caller's binding filled in; Forbidden
    when it names another value of a bound field."""
    scope = {k: given.get(k) for k in SCOPE_KEYS}
    for key, value in caller.binding:
        if scope[key] not in (None, value):
            raise Forbidden(f"this token is bound to {caller.describe()}, not {key}={scope[key]}")
        scope[key] = value
    return scope_ids(scope)


def bind_filters(caller: Caller, filters: SearchFilters | None) -> SearchFilters | None:
    """Search filters held to the caller's scope (see ``bind_scope``)."""
    if not caller.binding:
        return filters
    filters = filters or SearchFilters(include_turns=False)
    s = bind_scope(caller, {k: getattr(filters, k) for k in SCOPE_KEYS})
    return replace(filters, **s)


def within_binding(caller: Caller, fields: Mapping[str, object]) -> bool:
    """Whether a memory with these scope fields is the caller's to see."""
    return all(fields.get(key) == value for key, value in caller.binding)


def request_key(caller: Caller, key: str | None) -> str | None:
    """The idempotency key as the history records it: the caller's own (its identity and the
    key), so that another caller's key never answers for this one's write."""
    if key is None:
        return None
    if not isinstance(key, str) or not key.strip() or len(key) > MAX_KEY:
        raise InputError(f"an idempotency key is 1-{MAX_KEY} characters of text")
    return key if caller.identity == "local" else f"{caller.identity} {key}"


def check_session(caller: Caller, session: str) -> str:
    """A transcript belongs to its session alone: only a token bound to exactly that run (or
    one of every scope) reaches it (a user's token would otherwise reach every session)."""
    if caller.binding and caller.bound != {"run_id": session}:
        raise Forbidden(f"a token bound to {caller.describe()} cannot reach session {session}")
    return session


class ScopedMemory(Memory):
    """The memory port as one caller may use it (see the module's docstring)."""

    def __init__(self, inner: Memory, caller: Caller) -> None:
        self.inner = inner
        self.caller = caller
        self.kind = inner.kind

    async def aclose(self) -> None:
        return None  # the service owns the adapter

    def _scope(self, **given: str | None) -> ScopeIds:
        return bind_scope(self.caller, given)

    async def _own(self, memory_id: str) -> MemoryRecord:
        """The memory, when it is the caller's; NotFound otherwise (as if it did not exist)."""
        record = await self.inner.get(memory_id, review=False)
        if not within_binding(self.caller, record.to_dict()):
            raise NotFound(f"no memory with id {memory_id!r}")
        return record

    async def _own_gone(self, memory_id: str) -> None:
        """An archived or deleted memory was the caller's (by its archive or its last DELETE)."""
        try:
            fields: Mapping[str, object] = (await self.inner.archived(memory_id)).to_dict()
        except NotFound:
            events = await self.inner.history(memory_id)
            last = next((e for e in reversed(events) if e.get("event") == "DELETE"), {})
            kept = last.get("memory")
            fields = kept if isinstance(kept, Mapping) else {}
        if not fields or not within_binding(self.caller, fields):
            raise NotFound(f"no archived or deleted memory with id {memory_id!r}")

    async def _own_any(self, memory_id: str) -> None:
        if not self.caller.binding:
            return
        try:
            await self._own(memory_id)
        except NotFound:
            await self._own_gone(memory_id)

    async def add(
        self,
        content: str | Sequence[Message],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        metadata: Mapping[str, object] | None = None,
        category: str = "core",
        key: str | None = None,
        infer: bool = False,
        idempotency_key: str | None = None,
        created: str | float | None = None,
        expiration_date: str | None = None,
        immutable: bool = False,
        vector: VectorLike | None = None,
        vector_model: str | None = None,
    ) -> list[MemoryRecord]:
        scope = self._scope(user_id=user_id, agent_id=agent_id, run_id=run_id, app_id=app_id)
        return await self.inner.add(
            content, **scope, metadata=metadata, category=category, key=key, infer=infer,
            idempotency_key=request_key(self.caller, idempotency_key), created=created,
            expiration_date=expiration_date, immutable=immutable, vector=vector,
            vector_model=vector_model,
        )  # fmt: skip

    async def add_batch(self, memories: Sequence[NewMemory]) -> list[MemoryRecord]:
        return await self.inner.add_batch(self._bound(memories))

    async def load(self, memories: Sequence[NewMemory]) -> int:
        return await self.inner.load(self._bound(memories))

    def _bound(self, memories: Sequence[NewMemory]) -> list[NewMemory]:
        """The memories in the caller's scope (its binding fills or checks each one's)."""
        bound = []
        for m in memories:
            fields = self._scope(**{k: getattr(m.scope, k) for k in SCOPE_KEYS})
            bound.append(replace(m, scope=type(m.scope)(**fields)))
        return bound

    async def get(self, memory_id: str, *, review: bool = True) -> MemoryRecord:
        if self.caller.binding:
            record = await self._own(memory_id)
            if not review:
                return record
        return await self.inner.get(memory_id, review=review)

    async def get_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        category: str | None = None,
        key: str | None = None,
        tag: str | None = None,
        filters: Mapping[str, object] | None = None,
        limit: int = 100,
        offset: int = 0,
        show_expired: bool = False,
    ) -> list[MemoryRecord]:
        scope = self._scope(user_id=user_id, agent_id=agent_id, run_id=run_id, app_id=app_id)
        return await self.inner.get_all(
            **scope, category=category, key=key, tag=tag, filters=filters, limit=limit,
            offset=offset, show_expired=show_expired,
        )  # fmt: skip

    async def count(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        category: str | None = None,
        filters: Mapping[str, object] | None = None,
        show_expired: bool = False,
    ) -> int:
        scope = self._scope(user_id=user_id, agent_id=agent_id, run_id=run_id, app_id=app_id)
        return await self.inner.count(
            **scope, category=category, filters=filters, show_expired=show_expired
        )

    async def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        include_shared: bool = False,
        include_turns: bool = True,
        category: str | None = None,
        filters: Mapping[str, object] | None = None,
        tag: str | None = None,
        path: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int = 5,
        threshold: float | None = None,
        query_vector: Vector | None = None,
        reinforce: bool = False,
        show_expired: bool = False,
        include_notes: bool = True,
    ) -> list[MemoryRecord]:
        scope = self._scope(user_id=user_id, agent_id=agent_id, run_id=run_id, app_id=app_id)
        return await self.inner.search(
            query, **scope, include_shared=include_shared, include_turns=include_turns,
            category=category, filters=filters, tag=tag, path=path, since=since, until=until,
            limit=limit, threshold=threshold, query_vector=query_vector, reinforce=reinforce,
            show_expired=show_expired, include_notes=include_notes,
        )  # fmt: skip

    async def update(
        self,
        memory_id: str,
        content: str | None = None,
        metadata: Mapping[str, object] | None = None,
        *,
        created: str | float | None = None,
        expiration_date: str | None = None,
        vector: VectorLike | None = None,
        vector_model: str | None = None,
    ) -> MemoryRecord:
        if self.caller.binding:
            await self._own(memory_id)
        return await self.inner.update(
            memory_id, content, metadata, created=created, expiration_date=expiration_date,
            vector=vector, vector_model=vector_model,
        )  # fmt: skip

    async def delete(self, memory_id: str) -> None:
        if self.caller.binding:
            await self._own(memory_id)
        await self.inner.delete(memory_id)

    async def store(
        self,
        key: str,
        content: str,
        category: str = "core",
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
    ) -> MemoryRecord | None:
        scope = self._scope(user_id=user_id, agent_id=agent_id, run_id=run_id, app_id=app_id)
        return await self.inner.store(key, content, category, **scope)

    async def get_memories_by_tag(self, tag: str, limit: int = 100) -> list[MemoryRecord]:
        return await self.search("", tag=tag, limit=limit)  # the caller's scope, bound there

    async def write_memory(self, content: str, file: str = "MEMORY.md") -> str | None:
        if self.caller.binding:  # a vault file is everyone's: no scope holds it
            raise Forbidden(
                "a token held to a scope cannot write the vault's files (write_memory); "
                "the server's own token can"
            )
        return await self.inner.write_memory(content, file)

    async def delete_many(self, memory_ids: Sequence[str]) -> int:
        if self.caller.binding:  # every one the caller's before any goes
            for memory_id in memory_ids:
                await self._own(memory_id)
        return await self.inner.delete_many(memory_ids)

    async def delete_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        all: bool = False,
    ) -> int:
        scope = self._scope(user_id=user_id, agent_id=agent_id, run_id=run_id, app_id=app_id)
        if all and self.caller.binding:
            raise Forbidden(f"a token bound to {self.caller.describe()} cannot delete everything")
        return await self.inner.delete_all(**scope, all=all)

    async def forget(
        self,
        key: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        category: str | None = None,
    ) -> bool:
        scope = self._scope(user_id=user_id, agent_id=agent_id, run_id=run_id, app_id=app_id)
        return await self.inner.forget(key, **scope, category=category)

    async def history(self, memory_id: str) -> list[dict[str, object]]:
        await self._own_any(memory_id)
        return await self.inner.history(memory_id)

    async def entities(self) -> list[Entity]:
        found = await self.inner.entities()
        binding = self.caller.bound
        return [e for e in found if not binding or binding.get(f"{e.kind}_id") == e.name]

    async def delete_entity(self, kind: str, name: str, *, missing_ok: bool = False) -> int:
        """A scoped caller deletes only its own share of the entity: a user's token deleting
        agent ``bot`` removes that user's memories with ``bot``, never another user's."""
        if not self.caller.binding:
            return await self.inner.delete_entity(kind, name, missing_ok=missing_ok)
        if kind not in ("user", "agent", "run", "app"):
            raise InputError(f"an entity is a user, agent, run or app, not {kind!r}")
        gone = await self.inner.delete_all(**self._scope(**{f"{kind}_id": name}))
        if not gone and not missing_ok:
            raise NotFound(f"no memories of {kind} {name!r}")
        return gone

    async def feedback(self, memory_id: str, feedback: str | None) -> MemoryRecord:
        if self.caller.binding:
            await self._own(memory_id)
        return await self.inner.feedback(memory_id, feedback)

    async def reinforce(self, *memory_ids: str) -> list[MemoryRecord]:
        if self.caller.binding:
            for memory_id in memory_ids:
                await self._own(memory_id)
        return await self.inner.reinforce(*memory_ids)

    async def reinforce_hits(self, hits: Sequence[Hit]) -> None:
        await self.inner.reinforce_hits(hits)  # hits of a search already held to the scope

    async def forget_below(
        self,
        threshold: float,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        category: str | None = None,
        dry_run: bool = False,
        now: dt.datetime | None = None,
    ) -> list[MemoryRecord]:
        scope = self._scope(user_id=user_id, agent_id=agent_id, run_id=run_id, app_id=app_id)
        return await self.inner.forget_below(
            threshold, **scope, category=category, dry_run=dry_run, now=now
        )

    async def archive_expired(self) -> list[MemoryRecord]:
        if self.caller.binding:
            raise Forbidden(f"a token bound to {self.caller.describe()} cannot archive for all")
        return await self.inner.archive_expired()

    async def archived(self, memory_id: str) -> MemoryRecord:
        record = await self.inner.archived(memory_id)
        if not within_binding(self.caller, record.to_dict()):
            raise NotFound(f"no archived memory with id {memory_id!r}")
        return record

    async def restore(self, memory_id: str) -> MemoryRecord:
        if self.caller.binding:
            await self._own_gone(memory_id)
        return await self.inner.restore(memory_id)


class ScopedConversations:
    """A session's transcript as one caller may reach it (see ``check_session``)."""

    def __init__(self, inner: Conversations, caller: Caller) -> None:
        self.inner = inner
        self.caller = caller

    async def load(self, session_id: str, limit: int | None = None) -> list[dict[str, Any]]:
        return await self.inner.load(check_session(self.caller, session_id), limit)

    async def save(self, session_id: str, messages: Sequence[Mapping[str, Any]]) -> int:
        return await self.inner.save(check_session(self.caller, session_id), messages)

    async def reset(self, session_id: str) -> int:
        return await self.inner.reset(check_session(self.caller, session_id))

    def stream(self, session_id: str) -> AsyncIterator[list[dict[str, Any]]]:
        return self.inner.stream(check_session(self.caller, session_id))

    async def window(
        self, session_id: str, page: int, page_size: int
    ) -> tuple[list[dict[str, Any]], int]:
        return await self.inner.window(check_session(self.caller, session_id), page, page_size)
