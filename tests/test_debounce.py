"""The coalescing logic, tested with a hand-driven clock (no threads, no sleeps)."""

from __future__ import annotations

from memcore.index.debounce import Debouncer
from memcore.index.watcher import watch_roots


def test_a_burst_on_one_path_flushes_once_after_the_quiet_period() -> None:
    d = Debouncer(quiet_s=0.25, max_delay_s=2.0)
    for t in (0.0, 0.1, 0.2, 0.3):
        d.add("memory/a.md", t)
    assert d.take_due(0.5) == (set(), False)
    assert d.next_deadline() == 0.55
    assert d.take_due(0.55) == ({"memory/a.md"}, False)
    assert len(d) == 0 and d.next_deadline() is None


def test_continuous_writes_are_flushed_at_the_max_delay() -> None:
    d = Debouncer(quiet_s=0.25, max_delay_s=2.0)
    t = 0.0
    while t < 2.0:
        d.add("MEMORY.md", t)
        t += 0.1
    assert d.take_due(1.95) == (set(), False)
    assert d.take_due(2.0) == ({"MEMORY.md"}, False)


def test_paths_are_due_independently() -> None:
    d = Debouncer(quiet_s=0.25, max_delay_s=2.0)
    d.add("a.md", 0.0)
    d.add("b.md", 0.2)
    assert d.take_due(0.3) == ({"a.md"}, False)
    assert d.take_due(0.45) == ({"b.md"}, False)


def test_folder_changes_ask_for_one_rescan() -> None:
    d = Debouncer(quiet_s=0.25, max_delay_s=2.0)
    d.add_rescan(0.0)
    d.add_rescan(0.1)
    d.add("x.md", 0.1)
    paths, rescan = d.take_due(0.4)
    assert rescan and paths == {"x.md"}
    assert d.take_due(1.0) == (set(), False)


def test_watch_roots_cover_includes_without_walking_everything() -> None:
    assert watch_roots(("MEMORY.md", "memory.md", "memory/**/*.md")) == [
        ("", False),
        ("memory", True),
    ]
    assert watch_roots(("docs/*.md",)) == [("docs", False)]
    assert watch_roots(("**/*.md",)) == [("", True)]


def test_a_retried_path_waits_for_its_backoff_unless_a_new_event_comes() -> None:
    d = Debouncer(quiet_s=0.25, max_delay_s=2.0)
    d.retry("memory/a.md", due=5.0)
    d.retry_rescan(due=7.0)
    assert d.next_deadline() == 5.0
    assert d.take_due(4.9) == (set(), False)
    assert d.take_due(5.0) == ({"memory/a.md"}, False)
    assert d.take_due(7.0) == (set(), True)
    d.retry("memory/b.md", due=9.0)
    d.add("memory/b.md", 1.0)  # the file changed again: index it soon, not at 9
    assert d.take_due(1.25) == ({"memory/b.md"}, False)
