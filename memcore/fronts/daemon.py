"""The watch daemon: one per vault (a lock file), reconcile at start, then index every change.

Runs as one asyncio TaskGroup: a flusher that indexes debounced paths, a retry loop that fills
in vectors after the embedder comes back, and a wait on the stop event that SIGINT/SIGTERM set.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import json
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from memcore.core.heap import freeze_heap
from memcore.core.models import IndexReport
from memcore.core.nodes import this_node
from memcore.core.places import inputs_digest
from memcore.core.settings import Settings, embedder_signature
from memcore.core.workers import loop_first
from memcore.fronts.daemon_state import (
    LOCK_NAME,
    make_node_home,
    node_home,
    remove_node_home,
    vault_lock,
    write_status,
)
from memcore.fronts.node import run_node
from memcore.index.debounce import Debouncer

if TYPE_CHECKING:
    from pathlib import Path

    from memcore.index.watcher import ObserverFactory, VaultWatcher
    from memcore.service import MemoryService
    from memcore.storage.base import NodeRoles

log = logging.getLogger("memcore.fronts.daemon")


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


RETRY_BASE_S = 1.0
RETRY_MAX_S = 300.0


@dataclass(slots=True)
class Retry:
    """A path whose indexing failed for a reason that may pass (the index was busy)."""

    attempts: int
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {"attempts": self.attempts, "reason": self.reason}


@dataclass
class Daemon:
    """Keeps one vault's index current until ``stop`` is set."""

    settings: Settings
    service: MemoryService
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    force_polling: bool = False
    native_observer: ObserverFactory | None = None  # tests inject OS failures here
    on_batch: Callable[[IndexReport], None] | None = None
    debouncer: Debouncer = field(init=False)
    started_at: str = field(default_factory=_now)
    last_update: str | None = None
    batches: int = 0
    forgotten: int = 0  # memories the forget loop archived
    warmed: bool = False
    failing: dict[str, Retry] = field(default_factory=dict)  # path ("" = the vault) -> retry
    locked: asyncio.Event = field(default_factory=asyncio.Event)  # set once the vault is ours
    ended: asyncio.Event = field(default_factory=asyncio.Event)  # set when run() returns
    # the index folder (.memcore/) vanished under it: run() returned so that the caller opens
    # a fresh index and runs again (memcore watch and serve do, in cli/watch.py and serve.py)
    lost: bool = False
    _publish_failing: bool = False  # the status file could not be written (said once)
    socket: str | None = None  # where a front-end answers searches for the CLI (see server.py)
    kind: str = "watch"  # the command that runs it: watch, or serve
    url: str = ""  # where a serve answers HTTP (for the list of nodes)
    # with a shared index (PostgreSQL): the node roles, held through the database; None: this
    # machine's own index, and the vault's lock file decides (a second watcher is refused)
    roles: NodeRoles | None = field(init=False)
    home: Path = field(init=False)  # the folder of its lock, status and socket
    role: str | None = None  # "watcher" or "standby" with shared roles
    demoted: bool = False  # lost the roles while on duty (the database out of reach)
    _wake: asyncio.Event = field(default_factory=asyncio.Event)
    _watcher: VaultWatcher | None = None
    _inflight: asyncio.Task[IndexReport] | None = None
    _published_at: float = 0.0  # monotonic time of the last progress publish

    def __post_init__(self) -> None:
        w = self.settings.watch
        self.debouncer = Debouncer(w.debounce_ms / 1000, w.max_delay_ms / 1000)
        self.service.readiness.phase = "starting"  # until the catch-up in run() is done
        self.service.metrics  # noqa: B018 - made now: a daemon serves them, catch-up counted
        self.roles = self.service.store.node_roles(this_node(self.kind, self.url))
        shared = self.roles is not None
        self.home = node_home(self.settings.vault) if shared else self.settings.state_dir

    # ---- events (on the loop) ----------------------------------------------------------------

    def _on_path(self, path: str) -> None:
        self.debouncer.add(path, time.monotonic())
        self._wake.set()

    def _on_rescan(self) -> None:
        self.debouncer.add_rescan(time.monotonic())
        self._wake.set()

    # ---- main ------------------------------------------------------------------------------

    async def run(self) -> None:
        """Watch, catch up, and index until stopped, holding the vault lock throughout; with
        a shared index, hold this node's own lock, and watch whenever it holds the node roles
        (fronts/node.py)."""
        try:  # worker threads (SQLite, chunking, scans) must not hold the loop up
            with loop_first():
                if self.roles is not None:
                    make_node_home(self.home)
                with vault_lock(self.home, self.settings.vault):
                    self.locked.set()
                    self.publish()
                    if self.roles is None:
                        await self.on_duty()
                    else:
                        await run_node(self, self.roles)
        finally:
            if self.roles is not None:
                remove_node_home(self.home)
            self.ended.set()
        log.info("stopped to rebuild the index" if self.lost else "stopped")

    @property
    def ending(self) -> bool:
        return self.stop.is_set() or self.lost

    @property
    def off_duty(self) -> bool:
        """Time to stop the watcher's work: stopping, or the node roles were lost."""
        return self.ending or self.demoted

    def demote(self) -> None:
        """The node roles may be another node's now: end the watcher's work at once."""
        self.demoted = True
        self._wake.set()

    def _lose(self, why: str) -> None:
        """The index folder is gone (deleted by hand): end this run; the caller rebuilds."""
        if not self.lost:
            log.warning("%s: opening a new index and catching up with the vault", why)
        self.lost = True
        self._wake.set()

    def _state_gone(self) -> bool:
        s = self.settings
        needed = [self.home / LOCK_NAME]
        if not s.storage.db and not s.database_url:
            needed.append(s.db_path)
        return not all(p.exists() for p in needed)

    async def _state_loop(self) -> None:
        """Notice .memcore/ (the lock, the index) deleted under the running daemon."""
        while not self.off_duty:
            await asyncio.sleep(min(self.settings.watch.poll_interval_s, 2.0))
            if await asyncio.to_thread(self._state_gone):
                self._lose(f"{self.home} was deleted")

    async def on_duty(self) -> None:
        """The watcher's work, until stopped or ``demote``d: watch, catch up with the vault,
        then index every change, retry what failed, archive and forget. The watcher starts
        before the catch-up scan, so a save made during the scan is queued rather than lost;
        files the scan already indexed are skipped by content hash."""
        loop = asyncio.get_running_loop()
        s = self.settings
        from memcore.index.watcher import VaultWatcher, network_file_system

        polling = self.force_polling or s.watch.polling == "always"
        if not polling and (remote := network_file_system(s.vault)) is not None:
            log.info("%s is on %s, which reports no other machine's writes: polling", s.vault,
                     remote)  # fmt: skip
            polling = True
        watcher = VaultWatcher(
            s.vault, s.index.include, s.index.exclude, loop, self._on_path, self._on_rescan,
            polling, s.watch.poll_interval_s, self.native_observer,
        )  # fmt: skip
        await asyncio.to_thread(watcher.start)
        try:
            # Before anything is served: loading jieba holds the GIL in long C calls
            # (its dictionary cache), which would stall every caller for ~200 ms later.
            await self.warm()
            report = await self.service.index(stop=self.stop, progress=self._progress)
            self.service.readiness.phase = "ready"
            self.publish()
            log.info("caught up with the vault: %s", report.summary())
            freeze_heap()
            self._watcher = watcher
            self._note_failures(report, None)
            mode = "polling" if watcher.polling else "native events"
            log.info("watching %s (%d folders, %s)", s.vault, watcher.watch_count, mode)
            if not self.off_duty:
                async with asyncio.TaskGroup() as tg:
                    flusher = tg.create_task(self._flush_loop())
                    retry = tg.create_task(self._retry_pending_loop())
                    forget = tg.create_task(self._forget_loop())
                    state = tg.create_task(self._state_loop())
                    await flusher  # until stopped, demoted, or the index folder is gone
                    for task in (retry, forget, state):
                        task.cancel()
        finally:
            self._watcher = None
            await self._settle_inflight()
            await asyncio.to_thread(watcher.stop)

    def _progress(self, phase: str, done: int, total: int) -> None:
        """The catch-up's progress: kept on the service (/ready, status) and published for
        `memcore status` at most twice a second."""
        self.service.readiness.progress(phase, done, total)
        now = time.monotonic()
        if now - self._published_at >= 0.5 or done == total:
            self._published_at = now
            self.publish()

    async def _flush_loop(self) -> None:
        waiting = asyncio.ensure_future(self.stop.wait())
        waiting.add_done_callback(lambda _: self._wake.set())
        try:
            await self._flush_until_ending()
        finally:
            waiting.cancel()

    async def _flush_until_ending(self) -> None:
        while not self.off_duty:
            deadline = self.debouncer.next_deadline()
            timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
            self._wake.clear()
            if timeout is None or timeout > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout)
                continue
            paths, rescan = self.debouncer.take_due(time.monotonic())
            await self._index(None if rescan else paths)

    async def warm(self) -> None:
        """Load the model and jieba's dictionary before serving (once a process)."""
        if self.warmed:
            return
        try:
            await self.service.warm()
        except Exception:
            log.exception("warming up failed; the first search loads what it needs")
        self.warmed = True

    async def _settle_inflight(self) -> None:
        """Let the batch in progress finish before the service (and its store) closes."""
        task = self._inflight
        if task is not None and not task.done():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await task

    async def _index(self, paths: set[str] | None) -> None:
        # Shielded: a stop request lets the current batch finish (each file is one
        # transaction anyway, so even a hard kill leaves no half-indexed file).
        log.debug("indexing %s", ", ".join(sorted(paths)) if paths is not None else "the vault")
        self._inflight = asyncio.ensure_future(self.service.index(paths, stop=self.stop))
        try:
            report = await asyncio.shield(self._inflight)
        except Exception as exc:
            log.warning(
                "indexing %s failed (%s); will retry",
                ", ".join(sorted(paths or {"the vault"})),
                exc,
            )
            for path in paths if paths is not None else {""}:
                self._schedule_retry(path, str(exc))
            self.publish()
            return
        self.batches += 1
        if report.indexed or report.deleted or report.failed or report.chunks_embedded:
            log.info("batch %d: %s", self.batches, report.summary())
        self._note_failures(report, paths)

    def _note_failures(self, report: IndexReport, paths: set[str] | None) -> None:
        """Log skipped files (once: an untouched one is not re-read), queue transient ones."""
        still = {f.path for f in report.failed if f.transient}
        for failure in report.failed:
            if failure.transient:
                self._schedule_retry(failure.path, failure.reason)
            elif failure.path not in self.failing:
                log.warning("skipped %s: %s", failure.path, failure.reason)
        covered = set(self.failing) if paths is None else paths
        for path in covered - still:
            if self.failing.pop(path, None) is not None:
                log.info("indexed %s after an earlier failure", path or "the vault")
        self._after_batch(report)

    def _schedule_retry(self, path: str, reason: str) -> None:
        """Queue a failed path (``""`` = a full rescan) again with exponential backoff."""
        previous = self.failing.get(path)
        attempts = previous.attempts + 1 if previous else 1
        delay = min(RETRY_BASE_S * 2 ** (attempts - 1), RETRY_MAX_S)
        due = time.monotonic() + delay
        self.failing[path] = Retry(attempts, reason)
        if path:
            self.debouncer.retry(path, due)
        else:
            self.debouncer.retry_rescan(due)
        self._wake.set()

    def _after_batch(self, report: IndexReport) -> None:
        self.last_update = _now()
        self.publish()
        if self.on_batch is not None:
            self.on_batch(report)

    async def _retry_pending_loop(self) -> None:
        """While vectors are pending (embedder down), retry with exponential backoff."""
        base = self.settings.watch.retry_pending_s
        delay = base
        while True:
            await asyncio.sleep(delay)
            try:
                report = await self.service.fill_pending()  # a count, when nothing is pending
            except Exception as exc:
                delay = min(delay * 2, 600.0)
                log.warning("filling in vectors failed (%s); retrying in %.0f s", exc, delay)
                continue
            if not report.chunks_pending and not report.chunks_embedded:
                delay = base
                continue
            if report.chunks_pending:
                delay = min(delay * 2, 600.0)
                log.info(
                    "%d chunks wait for vectors (%s)",
                    report.chunks_pending,
                    report.embedder_problem or "embedder still unavailable",
                )
            else:
                delay = base
                log.info("embedder is back: %d chunks embedded", report.chunks_embedded)
                self._after_batch(report)

    async def _forget_loop(self) -> None:
        """Every strength.forget_interval_s (the first time at start): archive memories past
        their expiration date, and decaying memories whose retrievability fell below
        strength.forget_below (unless it is 0)."""
        s = self.settings.strength
        while True:
            try:
                expired = await self.service.memories.archive_expired()
            except Exception as exc:
                log.warning("archiving expired memories failed (%s); will try again", exc)
                expired = []
            if expired:
                log.info("archived %d expired memories: %s", len(expired),
                         ", ".join(r.id for r in expired))  # fmt: skip
                self.forgotten += len(expired)
                self.publish()
            await asyncio.sleep(s.forget_interval_s)
            if s.forget_below <= 0:
                continue
            try:
                gone = await self.service.memories.forget_below(s.forget_below)
            except Exception as exc:
                log.warning("forgetting weak memories failed (%s); will try again", exc)
                continue
            if gone:
                log.info(
                    "archived %d memories below retrievability %.2f: %s",
                    len(gone), s.forget_below, ", ".join(r.id for r in gone),
                )  # fmt: skip
                self.forgotten += len(gone)
                self.publish()

    def publish(self) -> None:
        """Write the status file. A folder deleted under it ends this run (the caller opens a
        new index); any other failure (a full disk, no file handles left) is logged and the
        daemon goes on serving: the next publish tries again."""
        try:
            self._publish()
        except OSError as exc:
            if self._state_gone():
                self._lose(f"{self.home} was deleted")
            elif not self._publish_failing:
                log.warning(
                    "cannot write %s (%s); serving on, will retry",
                    self.home / "daemon.json",
                    exc.strerror or exc,
                )
            self._publish_failing = True
        else:
            self._publish_failing = False

    def _publish(self) -> None:
        write_status(
            self.home,
            {
                "pid": os.getpid(),
                "kind": self.kind,
                "role": self.role,
                "vault": str(self.settings.vault),
                "started_at": self.started_at,
                "last_update": self.last_update,
                "queue": len(self.debouncer),
                "batches": self.batches,
                "polling": bool(self._watcher and self._watcher.polling),
                "watching": self._watcher is not None,
                "retrying": {p or "<vault>": r.to_dict() for p, r in self.failing.items()},
                "forgotten": self.forgotten,
                "db": self.settings.index_location,
                "embedder": embedder_signature(self.settings),
                "memory": self.settings.memory.kind,
                # a digest of what its settings were read from: a command with the same
                # inputs asks this daemon without loading settings (cli/quick.py); never the
                # values, which may hold a password (MEMCORE_STORAGE_URL)
                "config": published_inputs(self.settings.inputs),
                "socket": self.socket,
                "readiness": self.service.readiness.to_dict(),
            },
        )


