"""The listener's limits (fronts/serve.py, guarded_protocol) on a real `serve` over loopback:
a request's head has a deadline, idle and slowloris sockets are closed, a flood of connections
is capped, and clients that behave are answered throughout."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import httpx

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

        # a flood of idle sockets, past the cap
        idle = await asyncio.to_thread(lambda: [connect() for _ in range(80)])
        # the ones over the cap are closed at once; a client that behaves is still answered
        over = await asyncio.to_thread(lambda: sum(closed_by_server(s, 0.2) for s in idle[50:]))
        assert over == 30
        started = time.monotonic()
        # the idle ones under the cap go after the head deadline, and new clients get in
        closed = await asyncio.to_thread(lambda: sum(closed_by_server(s, 3) for s in idle[:40]))
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
