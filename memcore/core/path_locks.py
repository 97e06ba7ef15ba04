"""One asyncio lock per key (a vault path, an idempotency key), taken in one global order."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Collection


class PathLocks:
    """One asyncio lock per vault path, created on demand and dropped when free."""

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    @contextlib.asynccontextmanager
    async def hold(self, paths: Collection[str]) -> AsyncIterator[None]:
        ordered = sorted(set(paths))  # one global order: two runs never wait on each other
        for p in ordered:
            self._users[p] = self._users.get(p, 0) + 1
            self._locks.setdefault(p, asyncio.Lock())
        taken: list[str] = []
        try:
            for p in ordered:
                await self._locks[p].acquire()
                taken.append(p)
            yield
        finally:
            for p in taken:
                self._locks[p].release()
            for p in ordered:
                self._users[p] -= 1
                if not self._users[p]:
                    del self._users[p], self._locks[p]
