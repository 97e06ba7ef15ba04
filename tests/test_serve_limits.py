"""The listener's limits (fronts/listener.py) on a real `serve` over loopback:
a request's head has a deadline, idle and slowloris sockets are closed, a flood of connections
is capped, and clients that behave are answered throughout."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import httpx
import pytest

from memcore.core.settings import load_settings
from memcore.service import MemoryService
from tests.conftest import make_service
from tests.support import FakeEmbedder
from tests.test_http import server

LIMITS = {
    "server.header_timeout_s": 0.5,
    "server.idle_timeout_s": 0.5,
    "server.max_connections": 40,
}


def closed_by_server(sock: socket.socket, within: float) -> bool:
    """Whether the server closes ``sock`` (recv sees EOF or a reset) within the time."""
    sock.settimeout(within)
    try:
        return sock.recv(1024) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


async def test_idle_and_slow_heads_are_closed_and_a_flood_is_capped(vault: Path) -> None:
    settings = load_settings(vault, LIMITS)
    async with make_service(settings, FakeEmbedder()) as svc:
        await _walk(svc)


async def _walk(svc: MemoryService) -> None:
    async with server(svc) as url, httpx.AsyncClient(base_url=url, timeout=5) as http:
        port = int(url.rsplit(":", 1)[1])

        def connect() -> socket.socket:
            return socket.create_connection(("127.0.0.1", port), timeout=5)

        # a flood of idle sockets, past the cap: each new one takes the place of the one that
        # has waited on its client the longest, so the first 40 are closed at once
        idle = await asyncio.to_thread(lambda: [connect() for _ in range(80)])
        first = await asyncio.to_thread(lambda: sum(closed_by_server(s, 0.2) for s in idle[:40]))
        assert first == 40
        started = time.monotonic()
        # the last 40 go after the head deadline, and new clients get in
        closed = await asyncio.to_thread(lambda: sum(closed_by_server(s, 3) for s in idle[40:]))
        assert closed == 40 and time.monotonic() - started < 3
        assert (await http.get("/health")).status_code == 200
        # slowloris: a head sent a byte at a time never completes, and is cut at the deadline
        slow = await asyncio.to_thread(connect)

        def dribble() -> float:
            began = time.monotonic()
            for byte in b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ":
                try:
                    slow.sendall(bytes([byte]))
                except OSError:
                    return time.monotonic() - began
                time.sleep(0.05)
            return time.monotonic() - began if closed_by_server(slow, 2) else -1.0

        lasted = await asyncio.to_thread(dribble)
        assert 0.4 < lasted < 2.5, lasted
        # a kept-alive client that sends its next request in time is served, twice
        assert (await http.get("/health")).status_code == 200
        await asyncio.sleep(0.2)
        assert (await http.get("/health")).status_code == 200
        for s in [*idle, slow]:
            s.close()


async def test_a_flood_of_slow_bodies_is_shed_and_health_answers_throughout(
    vault: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """45 connections past a cap of 40, each a full head announcing 100 kB and then a byte at
    a time: each is closed once its pace falls short (min_body_rate after the head deadline),
    and a new client takes the place of the stalest meanwhile, so /health answers every time,
    quickly, from the start of the flood to its end."""
    limits = {**LIMITS, "server.body_timeout_s": 5.0, "server.min_body_rate": 200}
    settings = load_settings(vault, limits)
    async with make_service(settings, FakeEmbedder()) as svc, server(svc) as url:
        port = int(url.rsplit(":", 1)[1])
        head = (b"POST /api/memories HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                b"Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{")  # fmt: skip

        def open_slow() -> list[socket.socket]:
            socks = []
            for _ in range(45):
                s = socket.create_connection(("127.0.0.1", port), timeout=5)
                s.sendall(head)
                socks.append(s)
            return socks

        slow = await asyncio.to_thread(open_slow)
        stop = asyncio.Event()

        def dribble() -> int:
            """A byte a tenth of a second on each until the server closes it; how many did."""
            shut: set[int] = set()
            while not stop.is_set() and len(shut) < len(slow):
                for n, s in enumerate(slow):
                    if n in shut:
                        continue
                    try:
                        s.sendall(b" ")
                    except OSError:
                        shut.add(n)
                time.sleep(0.1)
            return len(shut)

        dribbling = asyncio.create_task(asyncio.to_thread(dribble))
        waits = []
        began = time.monotonic()
        while time.monotonic() - began < 3.5:
            t0 = time.monotonic()
            async with httpx.AsyncClient(base_url=url, timeout=5) as fresh:  # a new connection
                assert (await fresh.get("/health")).status_code == 200
            waits.append(time.monotonic() - t0)
            await asyncio.sleep(0.05)
        stop.set()
        shut = await dribbling
        for s in slow:
            s.close()
    assert shut == 45  # every slow body was closed (too slow, or its place taken)
    assert max(waits) < 0.5, max(waits)  # generous for a loaded CI machine; bench: 100 ms
    assert not [r for r in caplog.records if r.levelno >= 40], "a closed body logged an error"


def test_at_a_1024_handle_limit_1010_connections_log_no_traceback_flood(tmp_path: Path) -> None:
    """`memcore serve` under a hard limit of 1,024 open files (the common default): it keeps
    max_connections below what the limit leaves (and says so once), so 1,010 connections are
    capped, not accept() failures; /health answers throughout, and the log stays a few lines."""
    import os
    import resource
    import subprocess
    import sys

    from tests.support import free_port, wait_ready, write

    need = 1200  # this test's own sockets
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    vault = tmp_path / "vault"
    write(vault, "MEMORY.md", "# M\n\nA note.\n")
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCORE_")}
    env["MEMCORE_EMBEDDER_PROVIDER"] = "static"

    def at_1024() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (1024, 1024))

    cmd = [sys.executable, "-m", "memcore", "--vault", str(vault), "serve", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True,
                            preexec_fn=at_1024)  # fmt: skip
    socks: list[socket.socket] = []
    try:
        assert wait_ready(f"http://127.0.0.1:{port}", 120)
        for _ in range(1010):
            socks.append(socket.create_connection(("127.0.0.1", port), timeout=5))
        time.sleep(1.5)
        for _ in range(3):
            assert httpx.get(f"http://127.0.0.1:{port}/health", timeout=5).status_code == 200
    finally:
        for s in socks:
            s.close()
        proc.terminate()
        _, log = proc.communicate(timeout=60)
    assert "Traceback" not in log, log[-3000:]
    assert len(log.splitlines()) < 30, log[-3000:]
    assert "server.max_connections lowered from 1000 to" in log, log
