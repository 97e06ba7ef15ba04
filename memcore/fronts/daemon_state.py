"""The daemon's lock and its published state, read by every command that asks whether a
`memcore watch` or `serve` runs (kept apart from daemon.py so that asking costs no imports)."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path

from memcore.core.errors import DaemonError
from memcore.core.places import make_private_dir, nodes_dir_of, open_private, state_dir_of
from memcore.core.redact import redacted

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers read it)
if TYPE_CHECKING:
    from typing import IO

    from memcore.core.settings import Settings

LOCK_NAME = "daemon.lock"
STATUS_NAME = "daemon.json"


@contextlib.contextmanager
def vault_lock(home: Path, vault: Path) -> Iterator[IO[str]]:
    """Hold the daemon lock in ``home`` (the vault's state folder, or a node's own folder);
    raises DaemonError naming the process that has it."""
    make_private_dir(home)
    path = home / LOCK_NAME
    fh = os.fdopen(open_private(path, os.O_RDWR | os.O_APPEND), "a+", encoding="utf-8")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        raise DaemonError(
            f"another memcore watch (pid {holder}) is already watching {vault}"
        ) from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    try:
        yield fh
    finally:
        with contextlib.suppress(OSError):
            (home / STATUS_NAME).unlink()
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


def node_home(vault: Path) -> Path:
    """This process's own folder among the vault's nodes on this machine (places.nodes_dir_of)."""
    return nodes_dir_of(vault) / str(os.getpid())


def make_node_home(home: Path) -> None:
    """Make a node's folder (``node_home``), private level by level, and remove the folders
    of the vault's nodes that died."""
    nodes = home.parent
    levels = (nodes.parent.parent, nodes.parent, nodes, home)
    for _ in range(2):  # again: a node leaving may have removed the vault's folder between
        for level in levels:
            make_private_dir(level)
            if level.stat().st_uid != os.getuid():
                raise DaemonError(f"{level} belongs to another user; set XDG_RUNTIME_DIR")
    for old in nodes.iterdir():
        if old.is_dir() and old != home and _dead(old):
            remove_node_home(old)


def _dead(home: Path) -> bool:
    """Whether the node whose folder this is has ended: the process it is named after is gone.
    (Its lock cannot tell: a node starting now made its folder but has not locked it yet.)"""
    try:
        os.kill(int(home.name), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False  # a process of another user's: not this folder's node, but alive
    except (ValueError, OverflowError):  # not a pid: a folder of no node's
        return status_in(home) is None
    return False


def remove_node_home(home: Path) -> None:
    """A node's folder, once it stopped (or died), and the vault's folder when it was the last."""
    with contextlib.suppress(OSError):
        for leftover in home.iterdir():
            leftover.unlink()
        home.rmdir()
        home.parent.rmdir()  # fails while another node's folder is there


def vault_daemon(vault: Path) -> dict[str, object] | None:
    """What a daemon holding this vault last reported, found from the vault alone (before
    any settings are read: the vault's own state folder, then its nodes' folder)."""
    return status_in(state_dir_of(vault)) or node_status(nodes_dir_of(vault))


def daemon_status(settings: Settings) -> dict[str, object] | None:
    """What the running daemon last reported, or None when no daemon holds the vault. With a
    shared index (PostgreSQL), a node of this machine: this process when it is one, else the
    one holding the node roles when it runs here, else the first."""
    local, nodes = settings.state_dir, nodes_dir_of(settings.vault)
    if settings.database_url:  # then the other place: a daemon started with other settings
        return node_status(nodes) or status_in(local)  # (`watch --db URL`, then `stop`)
    return status_in(local) or node_status(nodes)


def node_status(nodes: Path) -> dict[str, object] | None:
    """``daemon_status`` of the vault whose nodes' folder (places.nodes_dir_of) this is."""
    try:
        homes = sorted(nodes.iterdir(), key=lambda p: p.name)
    except OSError:
        return None
    found = [s for home in homes if home.is_dir() and (s := status_in(home)) is not None]
    for status in found:  # asked from inside a node (its HTTP status): that node's own
        if status.get("pid") == os.getpid():
            return status
    for status in found:
        if status.get("role") == "watcher":
            return status
    return found[0] if found else None


def local_daemon(settings: Settings) -> str | None:
    """The socket of the vault's running daemon when it searches the same index with the same
    model as these settings would (else None: a command opens the index itself)."""
    import logging

    from memcore.core.settings import embedder_signature

    status = daemon_status(settings)
    if not status or not status.get("socket"):
        return None
    if status.get("db") != settings.index_location:
        return None
    if status.get("embedder") != embedder_signature(settings):
        return None
    logging.getLogger("memcore.cli").debug("asking the running daemon at %s", status["socket"])
    return str(status["socket"])


def status_in(state_dir: Path) -> dict[str, object] | None:
    """``daemon_status`` of the vault whose state folder this is."""
    lock = state_dir / LOCK_NAME
    if not lock.exists():
        return None
    with lock.open("r", encoding="utf-8") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            pass  # held: a daemon is running
        else:
            fcntl.flock(fh, fcntl.LOCK_UN)
            return None
        pid = fh.read().strip()
    try:
        info = json.loads((state_dir / STATUS_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        info = {}
    return {"running": True, "pid": int(pid) if pid.isdigit() else None, **info}


def write_status(home: Path, info: dict[str, object]) -> None:
    """Publish the daemon's state in its folder (0600: only this user reads it), replacing
    the last."""
    target = home / STATUS_NAME
    tmp = target.with_suffix(".tmp")
    with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_TRUNC), "w", encoding="utf-8") as fh:
        fh.write(json.dumps(redacted(info)))  # no credential in a file
    os.replace(tmp, target)
