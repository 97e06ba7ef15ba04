"""Indexer: brings the index in line with the vault, one short write transaction per file.

Runs may overlap (the daemon's batch, a write through the API, a retry): a per-path lock makes
the last file read the last one written, and nothing is held across an embedder call except
the locks of the files in that batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import time
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Collection,
    Iterator,
    Mapping,
    Sequence,
)
from functools import partial
from pathlib import Path

from memcore.core.errors import (
    EmbedderError,
    StorageBusy,
    StorageError,
    StorageFull,
    VaultError,
)
from memcore.core.heap import paused_collection
from memcore.core.lru import LRU
from memcore.core.models import (
    Chunk,
    DiskFile,
    FileFailure,
    FileState,
    IndexReport,
    MemoryQuery,
    MemoryRecord,
    SkippedFile,
)
from memcore.core.overlap import overlapped
from memcore.core.settings import Settings
from memcore.embedders.base import EmbeddingRunner
from memcore.index.planner import plan_changes
from memcore.index.prepare import (
    CHUNKING_KEY,
    PreparedFile,
    StoredVersion,
    Tally,
    attach_vectors,
    chunking_signature,
    embed_missing,
    known_vectors,
    prepare_files,
)
from memcore.index.tails import APPENDABLE_FILES, Appendable
from memcore.storage.base import FileRows, IndexReader, IndexWriter, Store, Vector, both
from memcore.vault.chunker import ChunkerConfig
from memcore.vault.files import scan_vault, stat_memory_files
from memcore.vault.history import HistoryEvent, HistoryLog, changes

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]  # (phase, done, total)
FILES_PER_BATCH = 32  # files chunked and embedded together; each is still its own transaction
BATCHES_AT_ONCE = 2  # batches in flight: one prepares while the other writes
PENDING_BATCH = 256
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


Before = tuple[dict[str, str], dict[str, MemoryRecord]]  # (id -> text, the ones going whole)


async def _memories_before(
    reader: IndexReader,
    afters: Mapping[str, Mapping[str, str]],
    stored: Mapping[str, StoredVersion] | None = None,
) -> dict[str, Before]:
    """What a diff of these files' memories needs of the index before they are written (
    ``afters``: path -> id -> text of the memories each will hold): the text of each memory,
    and every field of those the new versions no longer hold (a DELETE event keeps them). A
    write to a file of a thousand memories reads a thousand texts, not a thousand records;
    none when this process wrote the version the index holds (``stored``)."""
    out: dict[str, Before] = {}
    for path, after in afters.items():
        version = (stored or {}).get(path)
        texts = (
            _memory_texts(version.chunks)
            if version is not None
            else await reader.memory_texts(path)
        )
        if not texts:
            continue
        gone = [mid for mid in texts if mid not in after]
        records = (
            await reader.memories(MemoryQuery(ids=tuple(gone), limit=len(gone))) if gone else []
        )
        out[path] = (texts, {r.id: r for r in records})
    return out


def _memory_texts(chunks: Sequence[Chunk]) -> dict[str, str]:
    """Id -> text of the memories these chunks hold."""
    return {str(m["id"]): c.text for c in chunks if isinstance(m := c.metadata.get("memory"), dict)}


def _is_memory_file(chunks: Sequence[Chunk]) -> bool:
    return bool(chunks) and "memory" in chunks[0].metadata


def _disk_stat(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return st.st_size, st.st_mtime_ns


def _any_file(root: Path, paths: Sequence[str]) -> bool:
    return any((root / p).is_file() for p in paths)


def no_progress(phase: str, done: int, total: int) -> None:
    return None


class PathLocks:
    """One asyncio lock per vault path, created on demand and dropped when free."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    @contextlib.asynccontextmanager
    async def hold(self, paths: Collection[str]) -> AsyncIterator[None]:
        ordered = sorted(set(paths))  # one global order: two runs never wait on each other
        for p in ordered:
            self._users[p] = self._users.get(p, 0) + 1
            self._locks.setdefault(p, asyncio.Lock())
        taken: list[str] = []
        try:
            for p in ordered:
                await self._locks[p].acquire()
                taken.append(p)
            yield
        finally:
            for p in taken:
                self._locks[p].release()
            for p in ordered:
                self._users[p] -= 1
                if not self._users[p]:
                    del self._users[p], self._locks[p]


