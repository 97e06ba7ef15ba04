"""The watch daemon's lock and status file (one daemon per vault)."""

from __future__ import annotations

import json
import os

from memcore.settings import Settings


def daemon_status(settings: Settings) -> dict[str, object] | None:
    """What the running daemon last reported, or None when no daemon holds the vault."""
    path = settings.state_dir / "daemon.json"
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        pid = int(info["pid"])
        os.kill(pid, 0)
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return dict(info)
