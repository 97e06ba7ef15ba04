"""`memcore serve` from start to stop: /health answers at once, /ready says 503 with the
catch-up's progress until the index holds the vault, searches meanwhile say their results may
be incomplete, `serve --no-watch` catches up once too, and SIGTERM lets the requests in flight
finish before the process ends."""

from __future__ import annotations

import asyncio
import errno
import gc
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client

from memcore.core.settings import Settings
from memcore.fronts import daemon as daemon_module
from memcore.fronts.daemon import Daemon
from memcore.fronts.daemon_state import vault_lock
from memcore.fronts.serve import serve
from memcore.service import MemoryService
from tests.conftest import REPO
from tests.support import free_port, wait_ready, write

FILES = 400


def many_notes(vault: Path) -> None:
    write(vault, "MEMORY.md", "# Engine\n\nDiveAdstra uses DX12 by default.\n")
    for n in range(FILES):
        write(vault, f"memory/notes/{n:04d}.md", f"# Note {n}\n\nThe {n}th note about gardens.\n")


async def watch_readiness(url: str, until: float = 60) -> list[dict[str, Any]]:
    """Search, then poll /ready, until it says 200; every answer seen, in order."""
    seen: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + until
        while loop.time() < deadline:
            # the searches first: a 503 after them means they ran during the catch-up
            found = await http.post("/api/memory/search", json={"query": "DX12 render engine"})
            mem0 = await http.post("/v3/memories/search/", json={"query": "DX12"})
            ready = await http.get("/ready")
            seen.append({"status": ready.status_code, **ready.json(),
                         "warnings": found.json().get("warnings", []),
                         "mem0_warnings": mem0.json().get("warnings", [])})  # fmt: skip
            if ready.status_code == 200:
                return seen
            await asyncio.sleep(0.02)
    raise AssertionError(f"/ready never turned 200: {seen[-1]}")


@pytest.mark.parametrize("watch", [True, False], ids=["serve", "serve --no-watch"])
async def test_ready_reports_the_catch_up_and_searches_say_they_may_be_incomplete(
    vault: Path, settings: Settings, service: MemoryService, watch: bool
) -> None:
    many_notes(vault)
    gc.unfreeze()
    port, stop, started = free_port(), asyncio.Event(), asyncio.Event()
    daemon = Daemon(settings, service, stop) if watch else None
    task = asyncio.create_task(serve(service, "127.0.0.1", port, None, stop, daemon, started))
    await asyncio.wait_for(started.wait(), 10)
    url = f"http://127.0.0.1:{port}"
    try:
        async with httpx.AsyncClient(base_url=url) as http:
            health = (await http.get("/health")).json()
        assert health["ok"] is True and health["version"]
        seen = await watch_readiness(url)
        waiting = [s for s in seen if s["status"] == 503]
        assert waiting, "the first /ready answered before any catch-up"
        assert all(not s["ready"] and s["phase"] in ("starting", "catching_up") for s in waiting)
        assert all(s["warnings"] and "results may be incomplete" in s["warnings"][0]
                   for s in waiting)  # fmt: skip
        assert all(s["mem0_warnings"] for s in waiting)
        counted = [s for s in waiting if s["phase"] == "catching_up"]
        if counted:  # progress only grows, and is counted in files of the whole vault
            done = [s["files_done"] for s in counted]
            assert done == sorted(done) and counted[-1]["files_total"] == FILES + 1
        last = seen[-1]
        assert {k: last[k] for k in ("status", "ready", "phase", "files_done", "files_total")} == {
            "status": 200, "ready": True, "phase": "ready", "files_done": FILES + 1,
            "files_total": FILES + 1,
        }  # fmt: skip
        async with httpx.AsyncClient(base_url=url) as http:
            found = (await http.post("/api/memory/search", json={"query": "render engine"})).json()
            status = (await http.get("/api/status")).json()
        assert found["results"][0]["path"] == "MEMORY.md" and "warnings" not in found
        assert status["readiness"] == {"phase": "ready", "files_done": FILES + 1,
                                       "files_total": FILES + 1}  # fmt: skip
        assert status["files"] == FILES + 1
        # once warm and caught up, the heap alive then is left out of later full collections
        # (each walked all of it: ~50 ms stalls under load)
        assert gc.get_freeze_count() > 10_000
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)
        gc.unfreeze()


