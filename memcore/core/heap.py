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
    request (bench/conversation.py --http). Objects are still freed by reference counting;
    cycles made meanwhile wait for the collection after the last such operation ends. Safe to
    nest and to use from several tasks and threads at once. At the end what was allocated
    meanwhile and is still alive (the background indexing a large save starts) is frozen, as
    ``freeze_heap`` does: the first collection after would walk all of it at once."""
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
                gc.freeze()
                gc.enable()
