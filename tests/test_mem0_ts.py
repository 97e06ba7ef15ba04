"""The official Mem0 TypeScript client (npm ``mem0ai``, pinned in tests/ts/package.json)
against `memcore serve`: add, search, OR filters, get, update, history, users, batch update,
delete_users, delete; an unsupported operator is an error the client raises."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from memcore.service import MemoryService
from tests.test_http import server

TS = Path(__file__).resolve().parent / "ts"
NODE = shutil.which("node")
NPM = shutil.which("npm")


TS_V2 = TS.parent / "ts-v2"  # the 2.x client: its peer dependencies conflict with 3.x's


def npm_ci(folder: Path, package: str = "mem0ai") -> Path:
    """``folder`` with its node_modules, installed from its lock file on first use (tried
    twice: a registry's hiccup is not a failure of memcore; a second one says what npm said)."""
    if NODE is None or NPM is None:
        pytest.skip("node and npm are not installed: the TypeScript client cannot run")
    for attempt in (1, 2):
        if (folder / "node_modules" / package).is_dir():
            break
        run = subprocess.run(
            # no install scripts: the clients need none, and one (better-sqlite3, for Mem0's
            # own local store) would build from sources it downloads, which a CI cannot reach
            [NPM, "ci", "--no-audit", "--no-fund", "--ignore-scripts"], cwd=folder,
            capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        if run.returncode and attempt == 2:
            raise AssertionError(f"npm ci in {folder} failed:\n{run.stdout}\n{run.stderr}")
    return folder


@pytest.fixture(scope="module")
def ts_client() -> Path:
    """tests/ts (npm mem0ai 3.x) installed, and its script."""
    return npm_ci(TS) / "mem0_client.mjs"


async def test_the_official_typescript_client_works_against_memcore(
    service: MemoryService, ts_client: Path
) -> None:
    async with server(service, token="ts-key") as url:
        run = await asyncio.to_thread(
            subprocess.run,
            [str(NODE), str(ts_client), url, "ts-key"],
            capture_output=True, text=True, timeout=120,
            env={**os.environ, "MEM0_TELEMETRY": "false"},
        )  # fmt: skip
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout)
    assert out["added"]["results"][0]["memory"] == "Erin sails on weekends"
    assert [r["memory"] for r in out["search"]["results"]] == ["Erin sails on weekends"]
    # the client hands answers back in camelCase (userId, createdAt)
    assert sorted(r["userId"] for r in out["either"]["results"]) == ["erin", "frank"]
    assert out["get"]["metadata"] == {"topic": "sport"}
    assert [e["event"] for e in out["history"]] == ["ADD", "UPDATE"]
    assert {(e["type"], e["name"]) for e in out["users"]["results"]} == {
        ("user", "erin"), ("user", "frank")}  # fmt: skip
    assert out["after"]["memory"] == "Erin sails often"
    assert "unsupported 'regex'" in out["bad"]
    assert out["deleteUsers"] == {"message": "Entity deleted successfully."}
    assert out["left"]["results"] == []
    assert await service.memories.count() == 0
