"""Agent frameworks' own Mem0 integrations, unchanged, against a live `memcore serve` with the
default model (#53): llama-index's Mem0Memory, autogen-ext's Mem0Memory, agno's Mem0Tools,
crewai's Mem0Storage, strands' Mem0MemoryStore and Mem0's own MCP server. Each stores, finds
(at the threshold the integration sends, with the one setting docs/mem0.md recommends), lists
and forgets through its own calls, for two users that never see each other's memories.

The integrations live in three pinned environments (tests/clients/frameworks/*.txt, every
package by hash), installed under .venv/frameworks on first use: they disagree on the mem0ai
client (crewai holds it at 0.1, autogen and agno need 1.0, llama-index 2.x)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO
from tests.support import free_port, wait_ready

FRAMEWORKS = Path(__file__).resolve().parent / "clients" / "frameworks"
INSTALLED = REPO / ".venv" / "frameworks"
TOKEN = "frameworks-key"
ENVIRONMENTS = ("mem0-2", "mem0-1", "crewai")
QUIET = {  # no telemetry leaves the test (there is no network to send it to anyway)
    "MEM0_TELEMETRY": "false", "CREWAI_TELEMETRY_OPT_OUT": "true", "OTEL_SDK_DISABLED": "true",
    "AGNO_TELEMETRY": "false", "ANONYMIZED_TELEMETRY": "false",
}  # fmt: skip


def environment(name: str) -> Path:
    """The Python of environment ``name`` (tests/clients/frameworks/NAME.txt), made on first use.
    A marker written last keeps a half-made environment from being taken as ready."""
    folder = INSTALLED / name
    python, ready = folder / "bin" / "python", folder / ".installed"
    lock = FRAMEWORKS / f"{name}.txt"
    if ready.exists() and ready.read_text() == lock.read_text():
        return python
    subprocess.run([sys.executable, "-m", "venv", "--clear", str(folder)], check=True)
    for pins in (FRAMEWORKS / "pip.txt", lock):  # the pip it is made with first
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "--require-hashes", "-r", str(pins)],
            check=True, timeout=900,
        )  # fmt: skip
    ready.write_text(lock.read_text())
    return python


@pytest.fixture(scope="module")
def pythons() -> dict[str, Path]:
    with ThreadPoolExecutor(len(ENVIRONMENTS)) as pool:
        return dict(zip(ENVIRONMENTS, pool.map(environment, ENVIRONMENTS), strict=True))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`memcore serve` on a vault of its own, with the default (local MiniLM) model and the
    setting docs/mem0.md gives frameworks that send Mem0-calibrated thresholds."""
    vault = tmp_path_factory.mktemp("frameworks")
    (vault / "memcore.toml").write_text("[mem0]\nthreshold_ceiling = 0.35\n")
    home = tmp_path_factory.mktemp("home")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMCORE_", "MEM0_"))}
    env |= {"HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"), "MEMCORE_TOKEN": TOKEN}
    port = free_port()
    cmd = [sys.executable, "-m", "memcore", "--vault", str(vault), "serve", "--port", str(port)]
    log = (vault.parent / "serve.log").open("w")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        url = f"http://127.0.0.1:{port}"
        assert wait_ready(url), (vault.parent / "serve.log").read_text()
        yield url, vault
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
    served = (vault.parent / "serve.log").read_text()
    assert "Traceback" not in served, served


def drive(python: Path, script: str, url: str) -> dict[str, Any]:
    """Run tests/clients/frameworks/SCRIPT with an environment's Python; its JSON answer."""
    env = {**os.environ, **QUIET, "PYTHONPATH": str(FRAMEWORKS), "HOME": str(Path.home())}
    run = subprocess.run(
        [str(python), str(FRAMEWORKS / script), url, TOKEN],
        capture_output=True, text=True, timeout=300, env=env, cwd=FRAMEWORKS,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-4000:]
    out: dict[str, Any] = json.loads(run.stdout.strip().splitlines()[-1])
    return out


def texts(listing: Any) -> list[str]:
    """The memories of a Mem0 listing, a page or a bare list."""
    rows = listing["results"] if isinstance(listing, dict) else listing
    return [row["memory"] for row in rows]


def in_markdown(vault: Path, user: str) -> str:
    page = vault / "memory" / "users" / user / "core.md"
    return page.read_text() if page.exists() else ""


def test_llama_index_memory_with_a_ready_client(
    pythons: dict[str, Path], live: tuple[str, Path]
) -> None:
    url, vault = live
    out = drive(pythons["mem0-2"], "drive_llama_index.py", url)
    # the system message llama-index builds from the search holds Lena's memory, not Omar's
    assert "Lena keeps bees on her roof in Lisbon" in out["system"]
    assert "Omar" not in out["system"]
    assert texts(out["list"]) == ["Lena keeps bees on her roof in Lisbon"]
    assert out["delete_all"]["deleted"] == 1
    assert texts(out["left"]) == [] and "Lena keeps bees" not in in_markdown(vault, "lena")
    assert texts(out["other"]) == ["Omar grows tomatoes in Porto"]
    assert "Omar grows tomatoes in Porto" in in_markdown(vault, "omar")


