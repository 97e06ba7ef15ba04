"""The listener's limits that uvicorn lacks (``server.*`` settings), for `memcore serve`.

uvicorn's h11 protocol arms its keep-alive timer only after a response, so a connection that
never sent a request, sent its head a byte at a time (slowloris) or its body a byte at a time
was held for ever, and nothing bounded how many were open: 20,000 idle sockets made new clients
time out, and 1,005 slow bodies made /health fail for as long as they lasted. Here:

- a request's head must arrive within ``header_timeout_s``;
- its body must not pause for ``body_timeout_s`` and must average ``min_body_rate`` bytes a
  second once ``header_timeout_s`` has passed (while the app reads what came, not counted);
- past ``max_connections`` open, a new connection takes the place of the stalest one that is
  only waiting on its client (the longest a head, a body or a next request is awaited); when
  every one is busy with the app's answer, the new one is closed at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import random
import resource
import time
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

from memcore.core.settings import ServerSettings, Settings

log = logging.getLogger(__name__)

WARN_EVERY_S = 10.0  # a flood of refused connections is said once in so long
CHECK_EVERY_S = 1.0  # how often a body's pace is checked


class GuardedH11(H11Protocol):
    """uvicorn's h11 protocol with the limits of ``limits`` (a subclass per server sets it)."""

    limits: ServerSettings = ServerSettings()
    every = CHECK_EVERY_S  # how often a body's pace is checked
    _head_timer: asyncio.TimerHandle | None = None
    _body_timer: asyncio.TimerHandle | None = None
    _warned_at = 0.0
    _waiting_since = 0.0  # when it began waiting on its client (head, body or next request)
    _last_byte = 0.0
    _bytes = 0  # received in all
    _body_from: tuple[float, int] = (0.0, 0)  # (when, _bytes then): the body's pace base

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._waiting_since = self._last_byte = time.monotonic()
        if len(self.connections) > self.limits.max_connections and not self._evict_stalest():
            now = time.monotonic()
            if now - GuardedH11._warned_at > WARN_EVERY_S:
                GuardedH11._warned_at = now
                log.warning(
                    "over server.max_connections (%d open): closing new connections",
                    self.limits.max_connections,
                )
            transport.close()
            return
        self._arm_head_timer()

    def data_received(self, data: bytes) -> None:
        self._last_byte = time.monotonic()
        self._bytes += len(data)
        super().data_received(data)
        if self._body_timer is None and self.conn.their_state is h11.SEND_BODY:
            self._body_from = (self._last_byte, self._bytes)
            # checks at a phase of their own: a flood opened at once is not closed all at once
            self._body_timer = self.loop.call_later(
                self.every * (0.5 + random.random()), self._check_body
            )

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._waiting_since = time.monotonic()
        self._arm_head_timer()  # the next request's head has the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        for timer in (self._head_timer, self._body_timer):
            if timer is not None:
                timer.cancel()
        super().connection_lost(exc)

    def waiting_on_client(self) -> bool:
        """Open, and waiting for its client's bytes: a head, a body, a next request (not
        for the app's answer)."""
        if self.transport.is_closing():
            return False
        state = self.conn.their_state
        idle = self.cycle is None or self.cycle.response_complete
        return state is h11.SEND_BODY or (state is h11.IDLE and idle)

    def _evict_stalest(self) -> bool:
        """Close the connection that has waited on its client the longest, so this new one
        can stay; whether there was one."""
        stalest: GuardedH11 | None = None
        for other in self.connections:
            if other is self or not isinstance(other, GuardedH11):
                continue
            if not other.waiting_on_client():
                continue
            if stalest is None or other._waiting_since < stalest._waiting_since:
                stalest = other
        if stalest is None:
            return False
        stalest.transport.close()
        return True

    def _check_body(self) -> None:
        """Close a body that paused too long or comes too slowly; check again later while
        it is still coming."""
        self._body_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.SEND_BODY:
            return
        now = time.monotonic()
        if self.flow.read_paused:  # the app has not read what came: not the client's pace
            self._body_from = (now, self._bytes)
            self._last_byte = now
        elif now - self._last_byte > self.limits.body_timeout_s:
            self.transport.close()
            return
        else:
            since, base = self._body_from
            took = now - since
            if took >= self.limits.header_timeout_s and (self._bytes - base) / took < (
                self.limits.min_body_rate
            ):
                self.transport.close()
                return
        self._body_timer = self.loop.call_later(self.every, self._check_body)

    def _arm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
        armed = self.cycle
        self._head_timer = self.loop.call_later(
            self.limits.header_timeout_s, self._head_expired, armed
        )

    def _head_expired(self, armed: Any) -> None:
        """No request began since the timer was armed: the head never came in time."""
        idle = armed is None or armed.response_complete
        if self.cycle is armed and idle and not self.transport.is_closing():
            self.transport.close()


