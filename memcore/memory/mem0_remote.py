"""The mem0 adapter (``memory.adapter = "mem0"``): memories live in a Mem0 server (the hosted
platform, a self-hosted one, or another `memcore serve`), reached through the official
``mem0ai`` client (``pip install mem0ai``). What Mem0 has no notion of (keys, categories
other than the default, FSRS strength, an archive) is refused with a message naming it.

The client is synchronous; each call runs in a worker thread, so the event loop never waits
on the network.
"""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from memcore.core.errors import ConfigError, InputError, MemcoreError, NotFound
from memcore.core.models import Entity, MemoryRecord, scope_ids
from memcore.core.redact import redact_url
from memcore.core.vectors import VectorLike
from memcore.memory.adding import NewMemory
from memcore.memory.port import Memory, Message
from memcore.storage.base import Vector

T = TypeVar("T")
PAGE = 1000


class Mem0Memory(Memory):
    kind = "mem0"

    def __init__(
        self,
        base_url: str,
        api_key: str,
        org_id: str = "",
        project_id: str = "",
        min_score: float = 0.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # a search without a threshold asks for memcore's (search.min_score), never leaving
        # the remote's own default (Mem0's 0.3) to drop what the markdown adapter returns
        self.min_score = min_score
        self._key = api_key
        self._ids = (org_id, project_id)
        self._client: Any = None
        self._opening = asyncio.Lock()

    async def _call(self, fn: Callable[[Any], T]) -> T:
        """``fn(client)`` in a worker thread, the client's errors as memcore's."""
        async with self._opening:
            if self._client is None:
                self._client = await asyncio.to_thread(self._connect)
        try:
            return await asyncio.to_thread(fn, self._client)
        except MemcoreError:
            raise
        except Exception as exc:
            raise self._translated(exc) from exc

    def _connect(self) -> Any:
        # mem0ai reports every call to PostHog unless MEM0_TELEMETRY says no, read once when
        # it is imported: memcore's memory goes to the server it names and nowhere else (a
        # person who wants the telemetry sets MEM0_TELEMETRY=true themselves)
        os.environ.setdefault("MEM0_TELEMETRY", "false")
        try:
            from mem0 import MemoryClient
        except ImportError:
            raise ConfigError(
                "memory.adapter = mem0 needs the official client: pip install mem0ai"
            ) from None
        try:
            client = MemoryClient(api_key=self._key, host=self.base_url)
        except Exception as exc:
            raise self._translated(exc) from exc
        org, project = self._ids
        if org:
            client.org_id = org
        if project:
            client.project_id = project
        return client

    def _translated(self, exc: Exception) -> MemcoreError:
        message = _message(exc)
        kind = type(exc).__name__
        if kind == "MemoryNotFoundError":
            return NotFound(message)
        if kind == "ValidationError" or isinstance(exc, ValueError):
            return InputError(message)
        return MemcoreError(f"the Mem0 server at {redact_url(self.base_url)} failed: {message}")

    async def aclose(self) -> None:
        if self._client is not None:
            await asyncio.to_thread(self._client.client.close)

    # ---- the operations ---------------------------------------------------------------------

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
        if key is not None:
            raise self._refuse("keep memories under a key")
        if category != "core":
            raise self._refuse(f"file memories under a category ({category!r})")
        if idempotency_key is not None:
            raise self._refuse("take an idempotency key")
        if vector is not None:
            raise self._refuse("take a caller's vector (Mem0's platform embeds every text)")
        messages = content if isinstance(content, str) else [dict(m) for m in content]
        scope = _scope(user_id, agent_id, run_id, app_id)
        extra = {k: v for k, v in (("timestamp", created), ("expiration_date", expiration_date),
                                   ("immutable", immutable or None)) if v is not None}  # fmt: skip
        answer = await self._call(
            lambda c: c.add(messages, **scope, metadata=dict(metadata or {}), infer=infer, **extra)
        )
        return [
            _record({**scope, "metadata": dict(metadata or {}), **row})
            for row in _results(answer)
            if row.get("event", "ADD") != "DELETE" and row.get("id")
        ]

    async def add_batch(self, memories: Sequence[NewMemory]) -> list[MemoryRecord]:
        """One add per memory (Mem0 has no batch add), in order; ids are Mem0's own."""
        added: list[MemoryRecord] = []
        for m in memories:
            added += await self.add(
                m.content, **m.scope.to_dict(), metadata=m.metadata, category=m.category,
                key=m.key,
            )  # fmt: skip
        return added

    async def load(self, memories: Sequence[NewMemory]) -> int:
        return len(await self.add_batch(memories))

    async def get(self, memory_id: str, *, review: bool = True) -> MemoryRecord:
        return _record(await self._call(lambda c: c.get(memory_id)))

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
        if key is not None or tag is not None:
            raise self._refuse("list memories by key or tag")
        if show_expired:
            raise self._refuse("list expired memories")
        if offset % limit:
            raise self._refuse("list from an offset that is not a multiple of the limit")
        flt = _filters(_scope(user_id, agent_id, run_id, app_id), category, filters)
        answer = await self._call(
            lambda c: c.get_all(filters=flt, page=offset // limit + 1, page_size=limit)
        )
        return [_record(row) for row in _results(answer)]

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
        flt = _filters(_scope(user_id, agent_id, run_id, app_id), category, filters)
        answer = await self._call(lambda c: c.get_all(filters=flt, page=1, page_size=1))
        return int(answer.get("count", 0)) if isinstance(answer, Mapping) else len(answer)

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
        if tag or path or since or until or query_vector is not None:
            raise self._refuse("search by tag, path, date or query vector")
        if show_expired:
            raise self._refuse("search expired memories")
        flt = _filters(_scope(user_id, agent_id, run_id, app_id), category, filters)
        floor = self.min_score if threshold is None else threshold
        answer = await self._call(
            lambda c: c.search(query, filters=flt, top_k=limit, threshold=floor)
        )
        return [_record(row) for row in _results(answer)][:limit]

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
        if vector is not None:
            raise self._refuse("take a caller's vector (Mem0's platform embeds every text)")
        change: dict[str, Any] = {}
        if content is not None:
            change["text"] = content
        if metadata is not None:
            change["metadata"] = dict(metadata)
        if created is not None:
            change["timestamp"] = created
        if expiration_date is not None:
            change["expiration_date"] = expiration_date or None
        if not change:
            raise InputError("update needs new content, metadata, timestamp or expiration_date")
        await self._call(lambda c: c.update(memory_id, **change))
        return await self.get(memory_id)

    async def delete(self, memory_id: str) -> None:
        await self._call(lambda c: c.delete(memory_id))

    async def delete_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        all: bool = False,
    ) -> int:
        scope = _scope(user_id, agent_id, run_id, app_id)
        if not scope:
            raise self._refuse("delete every memory at once (name a user, agent, run or app)")
        gone = await self.count(**scope_ids(scope))
        await self._call(lambda c: c.delete_all(**scope))
        return gone

    async def history(self, memory_id: str) -> list[dict[str, object]]:
        events = await self._call(lambda c: c.history(memory_id))
        return [dict(e) for e in events] if isinstance(events, list) else []

    async def entities(self) -> list[Entity]:
        answer = await self._call(lambda c: c.users())
        found = [
            Entity(str(e["type"]), str(e["name"]), int(e.get("total_memories", 0)),
                   e.get("created_at"), e.get("updated_at"))
            for e in _results(answer)
            if e.get("type") in ("user", "agent", "run", "app")
        ]  # fmt: skip
        return sorted(found, key=lambda e: (e.kind, e.name))

    async def delete_entity(self, kind: str, name: str, *, missing_ok: bool = False) -> int:
        if kind not in ("user", "agent", "run", "app"):
            raise InputError(f"an entity is a user, agent, run or app, not {kind!r}")
        gone = await self.count(**scope_ids({f"{kind}_id": name}))
        if not gone:
            if missing_ok:
                return 0
            raise NotFound(f"no memories of {kind} {name!r}")
        await self._call(lambda c: c.delete_users(**{f"{kind}_id": name}))
        return gone

    async def feedback(self, memory_id: str, feedback: str | None) -> MemoryRecord:
        await self._call(lambda c: c.feedback(memory_id, feedback))
        return await self.get(memory_id)


def _scope(
    user_id: str | None, agent_id: str | None, run_id: str | None, app_id: str | None
) -> dict[str, str]:
    named = {"user_id": user_id, "agent_id": agent_id, "run_id": run_id, "app_id": app_id}
    return {k: v for k, v in named.items() if v is not None}


def _filters(
    scope: Mapping[str, str], category: str | None, filters: Mapping[str, object] | None
) -> dict[str, object]:
    """Mem0 filters for a scope and metadata conditions; no scope at all means every memory
    that belongs to someone (Mem0 holds none that belongs to nobody)."""
    parts: list[dict[str, object]] = [{k: v} for k, v in scope.items()]
    if category is not None:
        parts.append({"categories": {"in": [category]}})
    if filters:
        parts.append(dict(filters))
    if not parts:
        return {"OR": [{"user_id": "*"}, {"agent_id": "*"}, {"run_id": "*"}, {"app_id": "*"}]}
    return parts[0] if len(parts) == 1 else {"AND": parts}


def _results(answer: Any) -> list[Mapping[str, Any]]:
    rows = answer.get("results", []) if isinstance(answer, Mapping) else answer
    return [r for r in rows if isinstance(r, Mapping)] if isinstance(rows, list) else []


def _record(row: Mapping[str, Any]) -> MemoryRecord:
    """A Mem0 memory as a record: no file or lines, its category Mem0's first one."""
    categories = row.get("categories") or []
    return MemoryRecord(
        id=str(row["id"]), text=str(row.get("memory") or row.get("text") or ""),
        path="", start_line=0, end_line=0,
        category=str(categories[0]) if categories else "core",
        user_id=row.get("user_id"), agent_id=row.get("agent_id"), run_id=row.get("run_id"),
        app_id=row.get("app_id"),
        created=str(row.get("created_at") or ""), updated=str(row.get("updated_at") or ""),
        metadata=dict(row.get("metadata") or {}), score=row.get("score"),
        event=row.get("event"), immutable=row.get("immutable") is True,
        expiration_date=str(row["expiration_date"]) if row.get("expiration_date") else None,
    )  # fmt: skip


def _message(exc: Exception) -> str:
    """The error's own one line: a server's JSON error message when it sent one."""
    text = str(getattr(exc, "message", None) or exc)
    try:
        data = json.loads(text)
    except ValueError:
        return " ".join(text.split()) or type(exc).__name__
    error = data.get("error", data) if isinstance(data, dict) else data
    if isinstance(error, dict):
        error = error.get("message", error)
    return " ".join(str(error).split())
