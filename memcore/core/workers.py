"""The event loop first: a server's loop answers requests while worker threads chunk, parse,
segment and encode. Two things keep it from waiting behind them for the GIL and a core:
a short switch interval (a worker holding the GIL hands it over within 1 ms, not 5), and
on Linux, where a thread's nice value is its own, workers at a lower scheduling priority."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import threading
import weakref
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

WORKER_NICE = 10  # as far below the loop's as `nice` goes by default (at most 19)
SWITCH_S = 0.001  # bench/loop_lag.py: 37.7 -> 14.9 ms max stall at 8k files against 5 ms

_given: weakref.WeakSet[asyncio.AbstractEventLoop] = weakref.WeakSet()


def _lower_priority() -> None:
    me = threading.get_native_id()
    with contextlib.suppress(OSError):  # a container that forbids it: run at the loop's
        os.setpriority(
            os.PRIO_PROCESS, me, min(os.getpriority(os.PRIO_PROCESS, me) + WORKER_NICE, 19)
        )


def worker_pool(threads: int, name: str) -> ThreadPoolExecutor:
    """Threads for work beside a loop, at the workers' lower priority (Linux)."""
    if sys.platform != "linux":  # elsewhere a thread id is not a pid
        return ThreadPoolExecutor(threads, thread_name_prefix=name)
    return ThreadPoolExecutor(threads, thread_name_prefix=name, initializer=_lower_priority)


@contextlib.contextmanager
def loop_first() -> Iterator[None]:
    """While inside: the switch interval at most SWITCH_S, and the running loop's default
    executor (``asyncio.to_thread``) made of lower-priority threads."""
    loop = asyncio.get_running_loop()
    if sys.platform == "linux" and loop not in _given:  # elsewhere a thread id is not a pid
        _given.add(loop)
        # asyncio's own default size
        loop.set_default_executor(worker_pool(min(32, (os.cpu_count() or 1) + 4), "memcore-worker"))
    switch = sys.getswitchinterval()
    sys.setswitchinterval(min(switch, SWITCH_S))
    try:
        yield
    finally:
        sys.setswitchinterval(switch)
