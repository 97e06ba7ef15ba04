"""Conversations: a session's chat messages and tool-call results as memory items.

A session's transcript is the memory file ``memory/runs/<session>/conversation.md`` (scope
``run_id = session``, category ``conversation``): one list item per turn, in order, its role,
tool-call id and name in the item's fields. Turns are searchable like any memory, and
``as_messages`` turns items back into OpenAI-style chat messages. Reached as
``service.conversations``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from memcore.core.errors import InputError
from memcore.core.models import MemoryQuery, MemoryRecord
from memcore.memory.writer import MemoryWriter, NewMemory
from memcore.vault.memory_format import Scope

CATEGORY = "conversation"
ROLES = ("system", "user", "assistant", "tool")
MAX_TURNS = 100_000


class Conversations:
    def __init__(self, writer: MemoryWriter) -> None:
        self.writer = writer

    async def save(
        self, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> list[MemoryRecord]:
        """Replace the session's transcript with these messages (one write)."""
        turns = [_turn(m, n) for n, m in enumerate(messages)]
        return await self.writer.replace_all(Scope(run_id=session_id), CATEGORY, turns)

    async def load(self, session_id: str, limit: int | None = None) -> list[dict[str, Any]]:
        """The transcript as chat messages, oldest first (the last ``limit`` turns)."""
        return as_messages(await self.retrieve(session_id, limit))

    async def add_message(
        self, session_id: str, role: str, content: str, name: str | None = None
    ) -> MemoryRecord:
        """Append a chat message to the session."""
        (record,) = await self.writer.add_batch(
            [_turn({"role": role, "content": content, "name": name}, 0, session_id)]
        )
        return record

    async def add_tool_result(
        self, session_id: str, tool_call_id: str, content: str, name: str | None = None
    ) -> MemoryRecord:
        """Append a tool call's result to the session."""
        message = {"role": "tool", "content": content, "tool_call_id": tool_call_id, "name": name}
        (record,) = await self.writer.add_batch([_turn(message, 0, session_id)])
        return record

    async def retrieve(self, session_id: str, limit: int | None = None) -> list[MemoryRecord]:
        """The session's items in order: all of them, or the last ``limit``."""
        Scope(run_id=session_id)  # validates the name
        if limit is not None and limit < 1:
            raise InputError("limit must be at least 1 (or None for every turn)")
        query = MemoryQuery(run_id=session_id, category=CATEGORY, limit=MAX_TURNS)
        items = await self.writer.get_all(query)
        return items[-limit:] if limit else items

    async def reset(self, session_id: str) -> int:
        """Forget the session's transcript; how many turns went."""
        items = await self.retrieve(session_id)
        return await self.writer.delete_many(items)


def _turn(message: Mapping[str, Any], n: int, session_id: str | None = None) -> NewMemory:
    if not isinstance(message, Mapping):
        raise InputError(f"message {n} is not an object")
    role = message.get("role")
    if role not in ROLES:
        raise InputError(f"message {n}: role must be one of {', '.join(ROLES)}, got {role!r}")
    content = message.get("content")
    if not isinstance(content, str):
        raise InputError(f"message {n}: content must be text")
    fields: dict[str, object] = {"role": role}
    for name in ("name", "tool_call_id"):
        if message.get(name) is not None:
            fields[name] = str(message[name])
    if role == "tool" and "tool_call_id" not in fields:
        raise InputError(f"message {n}: a tool result needs its tool_call_id")
    fields["kind"] = "tool_result" if role == "tool" else "message"
    scope = Scope(run_id=session_id) if session_id is not None else Scope()
    return NewMemory(content, scope, CATEGORY, None, fields)


def as_messages(items: Sequence[MemoryRecord]) -> list[dict[str, Any]]:
    """OpenAI-style chat messages (role, content, and tool_call_id / name when set)."""
    out = []
    for item in items:
        meta = item.metadata
        message: dict[str, Any] = {"role": meta.get("role", "user"), "content": item.text}
        for name in ("tool_call_id", "name"):
            if meta.get(name) is not None:
                message[name] = meta[name]
        out.append(message)
    return out