def published_inputs(inputs: str) -> dict[str, object] | None:
    """What a daemon says of its settings' inputs (places.config_inputs): their digest, and
    whether the working folder was one of them."""
    if not inputs:
        return None
    given = json.loads(inputs)
    return {"digest": inputs_digest(given), "cwd": given.get("cwd") is not None}


def install_signal_handlers(stop: asyncio.Event, deadline_s: float) -> None:
    """SIGINT and SIGTERM set ``stop``: requests in flight finish, the watcher stops. A process
    still not gone ``deadline_s`` later leaves at once (an index write of a large batch can
    take a minute to finish): what it abandons is a transaction, rolled back, while the
    Markdown already holds every acknowledged write, and the next start catches up."""
    loop = asyncio.get_running_loop()

    def asked() -> None:
        if not stop.is_set():
            stop.set()
            threading.Thread(target=_leave_after, args=(deadline_s,), daemon=True,
                             name="memcore-stop-deadline").start()  # fmt: skip

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, asked)


def _leave_after(seconds: float) -> None:
    time.sleep(seconds)
    said = "still stopping after %.0f s (server.stop_timeout_s): leaving now; the index write "
    log.warning(said + "in progress is rolled back and the next start catches up", seconds)
    logging.shutdown()
    os._exit(0)
