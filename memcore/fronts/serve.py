"""`memcore serve`: the HTTP API (uvicorn) and the watcher in one process, on one service."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import logging
import os
import socket
import tempfile
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

import uvicorn

from memcore.core.errors import ConfigError, DaemonError, MemcoreError
from memcore.core.heap import freeze_after
from memcore.core.workers import loop_first
from memcore.fronts.daemon import Daemon
from memcore.fronts.http.app import LOOPBACK_NAMES, build_app
from memcore.fronts.listener import AcceptFailures, limits_of
from memcore.fronts.mcp import build_mcp
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


SOCKET_NAME = "daemon.sock"
MAX_SOCKET_PATH = 100  # AF_UNIX paths are limited to ~107 bytes


def socket_path(home: Path) -> Path | None:
    """Where the daemon whose folder is ``home`` answers this vault's CLI, or None when the
    path would be too long."""
    path = home / SOCKET_NAME
    return path if len(str(path).encode()) <= MAX_SOCKET_PATH else None


def _private_socket(path: Path) -> socket.socket:
    """A Unix socket only this user can connect to (uvicorn would make it world-writable).
    It is bound inside a fresh 0700 folder, made 0600, then renamed into place, so no other
    user can connect at any moment, and the process umask (shared by threads) is left alone."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a crashed daemon's: the vault lock says no other daemon runs
    private = Path(tempfile.mkdtemp(prefix=".sock-", dir=path.parent))
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(private / "s"))
        os.chmod(private / "s", 0o600)
        os.replace(private / "s", path)
    except OSError:
        sock.close()
        raise
    finally:
        with contextlib.suppress(OSError):
            (private / "s").unlink()
        private.rmdir()
    sock.listen(64)
    return sock


async def serve_socket(service: MemoryService, daemon: Daemon) -> None:
    """memcore's own API on ``.memcore/daemon.sock`` while ``daemon`` runs, so a one-shot
    `memcore search` can ask it instead of loading the model and the index (no token: only
    this user can open the socket). Starts once the daemon holds the vault lock."""
    path = socket_path(daemon.home)
    locked = asyncio.ensure_future(daemon.locked.wait())
    stopped = asyncio.ensure_future(daemon.ended.wait())
    await asyncio.wait({locked, stopped}, return_when=asyncio.FIRST_COMPLETED)
    locked.cancel()
    stopped.cancel()
    if path is None or daemon.ended.is_set():
        return
    try:
        sock = _private_socket(path)
    except OSError as exc:
        log.warning("cannot listen on %s (%s); the CLI opens the index itself", path, exc)
        return
    config = uvicorn.Config(
        build_app(service, None), log_level="warning", lifespan="off", access_log=False,
        timeout_graceful_shutdown=2, **limits_of(service.settings),
    )  # fmt: skip
    server = _Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        while not server.started and not task.done():  # noqa: ASYNC110 - uvicorn sets a flag
            await asyncio.sleep(0.01)
        daemon.socket = str(path)
        daemon.publish()
        await daemon.ended.wait()
    finally:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()  # first: no new command connects to a daemon that is leaving
        daemon.socket = None
        server.should_exit = True
        await asyncio.gather(task, return_exceptions=True)
        sock.close()


async def _until_stopped(
    server: _Server,
    stop: asyncio.Event,
    daemon: Daemon | None,
    started: asyncio.Event | None,
    where: str,
) -> None:
    """Tell ``started`` once uvicorn listens; end it when ``stop`` is set, or when the daemon
    ends by itself (.memcore/ was deleted: the caller serves again on a new index)."""
    while not server.started and not server.should_exit:  # noqa: ASYNC110 - no event
        await asyncio.sleep(0.02)  # uvicorn sets a flag, not an event
    if server.started:
        log.info("serving http://%s", where)
        if started is not None:
            started.set()
    ending = [asyncio.ensure_future(stop.wait())]
    if daemon is not None:
        ending.append(asyncio.ensure_future(daemon.ended.wait()))
    await asyncio.wait(ending, return_when=asyncio.FIRST_COMPLETED)
    for waiting in ending:
        waiting.cancel()
    server.should_exit = True


def listening(host: str, port: int) -> socket.socket:
    """The server's socket, bound here so that a port in use, a port it may not take or an
    address this machine lacks is one line (uvicorn would exit from inside its task)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named: asyncio turns Nagle off (TCP_NODELAY) only on sockets that say TCP,
    # and with it on every answer waits ~40 ms for the client's delayed ACK
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        where = f"{host}:{port}"
        why = {
            errno.EADDRINUSE: "the port is in use (another memcore serve? choose another with "
            "--port)",
            errno.EACCES: "permission denied (ports below 1024 need privileges; use --port 8765)",
            errno.EADDRNOTAVAIL: f"this machine has no address {host} (--host)",
        }.get(exc.errno or 0, exc.strerror or str(exc))
        raise ConfigError(f"cannot serve on {where}: {why}") from None
    return sock


def _one_error(group: BaseExceptionGroup[BaseException]) -> BaseException:
    first: BaseException = group
    while isinstance(first, BaseExceptionGroup):
        first = first.exceptions[0]
    if isinstance(first, DaemonError):
        return DaemonError(f"{first}; run `memcore serve --no-watch` beside it")
    return first if isinstance(first, MemcoreError) else group


async def serve(
    service: MemoryService,
    host: str,
    port: int,
    token: str | None,
    stop: asyncio.Event,
    daemon: Daemon | None = None,
    started: asyncio.Event | None = None,
    scoped: Mapping[str, Mapping[str, str]] | None = None,
    allowed_hosts: Collection[str] = (),
) -> None:
    """Answer HTTP on host:port (and keep the index current with ``daemon``) until ``stop``.
    ``scoped`` maps extra tokens to the scope (user_id/agent_id/run_id) their holder is held to.
    Requests must name this server in their Host header: a loopback name, the bound address,
    or one of ``allowed_hosts``."""
    check_binding(host, token, scoped)
    asyncio.get_running_loop().set_exception_handler(AcceptFailures())
    hosts = {*LOOPBACK_NAMES, *allowed_hosts}
    if host not in ("0.0.0.0", "::", ""):
        hosts.add(f"[{host}]" if ":" in host else host)
    mcp = build_mcp(service)
    mcp_routes = mcp.streamable_http_app(streamable_http_path="/mcp", host=host).routes
    config = uvicorn.Config(
        build_app(service, token, mcp_routes, scoped, hosts, pages=True), host=host, port=port,
        log_level="warning",
        lifespan="off", access_log=False, timeout_graceful_shutdown=5,
        **limits_of(service.settings),
    )  # fmt: skip
    server = _Server(config)
    sock = listening(host, port)
    if daemon is None:
        service.readiness.phase = "starting"  # service.catch_up below ends it
    try:  # loop_first: the loop answers while worker threads index what a request wrote
        with loop_first():
            async with mcp.session_manager.run(), asyncio.TaskGroup() as tg:
                tg.create_task(server.serve(sockets=[sock]))
                tg.create_task(_until_stopped(server, stop, daemon, started, f"{host}:{port}"))
                if daemon is not None:
                    tg.create_task(daemon.run())
                    tg.create_task(serve_socket(service, daemon))
                else:
                    tg.create_task(freeze_after(service.catch_up(stop)))
    except BaseExceptionGroup as group:  # one line for the person: the watcher's own error
        raise _one_error(group) from None
    finally:
        sock.close()  # uvicorn leaves a socket it was handed to its owner
    if not server.started:
        raise ConfigError(f"could not listen on {host}:{port} (in use?)")
