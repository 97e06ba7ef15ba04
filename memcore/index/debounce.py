"""Per-path event coalescing for the watcher: which paths are due for indexing, and when. Pure."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class Debouncer:
    """Coalesces bursts of events per path.

    A path is due once it has been quiet for ``quiet_s``, or ``max_delay_s`` after its first
    event even if events keep coming (an agent appending continuously still gets indexed).
    Times are plain floats from one monotonic clock; nothing here sleeps or spawns threads.
    """

    quiet_s: float = 0.25
    max_delay_s: float = 2.0
    _first: dict[str, float] = field(default_factory=dict)
    _last: dict[str, float] = field(default_factory=dict)
    rescan: bool = False  # a directory changed: the next flush rescans the whole vault
    _rescan_at: float | None = None

    def add(self, path: str, now: float) -> None:
        self._first.setdefault(path, now)
        self._last[path] = now

    def add_rescan(self, now: float) -> None:
        self.rescan = True
        if self._rescan_at is None:
            self._rescan_at = now
        self._last["\0rescan"] = now
        self._first.setdefault("\0rescan", now)

    def retry(self, path: str, due: float) -> None:
        """Queue a path again for ``due`` (after a failure); a new event for it comes sooner."""
        if path in self._last:
            return  # already queued by a newer event
        self._first[path] = self._last[path] = due - self.quiet_s

    def retry_rescan(self, due: float) -> None:
        if "\0rescan" in self._last:
            return
        self.rescan = True
        self._rescan_at = due
        self._first["\0rescan"] = self._last["\0rescan"] = due - self.quiet_s

    def __len__(self) -> int:
        return len(self._last)

    def _deadline(self, path: str) -> float:
        return min(self._last[path] + self.quiet_s, self._first[path] + self.max_delay_s)

    def next_deadline(self) -> float | None:
        """When the earliest pending path becomes due (None when nothing is pending)."""
        return min((self._deadline(p) for p in self._last), default=None)

    def take_due(self, now: float) -> tuple[set[str], bool]:
        """Remove and return the paths that are due, and whether a full rescan is due."""
        due = {p for p in self._last if self._deadline(p) <= now}
        for p in due:
            del self._first[p], self._last[p]
        rescan = "\0rescan" in due
        if rescan:
            self.rescan, self._rescan_at = False, None
        return {p for p in due if p != "\0rescan"}, rescan
