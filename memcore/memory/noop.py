"""Memory switched off (``memory.adapter = "none"`` or ``memory.enabled = false``; seed 002's
NoopMemory): writes are accepted and dropped, reads are empty, and nothing is written
anywhere."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence

from memcore.core.errors import NotFound
from memcore.core.models import Entity, MemoryRecord
from memcore.memory.port import Memory, Message
from memcore.memory.writer import NewMemory
from memcore.storage.base import Vector


class NoopMemory(Memory):
    kind = "none"

    async def add(
        self,
        content: str | Sequence[Message],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        metadata: Mapping[str, object] | None = None,
        category: str = "core",
        key: str | None = None,
        infer: bool = False,
        idempotency_key: str | None = None,
    ) -> list[MemoryRecord]:
        return []

    async def add_batch(self, memories: Sequence[NewMemory]) -> list[MemoryRecord]:
        return []

    async def get(self, memory_id: str, *, review: bool = True) -> MemoryRecord:
        raise NotFound(f"no memory with id {memory_id!r} (memory is disabled)")

    async def get_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        category: str | None = None,
        key: str | None = None,
        tag: str | None = None,
        filters: Mapping[str, object] | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[MemoryRecord]:
        return []

    async def count(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        category: str | None = None,
        filters: Mapping[str, object] | None = None,
    ) -> int:
        return 0

    async def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
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
    ) -> list[MemoryRecord]:
        return []

    async def update(
        self,
        memory_id: str,
        content: str | None = None,
        metadata: Mapping[str, object] | None = None,
    ) -> MemoryRecord:
        return await self.get(memory_id)

    async def delete(self, memory_id: str) -> None:
        await self.get(memory_id)

    async def delete_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        all: bool = False,
    ) -> int:
        return 0

    async def forget(
        self,
        key: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        category: str | None = None,
    ) -> bool:
        return False

    async def history(self, memory_id: str) -> list[dict[str, object]]:
        return []

    async def entities(self) -> list[Entity]:
        return []

    async def feedback(self, memory_id: str, feedback: str | None) -> MemoryRecord:
        return await self.get(memory_id)

    async def forget_below(
        self,
        threshold: float,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        category: str | None = None,
        dry_run: bool = False,
        now: dt.datetime | None = None,
    ) -> list[MemoryRecord]:
        return []