class Indexer:
    """Reads changed memory files, chunks them, attaches vectors and writes them to the store."""

    def __init__(
        self,
        settings: Settings,
        store: Store,
        embedder: EmbeddingRunner,
        history: HistoryLog | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.history = history  # memory edits made by hand are logged here
        self._history_warned = False
        ix = settings.index
        self.chunker = ChunkerConfig(
            ix.chunk_tokens, ix.overlap_tokens, ix.chars_per_token, ix.split
        )
        self.chunking = chunking_signature(ix)
        self._paths = PathLocks()
        # the memory files written last, as written: the next write to one builds on it
        self._stored: LRU[str, StoredVersion] = LRU(STORED_FILES)
        # ... and many more, as a few numbers: an append to one is read by its new lines
        self._appendable: LRU[str, Appendable] = LRU(APPENDABLE_FILES)

    async def index(
        self,
        paths: Collection[str] | None = None,
        *,
        full: bool = False,
        progress: Progress = no_progress,
        stop: asyncio.Event | None = None,
        history: bool = True,
        fill_pending: bool = True,
        embed: bool = True,
        count_pending: bool = True,
    ) -> IndexReport:
        """Bring the index in line with the vault (or only with ``paths``, vault-relative).

        Idempotent and resumable: each file is replaced in one transaction, so an interrupted
        run leaves every file fully old or fully new and the next run picks up the rest.
        ``stop`` is checked between batches of files; a stopped run reports what it did. A file
        that cannot be written right now (index busy) is reported in ``failed`` with
        ``transient`` set; the others still go in. With ``history``, changes to memories in
        files that were indexed before are logged as a person's edits. A whole-vault run
        (no ``paths``) also embeds the chunks still waiting for a vector. ``embed=False``: the
        chunks go in with the vectors already cached and the rest pending (``fill_pending``
        embeds them later), so a large write is searchable by keyword at once.
        ``count_pending=False``: the report's ``chunks_pending`` is 0, not counted (a caller
        that only wants the files in, such as a write through the API, saves a snapshot).
        """
        started = time.perf_counter()
        s = self.settings
        disk = await asyncio.to_thread(
            scan_vault, s.vault, s.index.include, s.index.exclude, s.index.follow_links
        ) if paths is None else await self._on_disk(paths)  # fmt: skip
        scope = None if paths is None else sorted(set(paths))
        async with self.store.snapshot(writing=True) as reader:  # three reads at once
            (states, skipped), stamp = await both(
                both(reader.file_states(scope), reader.skipped_files()),
                reader.get_meta(CHUNKING_KEY),
            )
        # an empty index: its first files use the current chunking (a run over some paths read
        # only their states; the whole index is asked only in this rare case)
        if stamp != self.chunking and not (states if scope is None else await self._states()):
            await self._stamp()
        # re-chunk everything when the chunking changed; unchanged chunk texts keep vectors
        rechunk = bool(states) and stamp != self.chunking and paths is None and not full
        full = full or rechunk
        log_edits = history and self.history is not None and not full
        if scope is None:  # the whole vault: tens of thousands of files, in a worker
            plan = await asyncio.to_thread(plan_changes, disk, states, full, None, skipped)
        else:
            plan = plan_changes(disk, states, full, set(scope), skipped)
        kept_all = paths is None and not disk and bool(states)
        if kept_all and await asyncio.to_thread(_any_file, s.vault, plan.to_delete):
            # The indexed files are still there, just no longer matched: a wrong index.include
            # (or exclude), not a deletion. Never empty the index on that evidence.
            plan = dataclasses.replace(plan, to_delete=())
        else:
            kept_all = False
        log.debug(
            "plan: %d to read, %d to delete, %d unchanged, %d still skipped%s",
            len(plan.to_read), len(plan.to_delete), len(plan.unchanged),
            len(plan.still_skipped), " (full)" if full else "",
        )  # fmt: skip
        tally = Tally(
            unchanged=len(plan.unchanged),
            rebuild=full,
            embedder_down=self.embedder.down,
            embed=embed,
        )
        if tally.embedder_down:
            tally.warnings.append(
                f"embedder unavailable, vectors pending: {self.embedder.down_reason}"
            )
        if kept_all:
            tally.warnings.append(
                f"no file in the vault matches index.include ({', '.join(s.index.include)}); "
                f"kept the {len(states)} indexed files rather than empty the index"
            )
        if rechunk:
            tally.warnings.append(
                f"chunking changed ({self.chunking}): re-chunking all {len(disk)} files"
            )
        total = len(plan.to_read)
        stopped = stop.is_set if stop is not None else lambda: False
        progress("files", 0, total)
        # more than one write transaction's files: what the store builds after a load, it
        # builds once after this run (see Store.bulk)
        # and no full GC walking the heap the run builds: 0.2-0.6 s each, stalling requests
        large = total > TX_FILES
        step = FILES_PER_BATCH
        batches = [plan.to_read[start : start + step] for start in range(0, total, step)]
        finished = [0]

        def batch_done() -> None:
            finished[0] += 1
            progress("files", min(finished[0] * FILES_PER_BATCH, total), total)

        with paused_collection() if large else contextlib.nullcontext():
            async with self.store.bulk(total) if large else contextlib.nullcontext():
                # two batches at a time: one is read, chunked and embedded while the other
                # waits on its transaction (their files differ; each is still whole or not)
                await overlapped(
                    (partial(self._index_batch, b, states, tally, log_edits) for b in batches),
                    BATCHES_AT_ONCE,
                    stopped=stopped,
                    each_done=batch_done,
                )
        deleted = tuple(
            p for p in await self._delete(plan.to_delete, tally, log_edits) if p in states
        )
        # Only a whole-vault run fills in the vectors still missing elsewhere (embedder down
        # then, or another model since): one write, or one watched file, must not embed the
        # whole vault after an embedder change. The daemon's retry loop fills them meanwhile.
        if not tally.embedder_down and not stopped() and paths is None and fill_pending:
            await self._fill_pending(tally, progress, stop)
        pending = 0
        if count_pending:
            async with self.store.snapshot() as reader:
                pending = await reader.count_pending(self.embedder.model_id)
        done = paths is None and not stopped() and not tally.failed_transient
        if done and stamp != self.chunking:
            await self._stamp()
        return IndexReport(
            indexed=tuple(tally.indexed),
            unchanged=tally.unchanged,
            deleted=deleted,
            failed=tuple(tally.failed),
            still_skipped=plan.still_skipped,
            chunks_embedded=tally.embedded,
            chunks_reused=tally.reused,
            chunks_pending=pending,
            elapsed_ms=(time.perf_counter() - started) * 1000,
            warnings=tuple(dict.fromkeys(tally.warnings)),
        )

    async def _states(self) -> dict[str, FileState]:
        async with self.store.snapshot(writing=True) as reader:
            return await reader.file_states()

    async def _stamp(self) -> None:
        async with self.store.transaction() as tx:
            await tx.set_meta(CHUNKING_KEY, self.chunking)

    async def _index_batch(
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
                await self._write(tally, [x.path for x in skips], skip)

            async def touch(tx: IndexWriter) -> None:
                for state in touched:
                    await tx.touch_file(state)

            if touched:
                await self._write(tally, [t.path for t in touched], touch)
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
                p.state.path: _memory_texts(p.chunks[p.unchanged if p.base else 0 :])
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
                    _memories_before(
                        reader, {k: v for k, v in afters.items() if k not in appends}, stored
                    ),
                )
            error, fresh = await attach_vectors(self.embedder, prepared, known, tally)
            if error is not None:
                self._embedder_failed(tally, error)
            await self._replace_all(prepared, fresh, before, afters, tally, stale)
        if stale and retries:
            again = await self._on_disk(stale)
            # their states as the index holds them (the writes of this round were not made):
            # with them a person's edit is logged on the retry too, not only on a first try
            async with self.store.snapshot(writing=True) as reader:
                held = await reader.file_states(stale)
            await self._index_batch(again, held, tally, log_edits, retries - 1)

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

            if await self._write(tally, paths, write):
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
        if events and self.history is not None:
            await self._log(events)

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

    async def _write(self, tally: Tally, paths: list[str], job: WriteJob) -> bool:
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

    async def _delete(
        self, paths: Sequence[str], tally: Tally, log_edits: bool = False
    ) -> tuple[str, ...]:
        """Drop files gone from disk; a file that came back meanwhile is left alone."""
        if not paths:
            return ()
        async with self._paths.hold(paths):
            back = await self._on_disk(paths)
            gone = [p for p in paths if p not in {f.path for f in back}]
            for path in gone:
                self._forget(path)
            before = await self._memories_of(gone if log_edits else [])

            async def job(tx: IndexWriter) -> None:
                await tx.delete_files(gone)

            if gone and await self._write(tally, gone, job):
                if before and self.history is not None:
                    events = [
                        e
                        for p, rs in before.items()
                        for e in changes(
                            p, {r.id: r.text for r in rs}, {}, "person", {r.id: r for r in rs}
                        )
                    ]
                    await self._log(events)
                return tuple(gone)
        return ()

    async def _on_disk(self, paths: Collection[str]) -> list[DiskFile]:
        """Those of ``paths`` that are memory files on disk now."""
        ix = self.settings.index
        return await asyncio.to_thread(
            stat_memory_files, self.settings.vault, list(paths), ix.include, ix.exclude,
            ix.follow_links,
        )  # fmt: skip

    async def _log(self, events: list[HistoryEvent]) -> None:
        """Log a person's edits (not the deletes of memories that only moved to another file);
        a vault that cannot take the history (read-only) is still indexed, and says once why
        its history stops."""
        assert self.history is not None
        try:
            await self.history.append_new(await self._still_lost(events))
        except (OSError, VaultError) as exc:
            if not self._history_warned:
                log.warning("cannot write the memory history: %s", exc)
                self._history_warned = True

    async def _still_lost(self, events: list[HistoryEvent]) -> list[HistoryEvent]:
        """The events without deletes of memories that are still in the index: their item
        left one file for another (a file moved, or an item cut and pasted), not the vault."""
        deleted = [e.memory_id for e in events if e.event == "DELETE"]
        if not deleted:
            return events
        async with self.store.snapshot(writing=True) as reader:
            found = await reader.memories(MemoryQuery(ids=tuple(deleted), limit=len(deleted)))
        moved = {r.id for r in found}
        return [e for e in events if not (e.event == "DELETE" and e.memory_id in moved)]

    async def _memories_of(self, paths: Sequence[str]) -> dict[str, list[MemoryRecord]]:
        """The indexed memories of these files (before a change is written)."""
        if not paths:
            return {}
        out: dict[str, list[MemoryRecord]] = {}
        async with self.store.snapshot(writing=True) as reader:
            for path in paths:
                rows = await reader.memories(MemoryQuery(path=path, limit=1_000_000))
                if rows:
                    out[path] = rows
        return out

    async def _fill_pending(
        self, tally: Tally, progress: Progress, stop: asyncio.Event | None = None
    ) -> None:
        """Embed chunks whose vector is missing or from another model (model change)."""
        model = self.embedder.model_id
        async with self.store.snapshot() as reader:
            total = await reader.count_pending(model)
        done = 0
        while done < total and not (stop is not None and stop.is_set()):
            async with self.store.snapshot() as reader:
                batch = await reader.pending_chunks(model, PENDING_BATCH)
                cached = await reader.cached_vectors([p.content_hash for p in batch], model)
            if not batch:
                return
            tally.reused += sum(1 for p in batch if p.content_hash in cached)
            todo = {p.content_hash: p.embed_text for p in batch if p.content_hash not in cached}
            try:
                cached.update(await embed_missing(self.store, self.embedder, todo, tally))
            except EmbedderError as exc:
                self._embedder_failed(tally, exc)
                return
            rows = [(p.chunk_id, p.content_hash, cached[p.content_hash]) for p in batch]
            async with self.store.transaction() as tx:
                await tx.set_vectors(rows, model)
            done += len(batch)
            progress("embed", min(done, total), total)

    def _embedder_failed(self, tally: Tally, exc: EmbedderError) -> None:
        tally.embedder_down = True
        tally.warnings.append(f"embedder unavailable, vectors pending: {exc}")
        self.embedder.mark_down(str(exc))

    async def fill_vectors(self, stop: asyncio.Event | None = None) -> None:
        """Embed the chunks still waiting for a vector (unless the embedder is down), until
        ``stop`` is set (checked between batches)."""
        if not self.embedder.down:
            await self._fill_pending(Tally(), no_progress, stop)

    async def fill_pending(self) -> IndexReport:
        """Retry embedding for chunks stored while the embedder was down."""
        started = time.perf_counter()
        tally = Tally()
        self.embedder.mark_up()
        await self._fill_pending(tally, no_progress)
        async with self.store.snapshot() as reader:
            pending = await reader.count_pending(self.embedder.model_id)
        return IndexReport(
            chunks_embedded=tally.embedded,
            chunks_reused=tally.reused,
            chunks_pending=pending,
            elapsed_ms=(time.perf_counter() - started) * 1000,
            warnings=tuple(dict.fromkeys(tally.warnings)),
        )
