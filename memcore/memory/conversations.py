"""Conversations: a session's chat messages and tool-call results as memory items.

A session's transcript is a set of memory files under ``memory/runs/<session>/`` (scope
``run_id = session``, category ``conversation``): one list item per turn, in order, a page of
up to ``PAGE_TURNS`` turns per file (``conversation.md``, then ``conversation.p0002.md``, ...)
so that no file grows past what the index takes and an appended turn rewrites one page only.
Messages have OpenAI's chat shape: ``system``, ``user``, ``assistant`` and ``tool`` roles
(and RRClaw's ``tool_result``, kept as it came),
``name``, ``tool_call_id``, an assistant's ``tool_calls``, and ``content`` as text, as a list
of parts, or null. A turn's text is what a person reads and search finds (the content's text,
or the tool calls an assistant made); its role, name and tool-call id ride in the item's
fields, and a message that text cannot say exactly (parts, tool calls, other keys) is kept
whole there too, so ``load`` returns exactly what was saved. ``load`` and ``retrieve`` read
the Markdown itself, so they answer exactly and at once, whatever the index is doing.

``save`` is incremental: turns that are already there, in place, stay as they are (same ids,
no history); a turn that differs is updated, the rest added or deleted. A save that changes
more than ``SYNC_TURNS`` turns returns once its Markdown and history are written and indexes
in the background (searches say so meanwhile); smaller ones are searchable when it returns.
Reached as ``service.conversations``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from memcore.core.errors import InputError
from memcore.core.heap import drop
from memcore.core.models import TURNS_CATEGORY, MemoryRecord
from memcore.memory.adding import NewMemory
from memcore.memory.file_writes import Change, FileEdit, api_event
from memcore.memory.writer import MemoryWriter
from memcore.vault.chunker import memory_file_of
from memcore.vault.files import leads_out
from memcore.vault.history import now
from memcore.vault.memory_format import (
    MemoryFile,
    MemoryItem,
    Scope,
    render_item,
)
from memcore.vault.pages import PAGE_ITEMS, list_pages, page_path
from memcore.vault.safe_file import decode, read_or_none

CATEGORY = TURNS_CATEGORY
# OpenAI's four, and RRClaw's "tool_result" (seed 002's history rows), kept as it came
ROLES = ("system", "user", "assistant", "tool", "tool_result")
TOOL_ROLES = ("tool", "tool_result")
MAX_TURNS = 1_000_000
PAGE_TURNS = PAGE_ITEMS  # turns per transcript file
SYNC_TURNS = 1000  # a save changing more turns than this is indexed in the background


class Conversations:
    def __init__(self, writer: MemoryWriter) -> None:
        self.writer = writer

    def _checked(
        self, message: Mapping[str, Any], n: int, session_id: str | None = None
    ) -> NewMemory:
        turn = _turn(message, n, session_id)  # its errors name the message already
        try:
            return self.writer.checked(turn)
        except InputError as exc:
            raise InputError(f"message {n}: {exc}") from None

    def _check_all(self, messages: Sequence[Mapping[str, Any]]) -> None:
        for n, m in enumerate(messages):
            self._checked(m, n)

    async def _check_transcript(
        self, session_id: str, messages: Sequence[Mapping[str, Any]]
    ) -> Scope:
        """The session's scope, once every message is checked: a bad one (or too many)
        refuses the whole transcript before anything is kept. A long one off the loop."""
        if len(messages) > MAX_TURNS:
            raise InputError(f"a transcript holds at most {MAX_TURNS:,} messages")
        scope = Scope(run_id=session_id)  # validates the name
        if len(messages) > SYNC_TURNS:
            await asyncio.to_thread(self._check_all, messages)
        else:
            self._check_all(messages)
        return scope

    def _page(self, messages: Sequence[Mapping[str, Any]], start: int) -> list[NewMemory]:
        """The turns of the page that begins at message ``start``."""
        window = messages[start : start + PAGE_TURNS]
        return [self._checked(m, n) for n, m in enumerate(window, start)]

    def page_path(self, session_id: str, page: int) -> str:
        """The vault path of a transcript's page (1 is ``conversation.md``)."""
        return page_path(self.writer.file_for(Scope(run_id=session_id), CATEGORY), page)

    async def save(self, session_id: str, messages: Sequence[Mapping[str, Any]]) -> int:
        """Make the session's transcript these messages; how many turns it holds now. Every
        page is written or none; turns already saved in place are left as they are."""
        scope = await self._check_transcript(session_id, messages)
        # a page's turns are built while that page is written (in the writer's worker
        # thread), so a transcript of 200k messages never holds all its turns at once
        starts = range(0, len(messages), PAGE_TURNS)
        have = await self._pages(session_id)
        edits: list[tuple[str, Scope | None, str | None, Change]] = []
        first = self.writer.file_for(scope, CATEGORY)
        for k, start in enumerate(starts, 1):
            rel = page_path(first, k)
            edits.append((rel, scope, CATEGORY, _sync(partial(self._page, messages, start), rel)))
        edits += [(rel, None, None, _sync(list, rel)) for k, rel in have if k > len(starts)]
        await drop(await self.writer.write_files(edits, background_over=SYNC_TURNS))
        return len(messages)

    async def load(self, session_id: str, limit: int | None = None) -> list[dict[str, Any]]:
        """The transcript as chat messages, oldest first (the last ``limit`` turns)."""
        return as_messages(await self.retrieve(session_id, limit))

    async def add_message(
        self,
        session_id: str,
        role: str,
        content: str | list[dict[str, Any]] | None,
        name: str | None = None,
        tool_calls: list[dict[str, Any]] | None = None,
    ) -> MemoryRecord | None:
        """Append a chat message to the session: ``content`` as text or a list of parts (or
        None beside ``tool_calls``, an assistant's calls). Fields left None are not part of
        the message. None: memory is switched off."""
        return await self._append(
            session_id, _message(role=role, content=content, name=name, tool_calls=tool_calls)
        )

    async def add_tool_result(
        self, session_id: str, tool_call_id: str, content: str, name: str | None = None
    ) -> MemoryRecord | None:
        """Append a tool call's result to the session (None: memory is switched off)."""
        message = _message(role="tool", content=content, tool_call_id=tool_call_id, name=name)
        return await self._append(session_id, message)

    async def _append(self, session_id: str, message: Mapping[str, Any]) -> MemoryRecord | None:
        turn = self._checked(message, 0, session_id)
        page, held = 1, 0  # the last page holding turns (pages a shorter save emptied stay)
        for k, rel in reversed(await self._pages(session_id)):
            page, held = k, len(await self._read_page(rel))
            if held:
                break
        if held >= PAGE_TURNS:
            page += 1
        (record,) = await self.writer.add_batch(
            [NewMemory(turn.content, turn.scope, CATEGORY, None, turn.metadata,
                       file=self.page_path(session_id, page))]
        )  # fmt: skip
        return record

    async def retrieve(self, session_id: str, limit: int | None = None) -> list[MemoryRecord]:
        """The session's items in order, as its Markdown holds them now: all of them, or the
        last ``limit``."""
        Scope(run_id=session_id)  # validates the name
        if limit is not None and limit < 1:
            raise InputError("limit must be at least 1 (or None for every turn)")
        out: list[MemoryRecord] = []
        for _, rel in reversed(await self._pages(session_id)):
            out[:0] = await self._read_page(rel)
            if limit and len(out) >= limit:
                break
        return out[-limit:] if limit else out

    def stream(self, session_id: str) -> AsyncIterator[list[dict[str, Any]]]:
        """The whole transcript as chat messages, a page file at a time (oldest first): a
        reader of a 200k-message transcript holds one page, not all of it. The name is
        checked now, before anything is read."""
        Scope(run_id=session_id)

        vault = self.writer.vault

        async def pages() -> AsyncIterator[list[dict[str, Any]]]:
            for _, rel in await self._pages(session_id):  # read and made in a worker thread
                yield await asyncio.to_thread(_messages_of, vault, rel)

        return pages()

    async def window(
        self, session_id: str, page: int, page_size: int
    ) -> tuple[list[dict[str, Any]], int]:
        """Page ``page`` (from 1) of ``page_size`` messages, oldest first, and how many the
        transcript holds: the pages' turns are counted from their text (cheap), and only the
        page files the window falls in are read."""
        Scope(run_id=session_id)
        if page < 1 or page_size < 1:
            raise InputError("page and page_size start at 1")
        files = [rel for _, rel in await self._pages(session_id)]
        counts = await asyncio.to_thread(
            lambda: [_turns_in(self.writer.vault / rel) for rel in files]
        )
        start, end = (page - 1) * page_size, page * page_size
        out: list[dict[str, Any]] = []
        at = 0
        for rel, n in zip(files, counts, strict=True):
            if at + n > start and at < end and n:
                messages = await asyncio.to_thread(_messages_of, self.writer.vault, rel)
                out += messages[max(start - at, 0) : end - at]
            at += n
        return out, at

    async def reset(self, session_id: str) -> int:
        """Forget the session's transcript; how many turns went."""
        items = await self.retrieve(session_id)
        return await self.writer.delete_many(items)

    async def _pages(self, session_id: str) -> list[tuple[int, str]]:
        """The transcript's pages on disk: (page number, vault path), in order."""
        first = self.page_path(session_id, 1)
        follow = self.writer.indexer.settings.index.follow_links
        if not follow and leads_out(self.writer.vault, first.rsplit("/", 1)[0]):
            return []  # a link out of the vault: read only with index.follow_links, as notes
        return await asyncio.to_thread(list_pages, self.writer.vault, first)

    async def _read_page(self, rel: str) -> list[MemoryRecord]:
        return await asyncio.to_thread(_records_of, self.writer.vault, rel)


