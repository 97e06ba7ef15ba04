"""The one rule for what a line is in memcore's line formats (JSON Lines: the history, the
reviews, export and import, batch files; git's output): text up to "\n", without a "\r" before
it. Never ``str.splitlines``, which also breaks at U+2028, U+2029, U+0085, U+000B, U+000C and
U+001C-U+001E: characters a memory's text may hold and ``json.dumps(ensure_ascii=False)``
writes as they are."""

from __future__ import annotations


def split_lines(text: str) -> list[str]:
    """``text``'s lines: split at "\n" only, a "\r" before it dropped, no empty last line
    for a final "\n" (as ``splitlines`` would, but for its extra breaks)."""
    if not text:
        return []
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]
