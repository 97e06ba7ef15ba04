"""Memory switched off (``memory.adapter = "none"`` or ``memory.enabled = false``; seed 002's
NoopMemory): writes are accepted and dropped, reads are empty, and nothing is written
anywhere. Arguments are taken as the port defines them and not looked at."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memcore.core.errors import NotFound
from memcore.core.models import Entity, MemoryRecord
from memcore.memory.adding import NewMemory
from memcore.memory.port import Memory, Message


class NoopMemory(Memory):
    kind = "none"

    async def add(self, content: str | Sequence[Message], **_: Any) -> list[MemoryRecord]:
        return []

    async def add_batch(self, memories: Sequence[NewMemory]) -> list[MemoryRecord]:
        return []

    async def load(self, memories: Sequence[NewMemory]) -> int:
        return 0

    async def store(self, key: str, content: str, *_: Any, **__: Any) -> MemoryRecord | None:
        return None

    async def write_memory(self, content: str, file: str = "MEMORY.md") -> str | None:
        return None

    async def get_memories_by_tag(self, tag: str, limit: int = 100) -> list[MemoryRecord]:
        return []

    async def get(self, memory_id: str, **_: Any) -> MemoryRecord:
        raise NotFound(f"no memory with id {memory_id!r} (memory is disabled)")

    async def get_all(self, **_: Any) -> list[MemoryRecord]:
        return []

    async def count(self, **_: Any) -> int:
        return 0

    async def search(self, query: str, **_: Any) -> list[MemoryRecord]:
        return []

    async def update(self, memory_id: str, *_: Any, **__: Any) -> MemoryRecord:
        return await self.get(memory_id)

    async def delete(self, memory_id: str) -> None:
        await self.get(memory_id)

    async def delete_all(self, **_: Any) -> int:
        return 0

    async def forget(self, key: str, **_: Any) -> bool:
        return False

    async def history(self, memory_id: str) -> list[dict[str, object]]:
        return []

    async def entities(self) -> list[Entity]:
        return []

    async def feedback(self, memory_id: str, feedback: str | None) -> MemoryRecord:
        return await self.get(memory_id)

    async def forget_below(self, threshold: float, **_: Any) -> list[MemoryRecord]:
        return []