_ITEM = re.compile(rb"^- ", re.M)  # a turn starts a top-level list item; its next lines indent


def _turns_in(path: Path) -> int:
    """How many turns a transcript page holds, from its text (no parse): its list items."""
    data = read_or_none(path)
    return len(_ITEM.findall(data)) if data is not None else 0


def _messages_of(vault: Path, rel: str) -> list[dict[str, Any]]:
    return as_messages(_records_of(vault, rel))


def _records_of(vault: Path, rel: str) -> list[MemoryRecord]:
    """The memories of one memory file as records (blocking)."""
    data = read_or_none(vault / rel)
    f = memory_file_of(rel, decode(data, rel)) if data is not None else None
    return [f.record(i, rel) for i in f.items] if f is not None else []


def _sync(make_turns: Callable[[], Sequence[NewMemory]], rel: str) -> Change:
    """A change that makes a page hold exactly the turns ``make_turns`` gives (built when the
    change is applied): a turn already in its place stays as it is, one that differs is
    updated in place, the rest added or deleted."""

    def change(f: MemoryFile) -> FileEdit:
        turns = make_turns()
        stamp = now()
        edit = FileEdit()
        for n, m in enumerate(turns):
            old = f.items[n] if n < len(f.items) else None
            meta = m.metadata or {}
            if old is not None and old.text == m.content and dict(old.metadata) == meta:
                edit.ids.append(old.id)
                continue
            if old is not None:
                new = MemoryItem(old.id, m.content, None, old.created or stamp, stamp, meta)
                edit.replace[old.id] = render_item(new)
                edit.events.append(api_event(old.id, "UPDATE", old.text, m.content, rel, at=stamp))
                edit.ids.append(old.id)
                continue
            item = MemoryItem(m.id, m.content, None, stamp, stamp, meta)
            edit.append.append(render_item(item))
            edit.events.append(api_event(item.id, "ADD", None, item.text, rel, at=stamp))
            edit.ids.append(item.id)
        for old in f.items[len(turns) :]:
            edit.replace[old.id] = []
            edit.events.append(api_event(old.id, "DELETE", old.text, None, rel, at=stamp))
        return edit

    return change


class NoConversations(Conversations):
    """Memory switched off (``memory.adapter = "none"``): a transcript or message is checked
    as always (a bad one is still an error), then dropped. Nothing is written, and every
    session reads as empty."""

    async def save(self, session_id: str, messages: Sequence[Mapping[str, Any]]) -> int:
        await self._check_transcript(session_id, messages)
        return 0

    async def _append(self, session_id: str, message: Mapping[str, Any]) -> MemoryRecord | None:
        self._checked(message, 0, session_id)
        return None

    async def reset(self, session_id: str) -> int:
        Scope(run_id=session_id)
        return 0

    async def _pages(self, session_id: str) -> list[tuple[int, str]]:
        return []


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
    fields["kind"] = "tool_result" if role in TOOL_ROLES else "message"
    if not _plain(message):
        fields["message"] = dict(message)  # made plain JSON by the writer's check
    scope = Scope(run_id=session_id) if session_id is not None else Scope()
    return NewMemory(text, scope, CATEGORY, None, fields)


def _message(**fields: Any) -> dict[str, Any]:
    """A chat message of the fields given, without those left None."""
    return {k: v for k, v in fields.items() if v is not None}


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
