"""Small memos: a least-recently-used map (the L1 cache of search results), and values
remembered by their object's identity. Pure."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class LRU(Generic[K, V]):
    """At most ``size`` entries; a get or put makes an entry the most recent."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[K, V] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: K, fresh: Callable[[V], bool] | None = None) -> V | None:
        """The value, now the most recent (None when absent, or not ``fresh``: a miss)."""
        value = self._items.get(key)
        if value is None or (fresh is not None and not fresh(value)):
            self.misses += 1
            return None
        self._items.move_to_end(key)
        self.hits += 1
        return value

    def peek(self, key: K) -> V | None:
        """The value, neither counted nor made the most recent (None when absent)."""
        return self._items.get(key)

    def pop(self, key: K) -> V | None:
        """The value, removed (None when absent)."""
        return self._items.pop(key, None)

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


Obj = TypeVar("Obj")


class ByIdentity(Generic[Obj, V]):
    """Values derived from objects, remembered by the object's identity: for objects that
    cannot be hashed (a dataclass holding a dict) and that a cache upstream hands out again
    unchanged, such as the items and chunks of a memory file written to a thousand times.

    An entry keeps its object alive, so its id is never reused while the entry is here; at
    ``size`` entries the memo starts again empty. Safe from several threads (one dict get,
    one set: a race at worst computes a value twice)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: dict[int, tuple[Obj, Hashable, V]] = {}

    def get(self, obj: Obj, extra: Hashable, make: Callable[[], V]) -> V:
        """The value made for ``obj`` along with ``extra`` (what else it depends on, compared
        by equality), made now if there is none."""
        hit = self._items.get(id(obj))
        if hit is not None and hit[0] is obj and hit[1] == extra:
            return hit[2]
        value = make()
        if len(self._items) >= self.size:
            self._items.clear()
        self._items[id(obj)] = (obj, extra, value)
        return value
