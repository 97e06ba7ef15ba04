"""Conversations: a session's chat messages and tool-call results as memory items.

A session's transcript is the memory file ``memory/runs/<session>/conversation.md`` (scope
``run_id = session``, category ``conversation``): one list item per turn, in order. Messages
have OpenAI's chat shape: ``system``, ``user``, ``assistant`` and ``tool`` roles, ``name``,
``tool_call_id``, an assistant's ``tool_calls``, and ``content`` as text, as a list of parts, or
null. A turn's text is what a person reads and search finds (the content's text, or the tool
calls an assistant made); its role, name and tool-call id ride in the item's fields, and a
message that text cannot say exactly (parts, tool calls, other keys) is kept whole there too,
so ``load`` returns exactly what was saved. Reached as ``service.conversations``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from memcore.core.errors import InputError
from memcore.core.models import TURNS_CATEGORY, MemoryQuery, MemoryRecord
from memcore.memory.writer import MemoryWriter, NewMemory
from memcore.vault.memory_format import Scope

CATEGORY = TURNS_CATEGORY
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
    text = message_text(message, n)
    fields: dict[str, object] = {"role": role}
    for name in ("name", "tool_call_id"):
        value = message.get(name)
        if value is not None:
            if not isinstance(value, str):
                raise InputError(f"message {n}: {name} must be text")
            fields[name] = value
    if role == "tool" and "tool_call_id" not in fields:
        raise InputError(f"message {n}: a tool result needs its tool_call_id")
    fields["kind"] = "tool_result" if role == "tool" else "message"
    if not _plain(message):
        try:
            fields["message"] = json.loads(json.dumps(dict(message), allow_nan=False))
        except (TypeError, ValueError) as exc:
            raise InputError(f"message {n} is not JSON: {exc}") from None
    scope = Scope(run_id=session_id) if session_id is not None else Scope()
    return NewMemory(text, scope, CATEGORY, None, fields)


def message_text(message: Mapping[str, Any], n: int = 0) -> str:
    """A message's text for people and search: its content (the text parts of a list), or
    the tool calls an assistant made. Raises InputError for a message with neither."""
    content = message.get("content")
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        text = "\n".join(
            str(p.get("text"))
            for p in content
            if isinstance(p, Mapping) and p.get("type") == "text"
        )
    elif content is None:
        text = ""
    else:
        raise InputError(f"message {n}: content must be text, a list of parts or null")
    calls = message.get("tool_calls")
    if calls is not None:
        if not isinstance(calls, list):
            raise InputError(f"message {n}: tool_calls must be a list")
        said = [_call_text(c, n) for c in calls]
        text = "\n".join([t for t in [text.strip() and text, *said] if t])
    if not text.strip():
        raise InputError(f"message {n} has no text and no tool calls")
    return text


def _call_text(call: object, n: int) -> str:
    function = call.get("function") if isinstance(call, Mapping) else None
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        raise InputError(f"message {n}: a tool call needs function.name")
    return f"called {function['name']}({function.get('arguments') or ''})"


def _plain(message: Mapping[str, Any]) -> bool:
    """A message the item's text and fields say exactly: text content, no tool calls, no
    other keys."""
    return isinstance(message.get("content"), str) and set(message) <= {
        "role", "content", "name", "tool_call_id",
    }  # fmt: skip


def as_messages(items: Sequence[MemoryRecord]) -> list[dict[str, Any]]:
    """The chat messages the items were saved from, exactly (role, content, and name,
    tool_call_id, tool_calls and the rest when the message had them)."""
    out = []
    for item in items:
        meta = item.metadata
        whole = meta.get("message")
        if isinstance(whole, dict):
            out.append(dict(whole))
            continue
        message: dict[str, Any] = {"role": meta.get("role", "user"), "content": item.text}
        for name in ("name", "tool_call_id"):
            if meta.get(name) is not None:
                message[name] = meta[name]
        out.append(message)
    return out
