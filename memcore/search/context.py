"""The "## Relevant Memories" block that puts search hits into an agent's prompt. Pure."""

from __future__ import annotations

from collections.abc import Sequence

from memcore.core.models import Hit

MAX_CHARS_PER_MEMORY = 600


def relevant_memories(hits: Sequence[Hit]) -> str:
    """One numbered line per hit: date, heading, text (shortened), and where it lives.

    Returns an empty string when there are no hits, so callers can append it unconditionally.
    """
    if not hits:
        return ""
    lines = ["## Relevant Memories"]
    for n, hit in enumerate(hits, 1):
        date = f"[{hit.date}] " if hit.date else ""
        title = f"{hit.heading}: " if hit.heading else ""
        body = " ".join(hit.text.split())
        if len(body) > MAX_CHARS_PER_MEMORY:
            body = body[:MAX_CHARS_PER_MEMORY].rsplit(" ", 1)[0] + " ..."
        where = f"{hit.path}:{hit.start_line}-{hit.end_line}" if hit.start_line else hit.path
        lines.append(f"{n}. {date}{title}{body} ({where})")
    return "\n".join(lines) + "\n"
