"""The archive: forgotten memories moved to ``memory/.archive/`` in the vault, and back.

Forgetting never deletes. An archived memory keeps its id, key, times and metadata, written in
the same memory-file format under ``memory/.archive/<its path below memory/>``; the folder is
hidden, so it is never indexed or searched, but it is Markdown in the vault and travels with it
in git. The archive copy is written before the memory leaves its file, so a crash in between
leaves it in both places (restore and archive skip an id that is already there), never in none.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from memcore.core.errors import NotFound
from memcore.core.models import MemoryRecord
from memcore.core.moments import utc_today
from memcore.memory.file_writes import Change, FileEdit, api_event
from memcore.memory.writer import MemoryWriter
from memcore.vault.chunker import memory_file_of
from memcore.vault.history import now
from memcore.vault.memory_format import (
    MemoryFile,
    MemoryItem,
    Scope,
    render_item,
)

ARCHIVE_DIR = "memory/.archive"


def archive_path(rel: str) -> str:
    """Where a memory file's archived items go: memory/x/y.md -> memory/.archive/x/y.md."""
    return f"{ARCHIVE_DIR}/{rel.removeprefix('memory/')}"


def original_path(archived: str) -> str:
    return "memory/" + archived.removeprefix(ARCHIVE_DIR + "/")


class Archive:
    """Moves memories into the archive and restores them, through the writer's safe edits."""

    def __init__(self, writer: MemoryWriter) -> None:
        self.writer = writer
        self.vault = writer.vault

    async def archive(self, records: Sequence[MemoryRecord]) -> list[str]:
        """Move these memories to the archive, one write per file; returns the ids moved."""
        by_file: dict[str, list[MemoryRecord]] = {}
        for r in records:
            by_file.setdefault(r.path, []).append(r)
        moved: list[str] = []
        for rel, group in by_file.items():
            first = group[0]
            scope = Scope(first.user_id, first.agent_id, first.run_id, first.app_id)
            items = [_item_of(r) for r in group]
            await self.writer.edit(
                archive_path(rel), scope, first.category, _appender(items, rel), index=False
            )
            ids = {r.id for r in group}
            moved += await self.writer.edit(rel, None, None, _remover(ids, rel, "ARCHIVE"))
        return moved

    async def restore(self, memory_id: str) -> str:
        """Put an archived memory back in the file it came from, or a deleted one (by the API
        or by a person's edit, as the history recorded it) back in its file, with its id and
        fields; returns that path."""
        try:
            archived, parsed, item = await self._located(memory_id)
        except NotFound:
            return await self._undelete(memory_id)
        rel = original_path(archived)
        await self.writer.edit(rel, parsed.scope, parsed.category, _appender([item], rel, True))
        await self.writer.edit(
            archived, None, None, _remover({memory_id}, archived, None), index=False
        )
        return rel

    async def _undelete(self, memory_id: str) -> str:
        event = await self.writer.history.last_delete(memory_id)
        if event is None or not isinstance(event.get("old_memory"), str):
            raise NotFound(f"no archived or deleted memory with id {memory_id!r}")
        rel, text = str(event["path"]), str(event["old_memory"])
        raw = event.get("memory")
        fields: dict[str, Any] = raw if isinstance(raw, dict) else {}
        scope = Scope.of(fields)
        meta = fields.get("metadata")
        item = MemoryItem(
            memory_id, text, fields.get("key"), str(fields.get("created") or now()), now(),
            meta if isinstance(meta, dict) else {},
        )  # fmt: skip
        category = str(fields.get("category") or "core")
        await self.writer.edit(rel, scope, category, _appender([item], rel, True))
        return rel

    async def peek(self, memory_id: str) -> MemoryRecord:
        """An archived memory as a record (its path is the file it came from)."""
        archived, parsed, item = await self._located(memory_id)
        record = parsed.record(item, original_path(archived))
        return dataclasses.replace(record, start_line=0, end_line=0)  # its lines are elsewhere

    async def _located(self, memory_id: str) -> tuple[str, MemoryFile, MemoryItem]:
        found = await asyncio.to_thread(self._find, memory_id)
        if found is None:
            raise NotFound(f"no archived memory with id {memory_id!r}")
        return found

    def _find(self, memory_id: str) -> tuple[str, MemoryFile, MemoryItem] | None:
        root = self.vault / ARCHIVE_DIR
        for path in sorted(root.rglob("*.md")) if root.is_dir() else []:
            rel = path.relative_to(self.vault).as_posix()
            parsed = _parse(path, rel)
            item = parsed.find(memory_id) if parsed else None
            if parsed is not None and item is not None:
                return rel, parsed, item
        return None


def _parse(path: Path, rel: str) -> MemoryFile | None:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return memory_file_of(rel, text)


def _item_of(r: MemoryRecord) -> MemoryItem:
    return MemoryItem(r.id, r.text, r.key, r.created, r.updated, r.metadata,
                      expires=r.expiration_date, immutable=r.immutable)  # fmt: skip


def _appender(items: Sequence[MemoryItem], rel: str, restoring: bool = False) -> Change:
    def change(f: MemoryFile) -> FileEdit:
        edit = FileEdit()
        today = utc_today()
        for item in items:
            if restoring and item.expires is not None and item.expires < today:
                item = dataclasses.replace(item, expires=None)  # asked back: it expires no more
            if f.find(item.id) is None:  # already there after an interrupted move
                edit.append.append(render_item(item))
                if restoring:
                    edit.events.append(api_event(item.id, "RESTORE", None, item.text, rel))
            edit.ids.append(item.id)
        return edit

    return change


def _remover(ids: set[str], rel: str, event: str | None) -> Change:
    def change(f: MemoryFile) -> FileEdit:
        gone = [i for i in f.items if i.id in ids]
        edit = FileEdit(replace={i.id: [] for i in gone}, ids=[i.id for i in gone])
        if event:
            edit.events = [api_event(i.id, event, i.text, None, rel) for i in gone]
        return edit

    return change