async def test_mcp_search_during_catch_up_carries_the_warning(
    vault: Path, settings: Settings, service: MemoryService
) -> None:
    many_notes(vault)
    port, stop, started = free_port(), asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(serve(service, "127.0.0.1", port, None, stop, None, started))
    await asyncio.wait_for(started.wait(), 10)
    try:
        async with Client(f"http://127.0.0.1:{port}/mcp") as client:
            first = (await client.call_tool("search", {"query": "gardens"})).structured_content
            status = (await client.call_tool("status", {})).structured_content
            assert first is not None and status is not None
            if status["readiness"]["phase"] != "ready":  # still catching up when asked
                assert "results may be incomplete" in first["warnings"][0]
            await watch_readiness(f"http://127.0.0.1:{port}")
            after = (await client.call_tool("search", {"query": "gardens"})).structured_content
            assert after is not None and after["warnings"] == [] and after["results"]
    finally:
        stop.set()
        await asyncio.wait_for(task, 20)


def test_sigterm_lets_the_request_in_flight_finish(tmp_path: Path) -> None:
    """A transcript save that takes seconds is under way when SIGTERM arrives: it is answered
    200 and on disk; the process then exits 0, and a request after the signal is refused."""
    vault = tmp_path / "vault"
    shutil.copytree(REPO / "sample_vault", vault, ignore=shutil.ignore_patterns(".memcore"))
    port = free_port()
    env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": "static"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "memcore", "--vault", str(vault), "serve", "--port", str(port)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_ready(url)
        roles = ("user", "assistant")
        messages = [{"role": roles[n % 2], "content": f"turn {n} of a long talk"}
                    for n in range(40_000)]  # fmt: skip

        async def save_then_signal() -> httpx.Response:
            async with httpx.AsyncClient(base_url=url, timeout=60) as http:
                saving = asyncio.ensure_future(
                    http.put("/api/conversations/long", json={"messages": messages})
                )
                await asyncio.sleep(0.4)  # the server is reading or writing it now
                assert not saving.done(), "the save finished before the signal: make it longer"
                proc.send_signal(signal.SIGTERM)
                return await saving

        answered = asyncio.run(save_then_signal())
        assert answered.status_code == 200 and answered.json() == {"saved": 40_000}
        assert proc.wait(30) == 0
        transcript = "".join(
            p.read_text(encoding="utf-8") for p in (vault / "memory").rglob("*.md")
        )
        assert "turn 39999 of a long talk" in transcript
        with pytest.raises(httpx.TransportError):
            httpx.get(f"{url}/health", timeout=2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


async def test_a_status_file_that_cannot_be_written_is_not_a_deleted_index(
    settings: Settings, service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 41: any OSError writing daemon.json was read as ".memcore/ was deleted", so a full
    disk restarted the listener over and over. Now only a folder that is gone ends the run."""

    def full(*args: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    daemon = Daemon(settings, service, asyncio.Event(), kind="serve")
    with vault_lock(settings.state_dir, settings.vault):
        monkeypatch.setattr(daemon_module, "write_status", full)
        daemon.publish()
        daemon.publish()
        assert not daemon.lost  # a full disk: serving on
        monkeypatch.undo()
        daemon.publish()
        assert (settings.state_dir / "daemon.json").exists()
        shutil.rmtree(settings.state_dir)
        monkeypatch.setattr(daemon_module, "write_status", full)
        daemon.publish()
        assert daemon.lost  # the folder is gone: a new index


def test_serve_that_cannot_listen_says_why_in_one_line(tmp_path: Path) -> None:
    """A busy port, an address this machine lacks, a missing vault: one line, exit code 2."""
    import socket

    vault = tmp_path / "vault"
    (vault / "memory").mkdir(parents=True)
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    memcore = str(Path(sys.executable).parent / "memcore")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        cases = [
            (["--vault", str(vault), "serve", "--port", str(port)], "the port is in use"),
            (["--vault", str(vault), "serve", "--host", "192.0.2.1", "--token", "t"],
             "this machine has no address 192.0.2.1"),
            (["--vault", str(tmp_path / "none"), "serve"], "none"),
        ]  # fmt: skip
        for argv, said in cases:
            run = subprocess.run([memcore, *argv], capture_output=True, text=True, timeout=60,
                                 env={**os.environ, "MEMCORE_VAULT": ""})  # fmt: skip
            lines = [x for x in run.stderr.splitlines() if not x.startswith("memcore: warning")]
            assert run.returncode == 2 and len(lines) == 1 and said in lines[0], run.stderr


async def test_a_catch_up_stopped_half_way_says_so(
    vault: Path,
    service: MemoryService,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from memcore.service import Readiness

    many_notes(vault)
    stop = asyncio.Event()
    seen = Readiness.progress

    def progress(self: Readiness, phase: str, done: int, total: int) -> None:
        seen(self, phase, done, total)
        if done >= 5:
            stop.set()  # as SIGTERM would, part way

    monkeypatch.setattr(Readiness, "progress", progress)
    with caplog.at_level("INFO", logger="memcore"):
        await service.catch_up(stop)
    said = [r.getMessage() for r in caplog.records if "catching up" in r.getMessage()]
    assert said and "files left for the next start" in said[-1], caplog.text
    assert "caught up with the vault" not in caplog.text


def test_the_listening_socket_says_tcp_so_answers_are_not_held_back() -> None:
    """asyncio sets TCP_NODELAY only on sockets whose protocol says TCP; without it every
    answer waited ~40 ms for the client's delayed ACK (bench/http_api.py shows it)."""
    import socket

    from memcore.fronts.serve import listening

    with listening("127.0.0.1", 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP and sock.type == socket.SOCK_STREAM


def test_sigterm_while_a_large_transcript_is_indexed_exits_by_the_stop_timeout(
    tmp_path: Path,
) -> None:
    """After a 60,000-message transcript is saved, the watcher indexes its pages in batches
    that take seconds each; SIGTERM then must not wait for them (it took 97 s after a 215k
    one): the process leaves by server.stop_timeout_s, and the next start catches up, so the
    transcript and its index are whole."""
    vault = tmp_path / "vault"
    write(vault, "MEMORY.md", "# M\n")
    port = free_port()
    env = {
        **os.environ,
        "MEMCORE_EMBEDDER_PROVIDER": "static",
        "MEMCORE_SERVER_STOP_TIMEOUT_S": "2",
    }
    cmd = [sys.executable, "-m", "memcore", "--vault", str(vault), "serve", "--port", str(port)]
    url = f"http://127.0.0.1:{port}"
    roles = ("user", "assistant")
    messages = [{"role": roles[n % 2], "content": f"turn {n} of a longer talk"}
                for n in range(60_000)]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_ready(url)
        saved = httpx.put(f"{url}/api/conversations/long", json={"messages": messages}, timeout=120)
        assert saved.status_code == 200, saved.text
        proc.send_signal(signal.SIGTERM)
        began = asyncio.run(_now())
        _, log = proc.communicate(timeout=30)
        took = asyncio.run(_now()) - began
        assert proc.returncode == 0, log[-2000:]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=10)
    assert took < 2 + 3, (took, log[-2000:])  # the deadline, and the interpreter's exit
    assert "still stopping after 2 s" in log, log[-2000:]  # it was busy, and did not wait
    again = subprocess.Popen(cmd, env=env, stderr=subprocess.DEVNULL)
    try:
        assert wait_ready(url)
        loaded = httpx.get(f"{url}/api/conversations/long", timeout=60).json()
        assert len(loaded["messages"]) == 60_000
        status = httpx.get(f"{url}/api/status", timeout=60).json()
        assert status["vectors_pending"] == 0 and status["chunks"] >= 60_000, status
    finally:
        again.terminate()
        again.wait(30)


async def _now() -> float:
    return asyncio.get_running_loop().time()
