"""Where `memcore import` reads its rows from, in parts of whole lists (a user's page written
once, as `add --file` does): a JSON Lines file is planned without being held in memory
(memory/batch_plan.py); stdin or a pipe in JSON Lines is grouped a chunk at a time as it comes;
one JSON document (Mem0's export: a list, or ``{"results": [...]}``) is read whole."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from memcore.cli.add_file import CHUNK_BYTES, CHUNK_LINES, line_chunks, read_once, stream
from memcore.core.errors import InputError

# a part's rows, (line or item number, the row: a value, or an InputError), read as they are
# taken: a part's 100,000 parsed rows are never all held beside the memories made of them
Part = Iterable[tuple[int, Any]]


@dataclass(slots=True)
class Source:
    """A source's parts, and how many rows they hold when that is known before reading them
    (a planned file), for a progress bar."""

    parts: Iterator[Part]
    rows: int | None = None


def open_source(source: str) -> Source:
    """The parts of ``source`` ('-': stdin). Raises OSError if it cannot be read, InputError if
    a document read whole is not UTF-8."""
    from memcore.memory.batch_plan import plan_parts

    if read_once(source):
        return _streamed(stream(source))
    with open(source, "rb") as fh:
        if not _json_lines(fh.readline()):
            fh.seek(0)
            return _whole(fh.read())
    plan = plan_parts(source, 1, CHUNK_LINES, CHUNK_BYTES)

    def parts() -> Iterator[Part]:
        for n in range(len(plan.parts)):
            yield ((number, _row(text)) for number, text in plan.read(n) if _kept(text))

    return Source(parts(), plan.lines)


def _streamed(lines: Iterator[bytes]) -> Source:
    """Stdin or a pipe: JSON Lines grouped a chunk of lines at a time (add --file's chunks),
    as they come; else read whole."""
    first = next(lines, b"")
    every = itertools.chain([first], lines)
    if not _json_lines(first):
        return _whole(b"".join(every))

    def parts() -> Iterator[Part]:
        from memcore.memory.transfer import in_parts

        for start, texts, _ in line_chunks(every, 1):
            rows = [(n, _row(text)) for n, text in enumerate(texts, start) if _kept(text)]
            yield from in_parts(rows, CHUNK_LINES)

    return Source(parts())


def _whole(data: bytes) -> Source:
    """A document read whole: its rows (a JSON list, Mem0's results, or JSON Lines)."""
    from memcore.memory.transfer import in_parts, read_rows

    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    rows = list(read_rows(text))
    return Source(in_parts(rows, CHUNK_LINES), len(rows))


def _json_lines(first: bytes) -> bool:
    """Whether a source whose first line this is holds JSON Lines: that line is a JSON object,
    and not a whole answer of Mem0's (``{"results": [...]}``) on one line."""
    try:
        value = json.loads(first)
    except ValueError:  # not JSON (a document's first line, or a bad row: read whole)
        return False
    return isinstance(value, dict) and not isinstance(value.get("results"), list)


def _kept(text: str | None) -> bool:
    """Whether a line is a row (a blank line is passed over, as in a document read whole)."""
    return text is None or bool(text.strip())


def _row(text: str | None) -> Any:
    """A line's value, or the InputError that says why it is none."""
    if text is None:
        return InputError("not UTF-8 text")
    try:
        return json.loads(text)
    except ValueError as exc:
        return InputError(f"not JSON ({exc})")
