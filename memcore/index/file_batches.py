"""Writing files into the index, a batch at a time: each file read, chunked and embedded
(index/prepare.py), then written whole in a transaction shared with a few others, a person's
edits to its memories logged; files gone from disk dropped. One ``FileBatches`` per Indexer
remembers the versions it wrote last, so that the next write to such a file builds on them."""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Collection, Iterator, Mapping, Sequence
from pathlib import Path

from memcore.core.errors import StorageBusy, StorageError, StorageFull
from memcore.core.lru import LRU
from memcore.core.models import Chunk, DiskFile, FileFailure, FileState, SkippedFile
from memcore.core.path_locks import PathLocks
from memcore.core.settings import Settings
from memcore.embedders.base import EmbeddingRunner
from memcore.index.edits import Before, EditLog, memories_before, memory_texts
from memcore.index.prepare import (
    PreparedFile,
    StoredVersion,
    attach_vectors,
    known_vectors,
    prepare_files,
)
from memcore.index.tails import APPENDABLE_FILES, Appendable
from memcore.index.tally import Tally, embedder_down
from memcore.storage.base import FileRows, IndexWriter, Store, Vector, both
from memcore.vault.chunker import ChunkerConfig
from memcore.vault.files import stat_memory_files
from memcore.vault.history import HistoryLog, changes

log = logging.getLogger(__name__)

STORED_FILES = 64  # memory files whose version written last is remembered (see StoredVersion)
WriteJob = Callable[[IndexWriter], Awaitable[object]]


async def _replace(
    items: Sequence[PreparedFile],
    fresh: Mapping[str, Vector],
    model_id: str,
    root: Path,
    stale: list[str],
    tx: IndexWriter,
) -> None:
    """Write each prepared file with the vectors made for it (``fresh``, by content hash),
    unless it changed on disk since it was read: then another writer's newer version may
    already be in the index, and this older one must not replace it. Checked inside the
    write transaction, so no newer version can commit in between. A vector lives in its
    chunk's row (``cached_vectors`` finds it there); those of a file not written now go to
    the embedding cache, as its next version most likely has those chunks."""
    paths = [root / item.state.path for item in items]
    on_disk = await asyncio.to_thread(lambda: list(map(_disk_stat, paths)))
    files = []
    for item, seen in zip(items, on_disk, strict=True):
        if seen != (item.state.size, item.state.mtime_ns):
            stale.append(item.state.path)
            made = {c.content_hash: fresh[c.content_hash] for c in item.chunks[item.unchanged :]
                    if c.content_hash in fresh}  # fmt: skip
            await tx.cache_vectors(made, model_id)
            continue
        built_on = item.stored or item.base
        stored_hash = built_on.content_hash if built_on is not None else None
        files.append(FileRows(item.state, item.chunks, item.vectors, item.unchanged, stored_hash))
    left = await tx.replace_files(files, model_id)
    stale += left  # appends to a version the index no longer holds: read again, whole


TX_FILES = 64  # files written in one transaction (each whole: never half a file)
TX_CHUNKS = 4096  # ... and chunks, so one transaction stays short


def _groups(prepared: Sequence[PreparedFile]) -> Iterator[list[PreparedFile]]:
    """The prepared files in groups that each go in one write transaction: a batch of small
    files (a batch add over thousands of scopes) commits a few times, not once a file."""
    group: list[PreparedFile] = []
    chunks = 0
    for item in prepared:
        writes = len(item.chunks) - item.unchanged  # the rows it may write
        if group and (len(group) >= TX_FILES or chunks + writes > TX_CHUNKS):
            yield group
            group, chunks = [], 0
        group.append(item)
        chunks += writes
    if group:
        yield group


def _is_memory_file(chunks: Sequence[Chunk]) -> bool:
    return bool(chunks) and "memory" in chunks[0].metadata


def _disk_stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


