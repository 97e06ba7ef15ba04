"""Every generation of the official Mem0 clients a migrating team may still run, against a live
`memcore serve`: Python ``mem0ai`` 0.1.x and 1.0.x (pinned with hashes in tests/clients/,
installed beside memcore with --no-deps on first use), 2.x (memcore[mem0]), and npm ``mem0ai``
2.x and 3.x (tests/ts/package-lock.json). Each lists, pages, searches, reads, updates, reads
history, lists users and deletes; a platform-only call is refused with a 501 that says so."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from memcore.service import MemoryService
from tests.conftest import REPO
from tests.test_http import server
from tests.test_mem0_ts import NODE, TS, TS_V2, npm_ci

CLIENTS = Path(__file__).resolve().parent / "clients"
INSTALLED = REPO / ".venv" / "mem0-clients"


def old_client(version: str) -> Path:
    """The folder holding Python mem0ai ``version`` (its requirements file pins it by hash),
    installed there on first use."""
    target = INSTALLED / version
    if not (target / "mem0" / "client").is_dir():
        subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--require-hashes",
             "--target", str(target), "-r", str(CLIENTS / f"mem0ai-{version}.txt")],
            check=True, timeout=300,
        )  # fmt: skip
    return target


async def drive_python(url: str, token: str, path: Path | None) -> dict[str, Any]:
    """tests/clients/mem0_py.py with the client at ``path`` (None: memcore's own mem0ai)."""
    env = {**os.environ, "MEM0_TELEMETRY": "false"}
    env["PYTHONPATH"] = str(path) if path is not None else ""
    run = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, str(CLIENTS / "mem0_py.py"), url, token],
        capture_output=True, text=True, timeout=120, env=env, cwd=CLIENTS,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out: dict[str, Any] = json.loads(run.stdout)
    return out


def results(answer: Any) -> list[dict[str, Any]]:
    """A listing's memories, whether the client hands back the page or its results."""
    rows = answer["results"] if isinstance(answer, dict) else answer
    assert isinstance(rows, list), answer
    return rows


def check_session(out: dict[str, Any]) -> None:
    """What every client generation must see (tests/clients/mem0_py.py's session)."""
    assert out["org"] == ["memcore", "default"]  # from the ping, then sent on every call
    page = out["list_v2"]
    # 6 memories match the OR: page 2 of size 4 holds the last 2, and says so exactly
    assert page["count"] == 6 and len(page["results"]) == 2, page
    assert page["next"] is None
    assert page["previous"].endswith("/memories/?page=1&page_size=4"), page["previous"]
    assert len(results(out["list_v2_scope"])) == 5
    assert [r["memory"] for r in results(out["search_v2"])] == ["Erin sails on weekends"]
    got = out["get"]
    assert got["memory"] == "Erin sails on weekends" and got["metadata"] == {"topic": "sport"}
    assert got["hash"] and got["immutable"] is False and got["expiration_date"] is None
    assert out["update"]["memory"] == "Erin sails often"
    history = out["history"]
    assert [e["event"] for e in history] == ["ADD", "UPDATE"]
    assert history[1]["old_memory"] == "Erin sails on weekends"
    assert history[1]["user_id"] == "erin" and history[1]["categories"] == ["core"]
    assert "input" in history[0] and history[0]["metadata"] == {"topic": "sport"}
    assert "error" in out["history_unknown"]  # a 404, not an empty history
    assert {(e["type"], e["name"]) for e in out["users"]["results"]} == {
        ("user", "erin"), ("user", "frank")}  # fmt: skip
    assert "not supported by memcore" in out["export"]["error"]
    assert "error" not in out["delete"] and "error" not in out["delete_all"]
    assert "error" not in out["delete_users_none"]  # nothing to delete is done already
    assert results(out["left"]) == []


@pytest.mark.parametrize("version", ["0.1", "1.0"])
async def test_old_python_clients_list_page_search_and_manage(
    service: MemoryService, version: str
) -> None:
    path = await asyncio.to_thread(old_client, version)
    async with server(service, token="old-key") as url:
        out = await drive_python(url, "old-key", path)
    check_session(out)
    if version == "0.1":  # the v1 routes: GET /v1/memories/ and POST /v1/memories/search/
        assert [r["memory"] for r in results(out["list_v1"])] == ["Erin sails on weekends"]
        assert [r["memory"] for r in results(out["search_v1"])] == ["Erin sails on weekends"]


async def test_current_python_client_runs_the_same_session(service: MemoryService) -> None:
    async with server(service, token="new-key") as url:
        out = await drive_python(url, "new-key", None)
    check_session(out)


async def test_old_and_new_typescript_clients_side_by_side(service: MemoryService) -> None:
    """npm mem0ai 2.x (v1 listing by query string, v2 search) and 3.x, one after the other
    on one server: each lists, pages, searches and hits a platform-only route."""
    folders = [await asyncio.to_thread(npm_ci, f) for f in (TS_V2, TS)]
    async with server(service, token="ts-key") as url:
        outs = {}
        for folder in folders:
            run = await asyncio.to_thread(
                subprocess.run,
                [str(NODE), str(CLIENTS / "mem0_generations.mjs"), url, "ts-key", str(folder)],
                capture_output=True, text=True, timeout=120,
                env={**os.environ, "MEM0_TELEMETRY": "false"},
            )  # fmt: skip
            assert run.returncode == 0, run.stderr
            outs[folder.name] = json.loads(run.stdout)
    for name, out in outs.items():
        assert out["count"] == 6, (name, out)
        assert out["pageTwo"] == 2 and out["next"] is None, (name, out)
        assert out["search"] == ["Gail sails on weekends"], (name, out)
        assert out["history"] == ["ADD", "UPDATE"], (name, out)
        assert "not supported by memcore" in out["webhooks"], (name, out)
        assert out["left"] == 0, (name, out)
    assert outs["ts-v2"]["v1"] == [5, 2]  # GET /v1/memories/?user_id=...&page=1&page_size=2
