"""The heap of a long-running process (``memcore serve``, ``watch``, ``mcp``)."""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Awaitable, Iterator


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


_paused = 0  # bulk operations under way that asked for no cyclic collection
_pause_lock = threading.Lock()


@contextlib.contextmanager
def paused_collection() -> Iterator[None]:
    """No cyclic garbage collection while a bulk operation builds a large, acyclic heap (a
    transcript of 180k messages: ~10 million objects). Each full collection walks all of it,
    and they come more often as it grows: pauses of 70 ms to 420 ms that stalled every other
    request (bench/conversation.py --http). Objects are still freed by reference counting.
    When the last such operation ends, a collection of the youngest generation (where all
    that was allocated meanwhile still is) frees the cyclic garbage made meanwhile, by any
    request; what survives it is frozen, as ``freeze_heap`` does (the first full collection
    after would walk all of it at once), and is still freed by reference counting. Safe to
    nest and to use from several tasks and threads at once."""
    global _paused
    with _pause_lock:
        _paused += 1
        gc.disable()
    try:
        yield
    finally:
        with _pause_lock:
            _paused -= 1
            if not _paused:
                gc.collect(0)  # what the pause left young: its cyclic garbage goes, not frozen
                gc.freeze()
                gc.enable()