class FileBatches:
    """Writes batches of files into the index for an Indexer (see the module's docstring)."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        embedder: EmbeddingRunner,
        chunker: ChunkerConfig,
        history: HistoryLog | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.chunker = chunker
        # memory edits made by hand are logged to the history
        self.edits = None if history is None else EditLog(store, history)
        self._paths = PathLocks()
        # the memory files written last, as written: the next write to one builds on it
        self._stored: LRU[str, StoredVersion] = LRU(STORED_FILES)
        # ... and many more, as a few numbers: an append to one is read by its new lines
        self._appendable: LRU[str, Appendable] = LRU(APPENDABLE_FILES)

    async def index_batch(
        self,
        files: Sequence[DiskFile],
        states: dict[str, FileState],
        tally: Tally,
        log_edits: bool = False,
        retries: int = 3,
    ) -> None:
        s = self.settings
        stale: list[str] = []  # changed on disk while being indexed: read them again
        async with self._paths.hold([f.path for f in files]):
            # its own tally: another batch's worker thread may be preparing meanwhile
            mine = Tally(rebuild=tally.rebuild)
            bases = {} if tally.rebuild else self._bases(files, states)
            prepared = await asyncio.to_thread(
                prepare_files, s.vault, s.index, self.chunker, files, states, mine, bases
            )
            tally.unchanged += mine.unchanged
            tally.failed += mine.failed
            tally.warnings += mine.warnings
            touched = mine.touched
            by_path = {f.path: f for f in files}
            skips = [
                SkippedFile(x.path, x.reason, by_path[x.path].size, by_path[x.path].mtime_ns)
                for x in mine.failed
            ]

            async def skip(tx: IndexWriter) -> None:
                await tx.set_skipped(skips)

            if skips:
                await self.write(tally, [x.path for x in skips], skip)

            async def touch(tx: IndexWriter) -> None:
                for state in touched:
                    await tx.touch_file(state)

            if touched:
                await self.write(tally, [t.path for t in touched], touch)
            if not prepared:
                return
            model = self.embedder.model_id
            if not tally.rebuild:  # a rebuild trusts nothing it remembers
                for p in prepared:
                    if p.base is None:
                        self._build_on_stored(p, states.get(p.state.path), model)
            # the memories of the files indexed before, whose changes are a person's edits
            # (of an append, the memories added: the ones before it are as they were)
            afters = {
                p.state.path: memory_texts(p.chunks[p.unchanged if p.base else 0 :])
                for p in prepared
                if log_edits and p.state.path in states
            }
            appends = {p.state.path for p in prepared if p.base is not None}
            # what the index holds for these files, in one snapshot: the vectors it has for
            # their chunks and (to log a person's edits) their memories before this write
            async with self.store.snapshot(writing=True) as reader:
                stored = {p.state.path: p.stored for p in prepared if p.stored is not None}
                known, before = await both(
                    known_vectors(reader, model, prepared),
                    memories_before(
                        reader, {k: v for k, v in afters.items() if k not in appends}, stored
                    ),
                )
            error, fresh = await attach_vectors(self.embedder, prepared, known, tally)
            if error is not None:
                embedder_down(tally, self.embedder, error)
            await self._replace_all(prepared, fresh, before, afters, tally, stale)
        if stale and retries:
            again = await self.on_disk(stale)
            # their states as the index holds them (the writes of this round were not made):
            # with them a person's edit is logged on the retry too, not only on a first try
            async with self.store.snapshot(writing=True) as reader:
                held = await reader.file_states(stale)
            await self.index_batch(again, held, tally, log_edits, retries - 1)

    async def _replace_all(
        self,
        prepared: Sequence[PreparedFile],
        fresh: Mapping[str, Vector],
        before: Mapping[str, Before],
        afters: Mapping[str, Mapping[str, str]],
        tally: Tally,
        stale: list[str],
    ) -> None:
        """Write each prepared file in its own transaction, with the vectors made for it
        (files changed on disk meanwhile go to ``stale``); log the person's edits to the
        memories of the files in ``afters`` (their memories now; ``before``: as indexed, see
        ``_memories_before``)."""
        model = self.embedder.model_id
        events = []
        written: list[PreparedFile] = []
        for group in _groups(prepared):
            paths = [item.state.path for item in group]

            async def write(tx: IndexWriter, group: list[PreparedFile] = group) -> None:
                await _replace(group, fresh, model, self.settings.vault, stale, tx)

            if await self.write(tally, paths, write):
                written += [item for item in group if item.state.path not in stale]
            else:
                for path in paths:
                    self._forget(path)
        for path in stale:
            self._forget(path)
        for item in written:
            path = item.state.path
            tally.indexed.append(path)
            self._remember(item, model)
            if path in afters:
                texts, gone = before.get(path, ({}, {}))
                events += changes(path, texts, afters[path], "person", gone)
        if events and self.edits is not None:
            await self.edits.log(events)

    def _remember(self, item: PreparedFile, model: str) -> None:
        """Keep what the next write to this file (just written) can build on."""
        path = item.state.path
        if item.base is None and _is_memory_file(item.chunks):
            version = StoredVersion(item.state.content_hash, item.chunks, model, item.embedded)
            self._stored.put(path, version)
        else:
            self._stored.pop(path)
        if item.appendable is not None and item.embedded:
            self._appendable.put(path, dataclasses.replace(item.appendable, model_id=model))
        else:
            self._appendable.pop(path)

    def _forget(self, path: str) -> None:
        self._stored.pop(path)
        self._appendable.pop(path)

    def _bases(
        self, files: Sequence[DiskFile], states: Mapping[str, FileState]
    ) -> dict[str, Appendable]:
        """The versions these files' appends can build on: each as this process wrote it,
        when the index holds that version (``states``, read in this run) with every chunk
        embedded by the current model."""
        out = {}
        for f in files:
            base = self._appendable.get(f.path)
            state = states.get(f.path)
            if (
                base is not None
                and state is not None
                and state.content_hash == base.content_hash
                and base.model_id == self.embedder.model_id
            ):
                out[f.path] = base
        return out

    def _build_on_stored(self, item: PreparedFile, state: FileState | None, model: str) -> None:
        """Let ``item`` build on the version of its file this process wrote last, when that
        is the one the index holds (``state``, read in this run), fully embedded by ``model``.
        The store checks the claim again inside the write (replace_file's stored_hash)."""
        version = self._stored.get(item.state.path)
        if (
            version is not None
            and state is not None
            and state.content_hash == version.content_hash
            and version.model_id == model
            and version.embedded
        ):
            item.take_stored(version)

    async def write(self, tally: Tally, paths: list[str], job: WriteJob) -> bool:
        """Run one transaction; a storage failure becomes a transient failure of ``paths``."""
        try:
            async with self.store.transaction() as tx:
                await job(tx)
        except StorageError as exc:
            log.warning("could not write %s: %s", ", ".join(paths), exc)
            busy, full = isinstance(exc, StorageBusy), isinstance(exc, StorageFull)
            tally.failed += [
                FileFailure(p, str(exc), transient=True, busy=busy, full=full) for p in paths
            ]
            return False
        return True

    async def delete(
        self, paths: Sequence[str], tally: Tally, log_edits: bool = False
    ) -> tuple[str, ...]:
        """Drop files gone from disk; a file that came back meanwhile is left alone."""
        if not paths:
            return ()
        async with self._paths.hold(paths):
            back = await self.on_disk(paths)
            gone = [p for p in paths if p not in {f.path for f in back}]
            for path in gone:
                self._forget(path)
            before = (
                await self.edits.memories_of(gone) if log_edits and self.edits is not None else {}
            )

            async def job(tx: IndexWriter) -> None:
                await tx.delete_files(gone)

            if gone and await self.write(tally, gone, job):
                if before and self.edits is not None:
                    events = [
                        e
                        for p, rs in before.items()
                        for e in changes(
                            p, {r.id: r.text for r in rs}, {}, "person", {r.id: r for r in rs}
                        )
                    ]
                    await self.edits.log(events)
                return tuple(gone)
        return ()

    async def on_disk(self, paths: Collection[str]) -> list[DiskFile]:
        """Those of ``paths`` that are memory files on disk now."""
        ix = self.settings.index
        return await asyncio.to_thread(
            stat_memory_files, self.settings.vault, list(paths), ix.include, ix.exclude,
            ix.follow_links,
        )  # fmt: skip
