"""The heap of a long-running process (``memcore serve``, ``watch``, ``mcp``) and of a batch."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import sys
import threading
from collections.abc import Awaitable, Iterator
from typing import Any

_M_ARENA_MAX = -8  # glibc's malloc.h


def few_malloc_arenas(count: int = 2) -> bool:
    """For a batch command, before it starts threads: let glibc's malloc keep at most
    ``count`` arenas. By default each thread that allocates (SQLite's connections, the
    worker threads) gets one of its own, up to 8 a core, and a batch's many short-lived
    objects spread over them and fragment each. A 200k-memory ``add --file`` (bench/fleet.py
    with 20k-line chunks, two runs each) peaked at 497-523 MB and took 139-143 s with the
    default (143: beside a test run), 460-464 MB and 120-128 s with 2. True when set; a
    no-op off glibc."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        return bool(ctypes.CDLL(None).mallopt(_M_ARENA_MAX, count))
    except (OSError, AttributeError):  # a C library without mallopt (musl has a stub)
        return False


def freeze_heap() -> None:
    """Once a server is warm and caught up: collect the start-up garbage, then leave what is
    alive now (the model, the tokenizer, jieba's dictionary, the settings, the modules) out of
    every later cyclic collection. Each full collection walked all of it, stalling every
    request for ~50 ms several times a minute under load (bench/http_api.py); ~4 ms after.
    Objects frozen here are still freed when nothing refers to them; only a cycle among them
    is never collected."""
    gc.collect()
    gc.freeze()


async def freeze_after(catch_up: Awaitable[object]) -> None:
    """Await a server's warm-up and catch-up with its vault, then ``freeze_heap``."""
    await catch_up
    freeze_heap()


async def drop(items: list[Any]) -> None:
    """Free a large list (and what only it holds) in a worker thread, an item at a time: the
    event loop's thread is not held meanwhile. Freed where it was dropped, the 1,075 pages
    of a 215k-message save held every request for 80 ms."""

    def empty() -> None:
        while items:
            items.pop()

    await asyncio.to_thread(empty)


_paused = 0  # bulk operations under way that asked for no full collection
_pause_lock = threading.Lock()
_thresholds = gc.get_threshold()
NEVER = 1 << 30  # a full-collection threshold never reached


@contextlib.contextmanager
def paused_collection() -> Iterator[None]:
    """No full (oldest-generation) collection while a bulk operation builds a large heap (a
    transcript of 180k messages: ~10 million objects; an index run over 1,000 page files).
    Each full collection walks everything not frozen, and they come more often as the heap
    grows: 70 ms to 640 ms each, during which the thread that ran it held the GIL and every
    request waited (bench/conversation.py --http). The young generations are still collected
    (cheap: they hold only what was allocated since), so cyclic garbage that dies young goes
    as always. When the last such operation ends, what survived is frozen, as
    ``freeze_heap`` does (the first full collection after would walk all of it at once): it
    is still freed by reference counting. Safe to nest and to use from several tasks and
    threads at once."""
    global _paused, _thresholds
    with _pause_lock:
        _paused += 1
        if _paused == 1:
            _thresholds = gc.get_threshold()
            gc.set_threshold(_thresholds[0], _thresholds[1], NEVER)
    try:
        yield
    finally:
        with _pause_lock:
            _paused -= 1
            if not _paused:
                gc.collect(1)  # the young ones: their cyclic garbage goes, not frozen
                gc.freeze()
                gc.set_threshold(*_thresholds)
