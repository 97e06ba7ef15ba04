"""Where `memcore import` reads its rows from, in parts of whole lists (a user's page written
once, as `add --file` does): a JSON Lines file is planned without being held in memory
(memory/batch_plan.py); stdin or a pipe in JSON Lines is grouped a chunk at a time as it comes;
one JSON document (Mem0's export: a list, or ``{"results": [...]}``) is read whole."""

from __future__ import annotations

import itertools
import json
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import IO, Any

from memcore.cli.add_file import CHUNK_BYTES, CHUNK_LINES
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

    if source == "-":
        return _stream(sys.stdin.buffer)
    if not stat.S_ISREG(os.stat(source).st_mode):  # a pipe: read once
        return _stream(open(source, "rb"))  # closed when its parts are read
    with open(source, "rb") as fh:
        if not _json_lines(fh.readline()):
            fh.seek(0)
            return _whole(fh.read())
    plan = plan_parts(source, 1, CHUNK_LINES, CHUNK_BYTES)

    def parts() -> Iterator[Part]:
        for n in range(len(plan.parts)):
            yield ((number, _row(text)) for number, text in plan.read(n) if _kept(text))

    return Source(parts(), plan.lines)


def _stream(fh: IO[bytes]) -> Source:
    """Stdin or a pipe: JSON Lines grouped a chunk of lines at a time, else read whole."""
    first = fh.readline()
    if not _json_lines(first):
        with fh:
            return _whole(first + fh.read())

    def parts() -> Iterator[Part]:
        from memcore.memory.transfer import in_parts

        with fh:
            chunk: list[tuple[int, Any]] = []
            size = 0
            for number, raw in enumerate(itertools.chain([first], fh), 1):
                text = _text(raw)
                if _kept(text):
                    chunk.append((number, _row(text)))
                size += len(raw)
                if len(chunk) >= CHUNK_LINES or size >= CHUNK_BYTES:
                    yield from in_parts(chunk, CHUNK_LINES)
                    chunk, size = [], 0
            if chunk:
                yield from in_parts(chunk, CHUNK_LINES)

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


def _text(raw: bytes) -> str | None:
    """A line as text without its end (None: not UTF-8)."""
    try:
        return raw.decode("utf-8").removesuffix("\n").removesuffix("\r")
    except UnicodeDecodeError:
        return None


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
