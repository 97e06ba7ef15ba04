"""Words for counts, shared by the index's reports and the command line's output (light: the
command line's quick path imports it before anything heavy)."""

from __future__ import annotations


def plural(n: int, word: str) -> str:
    """``1 chunk``, ``2 chunks``."""
    return f"{n} {word}" if n == 1 else f"{n} {word}s"
