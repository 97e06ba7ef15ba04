"""The heap of a long-running process (``memcore serve``, ``watch``, ``mcp``)."""

from __future__ import annotations

import gc
from collections.abc import Awaitable


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