def guarded_protocol(limits: ServerSettings) -> type[H11Protocol]:
    """uvicorn's h11 protocol with ``limits``: pass it as ``uvicorn.Config(http=...)``."""
    every = min(CHECK_EVERY_S, limits.header_timeout_s / 2)
    return type("Guarded", (GuardedH11,), {"limits": limits, "every": every})


def limits_of(settings: Settings) -> dict[str, Any]:
    """uvicorn's options for the ``server.*`` limits: a deadline for a request's head and a
    cap on open connections (guarded_protocol), and the keep-alive idle timeout."""
    limits = fit_connections(settings.server)
    return {"http": guarded_protocol(limits), "timeout_keep_alive": limits.idle_timeout_s}


SPARE_FILES = 256  # handles kept free beside the connections: index, Markdown, logs, accept()
MAX_FILES = 1 << 20  # how far an unlimited hard limit is followed


def fit_connections(limits: ServerSettings) -> ServerSettings:
    """Raise the soft open-file limit toward the hard one (the common default is 1,024), and
    keep ``max_connections`` below what it leaves beside the files open now: at the limit a
    connection is refused by the cap, never by accept() failing."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = MAX_FILES if hard == resource.RLIM_INFINITY else min(hard, MAX_FILES)
    if soft != resource.RLIM_INFINITY and soft < want:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
    try:
        in_use = len(os.listdir("/proc/self/fd"))
    except OSError:
        in_use = 64
    room = (MAX_FILES if soft == resource.RLIM_INFINITY else soft) - in_use - SPARE_FILES
    if limits.max_connections <= room:
        return limits
    if limits.max_connections in _FITTED:  # the second listener (the CLI's socket) shares it
        return dataclasses.replace(limits, max_connections=_FITTED[limits.max_connections])
    fitted = _FITTED[limits.max_connections] = max(room, 1)
    said = "server.max_connections lowered from %d to %d: this process may open %d files "
    log.warning(said + "(ulimit -n) and has %d open", limits.max_connections, fitted, soft, in_use)
    return dataclasses.replace(limits, max_connections=fitted)


_FITTED: dict[int, int] = {}  # max_connections -> what it was lowered to, once a process


class AcceptFailures:
    """The event loop's exception handler for `serve`: accept() failing for want of file
    handles is said once a second, in one line with a count, not a traceback per try (at a
    200-handle limit the default logged 90,000 tracebacks in 5 s). Everything else goes to the
    default handler."""

    def __init__(self) -> None:
        self.failed = 0
        self._said_at = 0.0

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if not str(context.get("message", "")).startswith("socket.accept() out of system"):
            loop.default_exception_handler(context)
            return
        self.failed += 1
        now = time.monotonic()
        if now - self._said_at >= 1.0:
            self._said_at = now
            exc = context.get("exception")
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            log.warning("cannot accept connections: %s (%d times so far; raise ulimit -n or "
                        "lower server.max_connections)", why, self.failed)  # fmt: skip
