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
from memcore.core.places import make_private_dir, open_private

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers read it)
if TYPE_CHECKING:
    from typing import IO

    from memcore.core.settings import Settings

LOCK_NAME = "daemon.lock"
STATUS_NAME = "daemon.json"


@contextlib.contextmanager
def vault_lock(settings: Settings) -> Iterator[IO[str]]:
    """Hold the vault's daemon lock; raises DaemonError naming the process that has it."""
    make_private_dir(settings.state_dir)
    path = settings.state_dir / LOCK_NAME
    fh = os.fdopen(open_private(path, os.O_RDWR | os.O_APPEND), "a+", encoding="utf-8")
    try:
        fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        fh.seek(0)
        holder = fh.read().strip() or "another process"
        fh.close()
        raise DaemonError(
            f"another memcore watch (pid {holder}) is already watching {settings.vault}"
        ) from None
    fh.seek(0)
    fh.truncate()
    fh.write(str(os.getpid()))
    fh.flush()
    try:
        yield fh
    finally:
        with contextlib.suppress(OSError):
            (settings.state_dir / STATUS_NAME).unlink()
        fcntl.flock(fh, fcntl.LOCK_UN)
        fh.close()


def daemon_status(settings: Settings) -> dict[str, object] | None:
    """What the running daemon last reported, or None when no daemon holds the vault."""
    return status_in(settings.state_dir)


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


def write_status(settings: Settings, info: dict[str, object]) -> None:
    """Publish the daemon's state (0600: only this user reads it), replacing the last."""
    target = settings.state_dir / STATUS_NAME
    tmp = target.with_suffix(".tmp")
    with os.fdopen(open_private(tmp, os.O_WRONLY | os.O_TRUNC), "w", encoding="utf-8") as fh:
        fh.write(json.dumps(info))
    os.replace(tmp, target)
