"""Run a sequence of jobs a few at a time, so one job's waiting (a database round trip, a
transaction) overlaps the next one's work (reading, chunking, tokenizing in a worker thread).
Used where the jobs touch disjoint things and their order does not matter for correctness."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Iterable


async def overlapped(
    jobs: Iterable[Callable[[], Awaitable[None]]],
    at_once: int,
    *,
    stopped: Callable[[], bool] = lambda: False,
    each_done: Callable[[], None] = lambda: None,
) -> None:
    """Await each job, at most ``at_once`` running together, starting none once ``stopped``.
    ``each_done`` is called as each finishes. The first error is raised once every running
    job has ended (no job is left running half done); the jobs not started then never are.
    Cancelled, it cancels the running ones and waits for them."""
    running: set[asyncio.Task[None]] = set()
    failed: BaseException | None = None

    async def settle(until: int) -> None:
        nonlocal failed, running
        while len(running) > until:
            done, running = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                error = task.exception()
                if error is not None and failed is None:
                    failed = error
                each_done()

    try:
        for job in jobs:
            if failed is not None or stopped():
                break
            running.add(asyncio.ensure_future(job()))
            await settle(at_once - 1)
        await settle(0)
    except BaseException:
        for task in running:
            task.cancel()
        with contextlib.suppress(BaseException):
            await asyncio.gather(*running, return_exceptions=True)
        raise
    if failed is not None:
        raise failed