def test_autogen_mem0_memory_aimed_at_memcore(
    pythons: dict[str, Path], live: tuple[str, Path]
) -> None:
    url, vault = live
    out = drive(pythons["mem0-1"], "drive_autogen.py", url)
    [[content, metadata]] = out["query"]
    assert content == "Ana is allergic to peanuts"
    assert metadata["kind"] == "health" and 0.35 <= metadata["score"] <= 1
    assert out["left"] == [] and "peanuts" not in in_markdown(vault, "ana")  # clear()
    assert out["other"] == ["Ben plays the cello"]


def test_agno_mem0_tools_with_their_default_infer(
    pythons: dict[str, Path], live: tuple[str, Path]
) -> None:
    url, vault = live
    out = drive(pythons["mem0-1"], "drive_agno.py", url)
    # infer=True without an LLM: stored as given, and the answer says so
    assert texts(out["add"]) == ["Ivy's cat is called Miso"]
    assert "stored as given" in " ".join(out["add"]["warnings"])
    assert texts(out["search"])[0] == "Ivy's cat is called Miso"
    assert texts(out["list"]) == ["Ivy's cat is called Miso"]
    assert out["delete_all"] == "Successfully deleted all memories for user_id: ivy."
    assert out["left"] == [] and "Miso" not in in_markdown(vault, "ivy")
    assert texts(out["other"]) == ['{"pet": "dog", "name": "Rex"}']


def test_crewai_external_memory_at_its_default_threshold(
    pythons: dict[str, Path], live: tuple[str, Path]
) -> None:
    url, vault = live
    out = drive(pythons["crewai"], "drive_crewai.py", url)
    found = out["search"]
    assert texts(found)[0] == "Kim's flight to Oslo leaves at 7:40 on Monday"
    assert found[0]["content"] == found[0]["memory"]  # what crewai's contextual memory reads
    assert found[0]["metadata"] == {"type": "external", "task": "travel"}
    assert all(hit["user_id"] == "kim" for hit in found)
    assert texts(out["list"]) == ["Kim's flight to Oslo leaves at 7:40 on Monday"]
    assert out["delete_all"]["deleted"] == 1
    assert texts(out["left"]) == [] and "Oslo" not in in_markdown(vault, "kim")
    assert texts(out["other"]) == ["Lou's flight to Rome leaves on Friday"]


def test_strands_mem0_memory_store(pythons: dict[str, Path], live: tuple[str, Path]) -> None:
    url, vault = live
    out = drive(pythons["mem0-2"], "drive_strands.py", url)
    assert out["add"]["results"][0]["metadata"] == {"team": "ops", "source": "STRANDS"}
    assert texts(out["add_messages"]) == ["Cleo prefers Terraform over Pulumi"]
    [content, metadata] = out["search"][0]
    assert content == "Cleo deploys on Tuesdays only" and metadata["user_id"] == "cleo"
    assert sorted(texts(out["list"])) == [
        "Cleo deploys on Tuesdays only", "Cleo prefers Terraform over Pulumi"]  # fmt: skip
    assert out["delete_all"]["deleted"] == 2
    assert texts(out["left"]) == [] and "Terraform" not in in_markdown(vault, "cleo")
    assert out["other"] == ["Dev deploys on Fridays"]


def test_mem0_mcp_server_aimed_at_memcore(pythons: dict[str, Path], live: tuple[str, Path]) -> None:
    url, vault = live
    out = drive(pythons["mem0-2"], "drive_mem0_mcp.py", url)
    assert {"add_memory", "search_memories", "get_memories", "delete_all_memories"} <= set(
        out["tools"]
    )
    calls = [c for name, cs in out.items() if name != "tools" for c in cs]
    assert not any(c["is_error"] or "error" in c["value"] for c in calls), calls
    added = [texts(c["value"]) for c in out["add_memory"]]
    assert added == [["Mara runs the night shift at the bakery"],
                     ["Nils runs the day shift at the bakery"]]  # fmt: skip
    [search] = out["search_memories"]
    assert texts(search["value"]) == ["Mara runs the night shift at the bakery"]  # mara only
    before, after, nils = (c["value"] for c in out["get_memories"])
    assert texts(before) == ["Mara runs the night shift at the bakery"]
    names = {e["name"] for e in out["list_entities"][0]["value"]["results"]}
    assert {"mara", "nils"} <= names
    assert out["delete_all_memories"][0]["value"]["deleted"] == 1
    assert texts(after) == [] and "night shift" not in in_markdown(vault, "mara")
    assert texts(nils) == ["Nils runs the day shift at the bakery"]
