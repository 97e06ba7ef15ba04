"""`memcore serve`: the HTTP API (uvicorn) and the watcher in one process, on one service."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
from collections.abc import Iterator, Mapping

import uvicorn

from memcore.api import build_app
from memcore.daemon import Daemon
from memcore.errors import ConfigError, DaemonError, MemcoreError
from memcore.mcp_server import build_mcp
from memcore.service import MemoryService

log = logging.getLogger(__name__)


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_binding(host: str, token: str | None, scoped: Mapping[str, object] | None = None) -> None:
    """Off loopback, every request must carry a token: refuse to start without one."""
    if not is_loopback(host) and not token and not scoped:
        raise ConfigError(
            f"serving on {host} (not loopback) needs a token: pass --token or set MEMCORE_TOKEN"
        )


class _Server(uvicorn.Server):
    """uvicorn without its own signal handling: our stop event ends it (and the watcher)."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


async def serve(
    service: MemoryService,
    host: str,
    port: int,
    token: str | None,
    stop: asyncio.Event,
    daemon: Daemon | None = None,
    started: asyncio.Event | None = None,
    scoped: Mapping[str, Mapping[str, str]] | None = None,
) -> None:
    """Answer HTTP on host:port (and keep the index current with ``daemon``) until ``stop``.
    ``scoped`` maps extra tokens to the scope (user_id/agent_id/run_id) their holder is held to."""
    check_binding(host, token, scoped)
    mcp = build_mcp(service)
    mcp_routes = mcp.streamable_http_app(streamable_http_path="/mcp", host=host).routes
    config = uvicorn.Config(
        build_app(service, token, mcp_routes, scoped), host=host, port=port, log_level="warning",
        lifespan="off", access_log=False, timeout_graceful_shutdown=5,
    )  # fmt: skip
    server = _Server(config)

    async def until_stopped() -> None:
        while not server.started and not server.should_exit:  # noqa: ASYNC110 - no event
            await asyncio.sleep(0.02)  # uvicorn sets a flag, not an event
        if server.started:
            log.info("serving http://%s:%d", host, port)
            if started is not None:
                started.set()
        await stop.wait()
        server.should_exit = True

    try:
        async with mcp.session_manager.run(), asyncio.TaskGroup() as tg:
            tg.create_task(server.serve())
            tg.create_task(until_stopped())
            if daemon is not None:
                tg.create_task(daemon.run())
    except BaseExceptionGroup as group:  # one line for the person: the watcher's own error
        first: BaseException = group
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        if isinstance(first, DaemonError):
            raise DaemonError(f"{first}; run `memcore serve --no-watch` beside it") from None
        if isinstance(first, MemcoreError):
            raise first from None
        raise
    if not server.started:
        raise ConfigError(f"could not listen on {host}:{port} (in use?)")
