"""The memory port (seed 000): the Mem0-style operations every front calls, whatever holds
the memories. Adapters: ``MemoryApi`` (markdown: the vault, indexed here; operations.py),
``Mem0Memory`` (a Mem0 server; mem0_remote.py) and ``NoopMemory`` (memory switched off).

Every operation here refuses by default, with a message naming the adapter and what it cannot
do; an adapter overrides what it can. A front never needs to know which adapter it talks to.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from memcore.core.errors import NotSupported
from memcore.core.models import Entity, Hit, MemoryRecord
from memcore.core.vectors import VectorLike

if TYPE_CHECKING:
    from memcore.memory.adding import NewMemory
    from memcore.storage.base import Vector

Message = Mapping[str, Any]


class Memory:
    """The operations on memories. ``kind`` names the adapter (``memory.adapter``)."""

    kind = "markdown"

    async def aclose(self) -> None:
        """Let go of connections (a remote adapter's client)."""
        return None

    def _refuse(self, what: str) -> NotSupported:
        return NotSupported(f"memory.adapter = {self.kind} cannot {what}")

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
        raise self._refuse("add memories")

    async def add_batch(self, memories: Sequence[NewMemory]) -> list[MemoryRecord]:
        raise self._refuse("add a batch of memories")

    async def load(self, memories: Sequence[NewMemory]) -> int:
        raise self._refuse("add a batch of memories")

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
        """RRClaw's store: the memory under ``key`` in this scope and category, inserted or
        replaced (None: memory is switched off and nothing was kept)."""
        raise self._refuse("store a memory under a key")

    async def write_memory(self, content: str, file: str = "MEMORY.md") -> str | None:
        """Seed 003's write_memory: Markdown appended to a vault file (None: memory is
        switched off and nothing was written)."""
        raise self._refuse("append Markdown to a vault file (write_memory)")

    async def get_memories_by_tag(self, tag: str, limit: int = 100) -> list[MemoryRecord]:
        """Seed 003's listing by tag: the memories and notes that carry it, newest first."""
        raise self._refuse("list memories by tag")

    async def get(self, memory_id: str, *, review: bool = True) -> MemoryRecord:
        raise self._refuse("read a memory")

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
        raise self._refuse("list memories")

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
        raise self._refuse("count memories")

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
        raise self._refuse("search memories")

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
        raise self._refuse("update a memory")

    async def delete(self, memory_id: str) -> None:
        raise self._refuse("delete a memory")

    async def delete_many(self, memory_ids: Sequence[str]) -> int:
        """Forget these memories in one call: every id is checked first (one unknown or
        not the caller's: NotFound, and nothing is deleted); how many went. The markdown
        adapter writes all their files or none; a remote one deletes them one by one."""
        ids = list(dict.fromkeys(memory_ids))
        for memory_id in ids:
            await self.get(memory_id, review=False)
        for memory_id in ids:
            await self.delete(memory_id)
        return len(ids)

    async def delete_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        all: bool = False,
    ) -> int:
        raise self._refuse("delete memories")

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
        raise self._refuse("forget a memory by key")

    async def history(self, memory_id: str) -> list[dict[str, object]]:
        raise self._refuse("show a memory's history")

    async def entities(self) -> list[Entity]:
        raise self._refuse("list users, agents and runs")

    async def delete_entity(self, kind: str, name: str, *, missing_ok: bool = False) -> int:
        raise self._refuse("delete a user, agent or run")

    async def feedback(self, memory_id: str, feedback: str | None) -> MemoryRecord:
        raise self._refuse("take feedback")

    async def reinforce(self, *memory_ids: str) -> list[MemoryRecord]:
        raise self._refuse("reinforce memories (FSRS strength lives in a markdown vault)")

    async def reinforce_hits(self, hits: Sequence[Hit]) -> None:
        """Count search hits put to use (a context block): nothing where strength is not kept."""
        return None

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
        raise self._refuse("archive weak memories (FSRS strength lives in a markdown vault)")

    async def archive_expired(self) -> list[MemoryRecord]:
        """Archive the memories whose expiration date has passed: none where there is no
        archive (a Mem0 server expires its own)."""
        return []

    async def archived(self, memory_id: str) -> MemoryRecord:
        raise self._refuse("keep an archive")

    async def restore(self, memory_id: str) -> MemoryRecord:
        raise self._refuse("restore an archived memory")
