"""A throwaway session's transcript, kept in this process only: nothing is written to the
vault or the index, and it is gone when the process ends (or on ``reset``). The same checks
as a saved transcript (a bad message is the same one-line error) and the same messages back,
exactly; a session to keep is saved with ``service.conversations`` instead. Reached as
``service.scratch``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from memcore.core.errors import InputError, NotSupported
from memcore.core.models import MemoryRecord
from memcore.memory.conversations import MAX_TURNS, PAGE_TURNS, Conversations
from memcore.vault.memory_format import Scope


class ScratchConversations(Conversations):
    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._sessions: dict[str, list[dict[str, Any]]] = {}

    async def save(self, session_id: str, messages: Sequence[Mapping[str, Any]]) -> int:
        await self._check_transcript(session_id, messages)
        self._sessions[session_id] = _copied(messages)
        return len(messages)

    async def _append(self, session_id: str, message: Mapping[str, Any]) -> MemoryRecord | None:
        turns = self._sessions.get(session_id, [])
        if len(turns) >= MAX_TURNS:
            raise InputError(f"a transcript holds at most {MAX_TURNS:,} messages")
        self._checked(message, len(turns), session_id)
        self._sessions[session_id] = [*turns, *_copied([message])]
        return None  # not a memory of the vault: it has no id or file

    async def load(self, session_id: str, limit: int | None = None) -> list[dict[str, Any]]:
        Scope(run_id=session_id)
        if limit is not None and limit < 1:
            raise InputError("limit must be at least 1 (or None for every turn)")
        turns = self._sessions.get(session_id, [])
        return [dict(m) for m in (turns[-limit:] if limit else turns)]

    async def retrieve(self, session_id: str, limit: int | None = None) -> list[MemoryRecord]:
        raise NotSupported("a scratch session's turns are not memories: load its messages")

    def stream(self, session_id: str) -> AsyncIterator[list[dict[str, Any]]]:
        Scope(run_id=session_id)
        turns = list(self._sessions.get(session_id, []))

        async def pages() -> AsyncIterator[list[dict[str, Any]]]:
            for start in range(0, len(turns), PAGE_TURNS):
                yield [dict(m) for m in turns[start : start + PAGE_TURNS]]

        return pages()

    async def window(
        self, session_id: str, page: int, page_size: int
    ) -> tuple[list[dict[str, Any]], int]:
        Scope(run_id=session_id)
        if page < 1 or page_size < 1:
            raise InputError("page and page_size start at 1")
        turns = self._sessions.get(session_id, [])
        start = (page - 1) * page_size
        return [dict(m) for m in turns[start : start + page_size]], len(turns)

    async def reset(self, session_id: str) -> int:
        Scope(run_id=session_id)
        return len(self._sessions.pop(session_id, []))


def _copied(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The messages as plain JSON, as a saved transcript's Markdown holds them: no object of
    the caller's is kept."""
    out: list[dict[str, Any]] = json.loads(json.dumps(list(messages), ensure_ascii=False))
    return out
