"""Adds: new memories written into their memory files and indexed, a round per file.

Adds to one file from concurrent callers are grouped (one write, one index run for all that
wait); an add over many files writes them all, then indexes once; long lists page over files
of their own; an upsert by ``key`` replaces that key's memory; an idempotency key makes a
retried call return what the first one added, wherever a crash left it. A batch is applied
whole or not at all.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from memcore.core.channel import via
from memcore.core.errors import (
    ImmutableMemory,
    InputError,
    KeyReused,
    MemcoreError,
    VaultWriteError,
    WriteConflict,
)
from memcore.core.models import TURNS_CATEGORY, MemoryQuery, MemoryRecord
from memcore.core.path_locks import PathLocks
from memcore.core.vectors import Vector
from memcore.index.indexer import Indexer
from memcore.memory.file_writes import (
    WRITE_ATTEMPTS,
    Change,
    FileEdit,
    FileWrites,
    Written,
    api_event,
)
from memcore.memory.supplied import supply
from memcore.storage.base import Store
from memcore.vault.chunker import memory_embed_text, memory_file_of
from memcore.vault.history import (
    Appended,
    ByRequest,
    HistoryEvent,
    HistoryLog,
    now,
)
from memcore.vault.memory_format import (
    MemoryFile,
    MemoryItem,
    Scope,
    new_id,
    render_item,
)
from memcore.vault.pages import PAGE_ITEMS, list_pages, open_page, page_of, page_path
from memcore.vault.safe_file import (
    read_or_none,
)

UNPAGED = ("daily", TURNS_CATEGORY)  # a file per day; transcripts page themselves


MANY_FILES = 8  # an add touching more files than this writes them all, then indexes once


WRITERS = 4  # files such an add writes at a time (their fsyncs overlap)
HELD_FILES = 256  # files such an add holds against other nodes at a time (one statement)


# An idempotency key as recorded: the caller's own key (1-256 characters) behind its identity
# (memory/access.request_key), so a little longer than what a caller may give.
MAX_REQUEST = 320
log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class NewMemory:
    """One memory to add (``add_batch`` takes many)."""

    content: str
    scope: Scope = field(default_factory=Scope)
    category: str = "core"
    key: str | None = None
    metadata: Mapping[str, object] | None = None
    id: str = field(default_factory=new_id)
    # kept from elsewhere (an import); a new memory is created and updated now
    created: str | None = None
    updated: str | None = None
    file: str | None = None  # the memory file it goes to (default: ``file_for`` its scope)
    expires: str | None = None  # an ISO date (Mem0's expiration_date)
    immutable: bool = False
    # the caller's own vector for it, and the model that made it (see memory/supplied.py)
    vector: Vector | None = field(default=None, compare=False, repr=False)
    vector_model: str | None = None


Queued = tuple[list["NewMemory"], "asyncio.Future[list[MemoryRecord]]", str | None]


def fingerprint(memories: Sequence[NewMemory]) -> str:
    """What a keyed add asks for (every field but the ids it is given), as a digest: the
    same idempotency key with another fingerprint is another request (KeyReused)."""
    asked = [
        [m.content, m.scope.to_dict(), m.category, m.key, dict(m.metadata or {}), m.created,
         m.file, m.expires, m.immutable]
        for m in memories
    ]  # fmt: skip
    for row, m in zip(asked, memories, strict=True):
        if m.vector is not None:  # (only then: the fingerprints logged before vectors hold)
            row += [hashlib.sha256(m.vector.tobytes()).hexdigest(), m.vector_model]
    text = json.dumps(asked, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class Writer(Protocol):
    """What adds need of the MemoryWriter they serve."""

    vault: Path
    store: Store
    indexer: Indexer
    history: HistoryLog
    files: FileWrites

    def checked(self, m: NewMemory) -> NewMemory: ...

    def file_for(self, scope: Scope, category: str, day: dt.date | None = None) -> str: ...

    async def records(
        self, ids: Sequence[str], missing_ok: bool = False, writing: bool = False
    ) -> list[MemoryRecord]: ...

    async def all_present(self, ids: Sequence[str]) -> bool: ...

    async def delete_many(self, records: Sequence[MemoryRecord]) -> int: ...


class Adds:
    """The add half of a MemoryWriter. Safe for many concurrent callers."""

    def __init__(self, writer: Writer) -> None:
        self.writer = writer
        self.vault = writer.vault
        self.store = writer.store
        self.indexer = writer.indexer
        self.history = writer.history
        self.files = writer.files
        self._queued: dict[str, list[Queued]] = {}
        self._requests = PathLocks()  # one call per idempotency key at a time
        self._draining: set[str] = set()
        self._drains: set[asyncio.Task[None]] = set()

    async def add_batch(
        self, memories: Sequence[NewMemory], request: str | None = None, *, records: bool = True
    ) -> list[MemoryRecord]:
        """Add many memories: one write and one index run per file they land in. Adds to one
        file from concurrent callers are grouped the same way (one write for all waiting).
        ``request``, an idempotency key: a call with a key an earlier call already applied
        returns that call's memories and writes nothing. ``records=False`` (a load that only
        counts, without a key): an add over many files answers [] and reads back only whether
        every memory is in the index, not their records."""
        if not memories:
            return []
        checked = [self.writer.checked(m) for m in memories]
        if request is None:
            return await self._add_checked(checked, None, read_back=records)
        if not isinstance(request, str) or not request.strip() or len(request) > MAX_REQUEST:
            raise InputError("an idempotency key is 1-256 characters of text")
        print_ = fingerprint(checked)
        async with self._requests.hold([request]):
            known = await self.history.by_request(request)
            if known and known.fingerprints and print_ not in known.fingerprints:
                raise KeyReused(
                    "this idempotency key was used with another request (other content, scope "
                    "or metadata): use a new key for a new request"
                )
            stamped = f"{request}\n{print_}"  # the log keeps both (HistoryEvent.to_dict)
            if known:
                return await self._replay(checked, stamped, known)
            return await self._add_planned(checked, stamped)

    async def _add_planned(self, todo: list[NewMemory], request: str) -> list[MemoryRecord]:
        """``_add_checked`` behind its plan; a refused write takes its plan back too, so the
        vault is byte for byte what it was."""
        plan = await self._plan(todo, request)
        try:
            return await self._add_checked(todo, request)
        except Exception:
            await self.history.retract(plan)
            raise

    async def _plan(self, checked: Sequence[NewMemory], request: str) -> Appended | None:
        """Log what a keyed add is about to write (PENDING, before any file changes), so a
        retry after a crash at any point finds it. An upsert by ``key`` needs none: doing it
        again changes nothing."""
        if any(m.key is not None for m in checked):
            return None
        at = now()
        events = []
        for n, m in enumerate(checked):
            rel = m.file or self.writer.file_for(m.scope, m.category)
            events.append(
                HistoryEvent(
                    m.id, "PENDING", None, None, "api", at, rel, request, first=not n, via=via()
                )
            )
        return await self.history.append(events)

    async def _replay(
        self, checked: list[NewMemory], request: str, known: ByRequest
    ) -> list[MemoryRecord]:
        """A retried keyed add: the memories of the first call, wherever its write got to.
        A memory in the index is answered; one in its file but not yet indexed (the process
        died after the Markdown write) is logged as the API's and indexed; one that never
        reached its file is written now, under the id it was meant to have. A memory the
        first call logged and someone removed since stays removed."""
        plan = known.pending or known.logged
        ids = list(plan)
        found = {r.id: r for r in await self.writer.records(ids, missing_ok=True)}
        absent = {mid: plan[mid] for mid in ids if mid not in found}
        on_disk = await asyncio.to_thread(_in_files, self.vault, absent) if absent else {}
        # Log the API's ADD of what landed unlogged: before indexing it (the index run must
        # not call it a person's), or where a catch-up indexed it without a word (a new file)
        unlogged = {m: r.text for m, r in found.items() if m not in known.logged}
        silent = {m: t for m, t in unlogged.items() if not await self.history.of(m)}
        texts = silent | {m: t for m, (t, _) in on_disk.items() if m not in known.logged}

        def where(mid: str) -> str:  # the page it is on
            return on_disk[mid][1] if mid in on_disk else found[mid].path if mid in found else ""

        await self.history.append(
            [
                HistoryEvent(
                    mid, "ADD", None, text, "api", now(), where(mid), request=request, via=via()
                )
                for mid, text in texts.items()
            ]
        )
        if on_disk:
            await self.indexer.index(sorted({page for _, page in on_disk.values()}))
            found |= {r.id: r for r in await self.writer.records(list(on_disk), missing_ok=True)}
        lost = [mid for mid in ids if mid not in found and mid not in known.logged]
        if lost and len(ids) == len(checked) and known.pending:
            todo = [dataclasses.replace(m, id=mid) for m, mid in zip(checked, ids, strict=True)]
            missing = set(lost)
            again = await self._plan(todo, request)  # the whole plan: a crash now is retried
            try:
                written = await self._add_checked([m for m in todo if m.id in missing], request)
            except Exception:
                await self.history.retract(again)
                raise
            found |= {r.id: r for r in written}
        return [found.get(mid) or _as_done(mid) for mid in ids]

    async def _add_checked(
        self,
        checked: list[NewMemory],
        request: str | None,
        many: bool = True,
        read_back: bool = True,
    ) -> list[MemoryRecord]:
        await supply(
            self.store, self.indexer.embedder,
            ((m.category, m.content, m.vector, m.vector_model) for m in checked
             if m.vector is not None),
        )  # fmt: skip
        by_file: dict[str, list[NewMemory]] = {}
        for m in checked:
            by_file.setdefault(m.file or self.writer.file_for(m.scope, m.category), []).append(m)
        if many and len(by_file) > MANY_FILES:
            return await self._add_many(by_file, checked, request, read_back)
        # A write that will wait for the round in progress on its file has its memories
        # embedded meanwhile. (One that goes at once leaves it to its index run, which takes
        # a vector the index has cached instead of running the model.)
        self.indexer.embedder.embed_ahead(
            [
                memory_embed_text(m.category, m.content)
                for rel, group in by_file.items()
                if rel in self._draining
                for m in group
                if m.vector is None
            ]
        )
        loop = asyncio.get_running_loop()
        waits = []
        for rel, group in by_file.items():
            done: asyncio.Future[list[MemoryRecord]] = loop.create_future()
            self._queued.setdefault(rel, []).append((group, done, request))
            if rel not in self._draining:
                self._draining.add(rel)
                self._drains.add(task := asyncio.create_task(self._drain(rel)))
                task.add_done_callback(self._drains.discard)
            waits.append((group, done))
        # Every file's round settles before an answer (a caller told of one file's failure
        # must not find another file's memories appear after it closed the service).
        settled = await asyncio.gather(*(done for _, done in waits), return_exceptions=True)
        failed = next((r for r in settled if isinstance(r, BaseException)), None)
        if failed is not None:
            await self._take_back(waits, settled)
            raise failed
        # The records as the index held them when the write was confirmed: read again, one
        # could already be gone (archived or deleted by another caller), and the add did happen.
        by_id: dict[str, MemoryRecord] = {}
        for (group, _), records in zip(waits, settled, strict=True):
            assert not isinstance(records, BaseException)
            by_id |= {m.id: r for m, r in zip(group, records, strict=True)}
        return [by_id[m.id] for m in checked]

    async def _take_back(
        self,
        waits: Sequence[tuple[list[NewMemory], object]],
        settled: Sequence[list[MemoryRecord] | BaseException],
    ) -> None:
        """A batch is applied whole or not at all: when one file refused its memories, the
        new memories the other files took are deleted again (an upsert's replaced text is not
        brought back: it is kept as the batch left it, as a person would see it)."""
        added = [
            r
            for (group, _), records in zip(waits, settled, strict=True)
            if not isinstance(records, BaseException)
            for m, r in zip(group, records, strict=True)
            if m.key is None
        ]
        with contextlib.suppress(MemcoreError):
            await self.writer.delete_many(added)

    async def _add_many(
        self,
        by_file: Mapping[str, list[NewMemory]],
        checked: list[NewMemory],
        request: str | None,
        read_back: bool = True,
    ) -> list[MemoryRecord]:
        """An add of many scopes at once (a batch over thousands of users): every file it
        touches written once, a few at a time, then all of them indexed in one run and read
        back in one query (without ``read_back``, only counted, and [] answered). All of it
        applied, or none. A memory an editor's stale save dropped meanwhile is added again
        the one-file way."""
        requests = {m.id: request for m in checked} if request else {}
        ids: dict[str, str] = {}  # NewMemory.id -> its memory's id (an upsert: the replaced)
        pages: dict[str, str] = {}
        writes: list[Written] = []
        failed = await self._write_pages(by_file, requests, writes, ids, pages)
        logged = None
        try:  # the history of every file in one append (not one a file)
            if failed is None:  # a memory put back after a stale save: its ADD not twice
                events = [e for w in writes for e in w.events]
                logged = await self.history.append(events, unlogged=True)
        except OSError as exc:
            failed = VaultWriteError(f"cannot write {self.history.path.name}: {exc.strerror}")
        if failed is not None:
            await self.files.undo(writes)
            raise failed
        try:
            await self.files.commit(writes)
        except MemcoreError:
            await self.history.retract(logged)  # _commit put the files back already
            raise
        if not read_back and await self.writer.all_present(list(ids.values())):
            return []  # every one is in: none read back, none built
        found = {
            r.id: r
            for r in await self.writer.records(list(ids.values()), missing_ok=True, writing=True)
        }
        lost = [m for m in checked if ids[m.id] not in found]
        gone = await self.history.removed_by_api(ids[m.id] for m in lost)
        again = [m for m in lost if ids[m.id] not in gone]
        if again:
            found |= {
                ids[m.id]: r
                for m, r in zip(again, await self._add_checked(again, request, False), strict=True)
            }
        return [found.get(ids[m.id]) or _as_written(m, ids[m.id], pages[m.id]) for m in checked]

    async def _write_pages(
        self,
        by_file: Mapping[str, list[NewMemory]],
        requests: Mapping[str, str],
        writes: list[Written],
        ids: dict[str, str],
        pages: dict[str, str],
    ) -> BaseException | None:
        """Write every list's memories to its pages, a few files at a time, the pages held
        against other nodes a few hundred at a time (``_add_many``); ``writes``, ``ids`` and
        ``pages`` fill as they go. The first error, or None; the writes made are kept for the
        caller to undo."""
        gate = asyncio.Semaphore(WRITERS)
        limit = self.indexer.settings.index.max_file_bytes
        # the last page of every list, looked at in one go (not a thread hop a file)
        wanted = {
            first: sum(_item_bytes(m) for m in group[:PAGE_ITEMS])
            for first, group in by_file.items()
            if _paged(group[0]) and all(m.key is None for m in group)
        }
        opened = await asyncio.to_thread(
            lambda: {f: open_page(self.vault, f, limit // 2, n) for f, n in wanted.items()}
        )

        async def write(first: str, group: list[NewMemory], held: set[str]) -> None:
            async with gate:
                placed = await self._place(first, list(enumerate(group)), opened.get(first))
                for page, idxs in placed:
                    items = [group[n] for n in idxs]
                    change = _adder(items, page, requests)
                    writes.append(
                        await self.files.write(
                            page, items[0].scope, items[0].category, change, False,
                            held=page in held,
                        )
                    )  # fmt: skip
                    for m, mid in zip(items, writes[-1].ids, strict=True):
                        ids[m.id], pages[m.id] = mid, page

        async def write_some(firsts: list[str]) -> list[BaseException | None]:
            # the pages they will most likely write, held against other nodes in one round
            # trip (not two a file); a page _place opens besides is held on its own
            held = {opened[f][0] if f in opened else f for f in firsts}
            try:
                async with self.store.holding(sorted(held)):
                    return await asyncio.gather(
                        *(write(f, by_file[f], held) for f in firsts), return_exceptions=True
                    )
            except MemcoreError as exc:  # StorageBusy: another node holds one of them
                return [exc]

        firsts = list(by_file)
        for at in range(0, len(firsts), HELD_FILES):
            done = await write_some(firsts[at : at + HELD_FILES])
            failed = next((e for e in done if isinstance(e, BaseException)), None)
            if failed is not None:
                return failed
        return None

    async def _drain(self, rel: str) -> None:
        """Write everything queued for one file, in rounds, until nothing is left."""
        try:
            while batch := self._queued.pop(rel, []):
                items = [m for group, _, _ in batch for m in group]
                requests = {m.id: req for group, _, req in batch for m in group if req}
                try:
                    records = await self._add_to_file(rel, items, requests)
                except Exception as exc:  # every caller in this round gets the error
                    for _, done, _ in batch:
                        if not done.done():
                            done.set_exception(exc)
                    continue
                at = 0
                for group, done, _ in batch:
                    if not done.done():
                        done.set_result(records[at : at + len(group)])
                    at += len(group)
        finally:
            self._draining.discard(rel)

    async def _add_to_file(
        self, rel: str, items: Sequence[NewMemory], requests: Mapping[str, str]
    ) -> list[MemoryRecord]:
        """Write one round of adds to the list of memories whose first page is ``rel`` (or
        to ``rel`` itself, for a file of its own), index it, and see that every memory is in
        the index: one an editor's stale save dropped is added again."""
        ids: dict[int, str] = {}  # item -> the id it has (an upsert: the memory it replaced)
        pages: dict[int, str] = {}
        seen: dict[str, MemoryRecord] = {}
        todo = list(range(len(items)))
        scope, category = items[0].scope, items[0].category
        for attempt in range(WRITE_ATTEMPTS):
            writes: list[Written] = []
            try:
                for page, group in await self._place(rel, [(n, items[n]) for n in todo]):
                    change = _adder([items[n] for n in group], page, requests)
                    again = attempt > 0  # putting back what a stale save dropped: logged once
                    writes.append(
                        await self.files.write(page, scope, category, change, True, again)
                    )
                    for n, mid in zip(group, writes[-1].ids, strict=True):
                        ids.setdefault(n, mid)
                        pages.setdefault(n, page)
            except MemcoreError:
                await self.files.undo(writes)
                raise
            await self.files.commit(writes)
            wanted = [ids[n] for n in todo]
            seen |= {
                r.id: r for r in await self.writer.records(wanted, missing_ok=True, writing=True)
            }
            # An editor that saved a buffer read before our write drops our lines: add again.
            # A memory another caller archived or deleted since is not lost: it stays gone.
            gone = await self.history.removed_by_api(mid for mid in wanted if mid not in seen)
            todo = [n for n in todo if ids[n] not in seen and ids[n] not in gone]
            if not todo:
                return [
                    seen.get(ids[n]) or _as_written(m, ids[n], pages[n])
                    for n, m in enumerate(items)
                ]
        raise WriteConflict(f"{rel} kept losing new memories to other writers")

    async def _place(
        self,
        first: str,
        items: Sequence[tuple[int, NewMemory]],
        opened: tuple[str, int] | None = None,
    ) -> list[tuple[str, list[int]]]:
        """Which page each new memory goes to: (page, items), in page order. A category's
        memories are paged (vault/pages.py): an upsert goes to the page that holds its key,
        the rest to the last page while it has room, then to new pages. ``opened``: the
        last page and its room, when the caller has looked (``open_page``)."""
        if not _paged(items[0][1]):
            return [(first, [n for n, _ in items])]
        placed: dict[str, list[int]] = {}
        rest = []
        for n, m in items:
            home = await self._key_home(m) if m.key is not None else None
            if home is not None:
                placed.setdefault(home, []).append(n)
            else:
                rest.append((n, m))
        if rest:
            limit = self.indexer.settings.index.max_file_bytes
            sizes = [_item_bytes(m) for _, m in rest]
            if opened is None:
                opened = await asyncio.to_thread(
                    open_page, self.vault, first, limit // 2, sum(sizes[:PAGE_ITEMS])
                )
            page, room = opened
            _, number = page_of(page)
            used = 0
            for (n, _), size in zip(rest, sizes, strict=True):
                if room <= 0 or (used and used + size > limit // 2):
                    number, room, used = number + 1, PAGE_ITEMS, 0
                    page = page_path(first, number)
                placed.setdefault(page, []).append(n)
                room, used = room - 1, used + size
        return sorted(placed.items(), key=lambda p: page_of(p[0])[1])

    async def _key_home(self, m: NewMemory) -> str | None:
        """The file that holds the memory under ``m.key`` in its scope and category, if any:
        a page of its list, or a file of the same scope elsewhere (a folder from before ids
        were encoded, a file moved by hand)."""
        query = MemoryQuery(**m.scope.to_dict(), category=m.category, key=m.key, limit=1)
        async with self.store.snapshot(True) as reader:
            found = await reader.memories(query)
        return found[0].path if found else None


def _in_files(vault: Path, where: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Of the memories ``where`` names (id -> the file, or the first page of the list, it was
    written to), those on disk: id -> (text, the page holding it). Pages are read last first,
    where a recent write is (blocking: run in a worker thread)."""
    held: dict[str, tuple[str, str]] = {}
    for first in set(where.values()):
        wanted = {mid for mid, rel in where.items() if rel == first}
        for _, rel in reversed(list_pages(vault, first) or [(1, first)]):
            raw = read_or_none(vault / rel)
            text = raw.decode("utf-8", "replace") if raw is not None else ""
            parsed = memory_file_of(rel, text) if raw is not None else None
            for item in parsed.items if parsed is not None else ():
                if item.id in wanted:
                    held[item.id] = (item.text, rel)
                    wanted.discard(item.id)
            if not wanted:
                break
    return held


def _paged(m: NewMemory) -> bool:
    """Whether a new memory's list is paged (vault/pages.py) or its file is given."""
    return m.file is None and m.category not in UNPAGED


def _item_bytes(m: NewMemory) -> int:
    """About how many bytes a new memory's item takes in its file."""
    return len(m.content.encode("utf-8")) + len(str(m.metadata or "")) + 160


def _as_done(memory_id: str) -> MemoryRecord:
    """A memory an earlier call with the same idempotency key added, since removed."""
    return MemoryRecord(id=memory_id, text="", path="", start_line=0, end_line=0, category="")


def _adder(group: Sequence[NewMemory], rel: str, requests: Mapping[str, str]) -> Change:
    def change(f: MemoryFile) -> FileEdit:
        edit = FileEdit()
        stamp = now()
        pending: dict[str, tuple[int, str]] = {}  # key -> (place in edit.append, id)
        for m in group:
            old = f.find_key(m.key) if m.key is not None else None
            if old is not None:
                if old.immutable and old.text != m.content:
                    raise ImmutableMemory(old.id)
                new = dataclasses.replace(
                    old, text=m.content, metadata=m.metadata or old.metadata, updated=stamp
                )
                if new.text != old.text or m.id in requests:
                    edit.events.append(
                        api_event(old.id, "UPDATE", old.text, new.text, rel, requests.get(m.id))
                    )
                edit.replace[old.id] = render_item(new)
                edit.ids.append(old.id)
                continue
            if f.holds(m.id):  # written by an earlier attempt and still there
                edit.ids.append(m.id)
                continue
            if m.key is not None and m.key in pending:  # the same key twice in one write
                at, first = pending[m.key]
                item = MemoryItem(first, m.content, m.key, stamp, stamp, m.metadata or {},
                                  expires=m.expires, immutable=m.immutable)  # fmt: skip
                edit.append[at] = render_item(item)
                edit.events.append(
                    api_event(first, "UPDATE", None, item.text, rel, requests.get(m.id))
                )
                edit.ids.append(first)
                continue
            created = m.created or stamp
            item = MemoryItem(
                m.id,
                m.content,
                m.key,
                created,
                m.updated or created,
                m.metadata or {},
                expires=m.expires,
                immutable=m.immutable,
            )
            if m.key is not None:
                pending[m.key] = (len(edit.append), m.id)
            edit.append.append(render_item(item))
            edit.events.append(api_event(item.id, "ADD", None, item.text, rel, requests.get(m.id)))
            edit.ids.append(item.id)
        return edit

    return change


def _as_written(m: NewMemory, mid: str, rel: str) -> MemoryRecord:
    """The record of a memory that was written and then removed by another caller before
    this add could read it back from the index."""
    return MemoryRecord(
        id=mid, text=m.content, path=rel, start_line=0, end_line=0, category=m.category,
        user_id=m.scope.user_id, agent_id=m.scope.agent_id, run_id=m.scope.run_id, key=m.key,
        metadata=m.metadata or {},
    )  # fmt: skip
