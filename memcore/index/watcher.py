"""watchdog -> asyncio bridge: file events from the vault become paths on the event loop.

Only folders that can hold memory files are watched (never .git, node_modules, virtualenvs or
hidden folders). If the OS runs out of inotify watches or file descriptors, the watcher says so
and falls back to polling instead of silently stopping.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path

from watchdog.events import (
    DirCreatedEvent,
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedNoWriteEvent,
    FileOpenedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver, ObservedWatch
from watchdog.observers.polling import PollingObserver

from memcore.vault.files import could_hold_memory, is_memory_path

log = logging.getLogger(__name__)

# watchdog's inotify buffer warns when a folder moved inside a recursive watch is re-added;
# the watch is replaced correctly, so the warning is noise on every directory rename.
warnings.filterwarnings("ignore", message="Callback with id", category=RuntimeWarning)

OnPath = Callable[[str], None]  # a vault-relative path changed
OnRescan = Callable[[], None]  # a folder changed: rescan the vault
ObserverFactory = Callable[[], BaseObserver]
_LIMIT_ERRNOS = {errno.ENOSPC, errno.EMFILE, errno.ENFILE, errno.ENOMEM}


def watch_roots(include: tuple[str, ...]) -> list[tuple[str, bool]]:
    """(vault-relative folder, recursive) pairs that cover every include pattern.

    ``MEMORY.md`` needs the root itself, not its subfolders; ``memory/**/*.md`` needs memory/
    recursively. A pattern that can match anywhere (``**/*.md``) watches the root flat plus
    each top-level folder that can hold memory, so .git and node_modules are never walked.
    """
    roots: dict[str, bool] = {}
    for pattern in include:
        parts = pattern.split("/")
        literal: list[str] = []
        for part in parts[:-1]:
            if any(ch in part for ch in "*?["):
                break
            literal.append(part)
        base = "/".join(literal)
        recursive = len(literal) < len(parts) - 1
        roots[base] = roots.get(base, False) or recursive
    return sorted(roots.items())


# File systems whose file events (inotify) miss other machines' writes: a vault on one of them
# is polled. FUSE file systems are named "fuse.<name>".
NETWORK_FILE_SYSTEMS = frozenset(
    ("nfs", "nfs4", "cifs", "smb3", "smbfs", "ncpfs", "9p", "afs", "ceph", "glusterfs",
     "lustre", "gpfs", "beegfs", "ocfs2", "gfs2", "fuse.sshfs", "fuse.glusterfs", "fuse.s3fs",
     "fuse.gcsfuse", "fuse.rclone", "fuse.juicefs", "fuse.cephfs", "fuse.goofys")
)  # fmt: skip


def network_file_system(path: Path, mountinfo: str | None = None) -> str | None:
    """The type of the network file system ``path`` lives on (``mountinfo``: the text of
    /proc/self/mountinfo, read when not given), or None: a local one, or not Linux."""
    if mountinfo is None:
        try:
            mountinfo = Path("/proc/self/mountinfo").read_text(encoding="utf-8")
        except OSError:
            return None
    target = path.resolve().as_posix()
    best, kind = "", ""
    for line in mountinfo.splitlines():
        fields, _, rest = line.partition(" - ")
        parts = fields.split()
        if len(parts) < 5 or not rest:
            continue
        point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), parts[4])  # \040
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best):
            best, kind = point, rest.split()[0]
    return kind if kind in NETWORK_FILE_SYSTEMS else None


class _Handler(FileSystemEventHandler):
    def __init__(self, watcher: VaultWatcher) -> None:
        self.watcher = watcher

    def on_any_event(self, event: FileSystemEvent) -> None:
        if isinstance(event, FileOpenedEvent | FileClosedNoWriteEvent):
            return  # reads (including our own) change nothing
        if log.isEnabledFor(logging.DEBUG):
            log.debug("event %s %s", event.event_type, event.src_path)
        self.watcher.dispatch(event)


class VaultWatcher:
    """Runs a watchdog observer and hands each relevant event to the asyncio loop.

    Constructing does no I/O; ``start()`` schedules the watches. Callbacks run on ``loop``.
    """

    def __init__(
        self,
        vault: Path,
        include: tuple[str, ...],
        exclude: tuple[str, ...],
        loop: asyncio.AbstractEventLoop,
        on_path: OnPath,
        on_rescan: OnRescan,
        force_polling: bool = False,
        poll_interval_s: float = 2.0,
        native_observer: ObserverFactory | None = None,
    ) -> None:
        self.vault = vault.resolve()
        self.include, self.exclude = include, exclude
        self.loop = loop
        self.on_path, self.on_rescan = on_path, on_rescan
        self.poll_interval_s = poll_interval_s
        self.polling = force_polling
        self._native_observer: ObserverFactory = native_observer or Observer
        self._observer: BaseObserver | None = None
        self._watches: dict[str, tuple[ObservedWatch, int]] = {}  # key -> (watch, folder inode)

    def start(self) -> None:
        self._observer = self._new_observer()
        try:
            self._schedule_all()
            self._observer.start()
        except OSError as exc:
            if exc.errno not in _LIMIT_ERRNOS or self.polling:
                raise
            self._fall_back_to_polling(exc)

    def _fall_back_to_polling(self, exc: OSError) -> None:
        log.warning(
            "the OS limit on file watches was hit (%s); falling back to polling every %.1fs. "
            "Raise fs.inotify.max_user_watches to watch natively.",
            exc.strerror or exc,
            self.poll_interval_s,
        )
        self._stop_observer()
        self._watches.clear()
        self.polling = True
        self._observer = self._new_observer()
        self._schedule_all()
        self._observer.start()

    def _new_observer(self) -> BaseObserver:
        if self.polling:
            return PollingObserver(timeout=self.poll_interval_s)
        return self._native_observer()

    def _schedule_all(self) -> None:
        """Watch every folder that should be watched; forget folders that are gone or replaced."""
        for key, (watch, inode) in list(self._watches.items()):
            try:
                current = (self.vault / key.split("|")[0]).stat().st_ino
            except OSError:
                current = -1
            if current != inode:
                if self._observer is not None:
                    self._observer.unschedule(watch)
                del self._watches[key]
        for base, recursive in watch_roots(self.include):
            if base == "" and recursive:
                self._schedule("", recursive=False)
                for entry in sorted(os.scandir(self.vault), key=lambda e: e.name):
                    if entry.is_dir(follow_symlinks=False) and could_hold_memory(
                        entry.name, self.include
                    ):
                        self._schedule(entry.name, recursive=True)
            else:
                self._schedule(base, recursive)
                # the parent must be watched too, so the base folder appearing later is seen
                parent = base.rsplit("/", 1)[0] if "/" in base else ""
                if base:
                    self._schedule(parent, recursive=False)

    def _schedule(self, rel: str, recursive: bool) -> None:
        key = f"{rel}|{recursive}"
        full = self.vault / rel
        if key in self._watches or not full.is_dir() or self._observer is None:
            return
        watch = self._observer.schedule(_Handler(self), str(full), recursive=recursive)
        self._watches[key] = (watch, full.stat().st_ino)

    def _stop_observer(self) -> None:
        if self._observer is not None:
            observer, self._observer = self._observer, None
            observer.stop()
            if observer.is_alive():
                observer.join(timeout=5)

    def stop(self) -> None:
        self._stop_observer()

    @property
    def watch_count(self) -> int:
        return len(self._watches)

    # ---- runs on the watchdog thread -------------------------------------------------------

    def _rel(self, raw: str | bytes) -> str | None:
        path = os.fsdecode(raw)
        try:
            return Path(path).relative_to(self.vault).as_posix()
        except ValueError:
            return None  # moved out of the vault

    def dispatch(self, event: FileSystemEvent) -> None:
        if event.is_directory:
            if isinstance(event, DirCreatedEvent | DirDeletedEvent | DirMovedEvent):
                rel = self._rel(event.src_path)
                dest = self._rel(event.dest_path) if isinstance(event, DirMovedEvent) else None
                if any(p is not None and could_hold_memory(p, self.include) for p in (rel, dest)):
                    self.loop.call_soon_threadsafe(self._directory_changed)
            return
        paths = [self._rel(event.src_path)]
        if event.dest_path:
            paths.append(self._rel(event.dest_path))
        for rel in paths:
            if rel is not None and is_memory_path(rel, self.include, self.exclude):
                self.loop.call_soon_threadsafe(self.on_path, rel)

    # ---- runs on the event loop ------------------------------------------------------------

    def _directory_changed(self) -> None:
        """A folder appeared, vanished or moved: watch new folders and rescan the vault."""
        if self._observer is not None and not self.polling:
            try:
                self._schedule_all()
            except OSError as exc:
                if exc.errno not in _LIMIT_ERRNOS:
                    raise
                self._fall_back_to_polling(exc)
        self.on_rescan()
