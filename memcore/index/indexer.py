"""Indexer: brings the index in line with the vault, one short write transaction per file.

Runs may overlap (the daemon's batch, a write through the API, a retry): a per-path lock makes
the last file read the last one written, and nothing is held across an embedder call except
the locks of the files in that batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import logging
import time
from collections.abc import Callable, Collection, Sequence
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from memcore.core.errors import EmbedderError
from memcore.core.heap import paused_collection
from memcore.core.models import DiskFile, FileState, IndexReport
from memcore.core.overlap import overlapped
from memcore.core.settings import Settings
from memcore.embedders.base import EmbeddingRunner
from memcore.index.planner import plan_changes
from memcore.index.tally import CHUNKING_KEY, Tally, chunking_signature, embedder_down
from memcore.storage.base import Store, both
from memcore.vault.chunker import ChunkerConfig
from memcore.vault.files import scan_vault
from memcore.vault.history import HistoryLog

if TYPE_CHECKING:
    from memcore.index.file_batches import FileBatches

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]  # (phase, done, total)
FILES_PER_BATCH = 32  # files chunked and embedded together; each is still its own transaction
BATCHES_AT_ONCE = 2  # batches in flight: one prepares while the other writes
PENDING_BATCH = 256


def _any_file(root: Path, paths: Sequence[str]) -> bool:
    return any((root / p).is_file() for p in paths)


def no_progress(phase: str, done: int, total: int) -> None:
    return None


class Indexer:
    """Reads changed memory files, chunks them, attaches vectors and writes them to the store:
    plans each run (index/planner.py) and hands its files to FileBatches a batch at a time."""

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
        self.chunking = chunking_signature(settings.index)

    @functools.cached_property
    def batches(self) -> FileBatches:
        """The writing half, loaded by the first run with files to write: a catch-up that finds
        nothing changed (most of a one-shot search's) never imports it (~2 ms of its wall time,
        measured in turn)."""
        from memcore.index.file_batches import FileBatches

        ix = self.settings.index
        chunker = ChunkerConfig(ix.chunk_tokens, ix.overlap_tokens, ix.chars_per_token, ix.split)
        return FileBatches(self.settings, self.store, self.embedder, chunker, self.history)

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
        ) if paths is None else await self.batches.on_disk(paths)  # fmt: skip
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
        tally = Tally(unchanged=len(plan.unchanged), rebuild=full, embed=embed)
        if self.embedder.down:
            tally.without_embedder(self.embedder.down_reason)
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
        if total:
            await self._write_files(plan.to_read, states, tally, log_edits, progress, stopped)
        deleted: tuple[str, ...] = ()
        if plan.to_delete:
            gone = await self.batches.delete(plan.to_delete, tally, log_edits)
            deleted = tuple(p for p in gone if p in states)
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

    async def _write_files(
        self,
        files: Sequence[DiskFile],
        states: dict[str, FileState],
        tally: Tally,
        log_edits: bool,
        progress: Progress,
        stopped: Callable[[], bool],
    ) -> None:
        """Read, chunk, embed and write ``files``, a batch at a time, two batches in flight:
        one is read, chunked and embedded while the other waits on its transaction (their
        files differ; each is still whole or not)."""
        from memcore.index.file_batches import TX_FILES

        total = len(files)
        # more than one write transaction's files: what the store builds after a load, it
        # builds once after this run (see Store.bulk)
        # and no full GC walking the heap the run builds: 0.2-0.6 s each, stalling requests
        large = total > TX_FILES
        step = FILES_PER_BATCH
        batches = [files[start : start + step] for start in range(0, total, step)]
        finished = [0]

        def batch_done() -> None:
            finished[0] += 1
            progress("files", min(finished[0] * FILES_PER_BATCH, total), total)

        write = self.batches.index_batch
        with paused_collection() if large else contextlib.nullcontext():
            async with self.store.bulk(total) if large else contextlib.nullcontext():
                await overlapped(
                    (partial(write, b, states, tally, log_edits) for b in batches),
                    BATCHES_AT_ONCE,
                    stopped=stopped,
                    each_done=batch_done,
                )

    async def _states(self) -> dict[str, FileState]:
        async with self.store.snapshot(writing=True) as reader:
            return await reader.file_states()

    async def _stamp(self) -> None:
        async with self.store.transaction() as tx:
            await tx.set_meta(CHUNKING_KEY, self.chunking)

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
            from memcore.index.prepare import embed_missing  # vectors owed: the writing half

            try:
                cached.update(await embed_missing(self.store, self.embedder, todo, tally))
            except EmbedderError as exc:
                embedder_down(tally, self.embedder, exc)
                return
            rows = [(p.chunk_id, p.content_hash, cached[p.content_hash]) for p in batch]
            async with self.store.transaction() as tx:
                await tx.set_vectors(rows, model)
            done += len(batch)
            progress("embed", min(done, total), total)

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
