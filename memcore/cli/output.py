"""How the command line prints a search hit, a memory, warnings and a context block: one place
for the typer commands and for the answers cli/quick.py gives, so both print the same bytes."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterable


def out(text: str) -> None:
    """Text to stdout, flushed (a caller may exit right after)."""
    sys.stdout.write(text)
    sys.stdout.flush()


def warn(warnings: Iterable[str]) -> None:
    for warning in warnings:
        sys.stderr.write(f"memcore: warning: {warning}\n")


def print_context(block: str, query: str) -> None:
    """The "## Relevant Memories" block, or a line on stderr when nothing was relevant."""
    if not block:
        sys.stderr.write(f"memcore: no memories relevant enough to {query!r}\n")
        return
    out(block)


def hit_text(n: int, path: str, start: int, end: int, heading: str, score: float, text: str) -> str:
    """Hit number ``n`` as two lines: where it is and its score, then its text (shortened)."""
    where = f"{n}. {path}:{start}-{end}{f'  {heading}' if heading else ''}  ({score:.3f})"
    body = textwrap.shorten(" ".join(text.split()), 300, placeholder=" ...")
    return f"{where}\n{textwrap.indent(textwrap.fill(body, 96), '   ')}"


def record_line(
    memory_id: str,
    category: str,
    scope: tuple[str | None, ...],
    key: str | None,
    strength: tuple[str, float] | None,
    text: str,
) -> str:
    """A memory in one line: id, [category scope key], strength, text. ``scope``: (user,
    agent, run[, app]); ``strength``: (tier, retrievability) when known."""
    names = " ".join(
        f"{k}={v}" for k, v in zip(("user", "agent", "run", "app"), scope, strict=False) if v
    )
    held = ""
    if strength is not None:  # " core" never decays, else " R=0.87" (retrievability now)
        held = " core" if strength[0] == "core" else f" R={strength[1]:.2f}"
    tags = " ".join(t for t in (category, names, f"key={key}" if key else "") if t)
    return f"{memory_id}  [{tags}]{held}  {text}"
