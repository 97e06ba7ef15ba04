"""The parts `memcore add --file` applies one at a time, each line in the part of the list of
memories it goes to (its scope and category), not in the part of its place in the file.

A file in line order over 10,000 users puts ten memories of every user in every 100,000-line
part: every user's page is then rewritten, re-read and re-indexed once a part, ten times in
all, growing each time (5.5 times the final Markdown written at 1M). Planned, a user's lines
land in one part and their page is written once. A list longer than a part is cut in the
file's order.

Within a part, lines keep the file's order, and a list's lines keep it across parts: a key
upserted twice in the file is upserted in that order. A plan is a function of the file's bytes,
the first line and the part limits; its ``digest`` names it, so a resume can ask for a part of
the same plan and be refused when the file changed. Lines are read back with ``pread`` (a file
cut short meanwhile is an error, not a crash).
"""

from __future__ import annotations

import hashlib
import json
import os
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from memcore.core.errors import InputError
from memcore.core.models import SCOPE_KEYS

LIST_FIELDS = (*SCOPE_KEYS, "category")  # what decides the list (the page) a line goes to


@dataclass(slots=True)
class Plan:
    """A file's lines from ``start`` on, cut into parts of whole lists."""

    path: str
    start: int  # the number of the first line planned
    offsets: array[int]  # where line start+i begins; one more: the end
    parts: list[array[int]]  # each part's lines (i, for line start+i), ascending
    digest: str  # of the bytes and the cut: names this plan in a resume
    stamp: tuple[int, int] = (0, 0)  # the file's size and mtime when planned
    sizes: list[int] = field(default_factory=list)  # each part's bytes

    @property
    def lines(self) -> int:
        return len(self.offsets) - 1

    def read(self, n: int) -> Iterator[tuple[int, str | None]]:
        """Part ``n``'s lines: (number, text), None for a line that is not UTF-8."""
        st = os.stat(self.path)
        if (st.st_size, st.st_mtime_ns) != self.stamp:
            raise InputError(f"{self.path} changed while it was being added")
        at = self.offsets
        with open(self.path, "rb") as fh:
            for i, raw in _runs(fh.fileno(), at, self.parts[n]):
                try:
                    text: str | None = raw.decode("utf-8")
                except UnicodeDecodeError:
                    text = None
                yield self.start + i, text and text.removesuffix("\n").removesuffix("\r")


def plan_parts(path: str, start: int, max_lines: int, max_bytes: int) -> Plan:
    """Plan a file's lines from ``start`` on (blocking: it reads the file once)."""
    offsets = array("q")
    list_of = array("i")  # the list of line start+i, numbered as first seen
    lists: dict[tuple[str, ...] | None, int] = {}
    digest = hashlib.blake2b(f"{start} {max_lines} {max_bytes}\n".encode(), digest_size=6)
    with open(path, "rb") as fh:
        stamp = os.fstat(fh.fileno())
        at = 0
        for number, raw in enumerate(fh, 1):
            digest.update(raw)
            if number >= start:
                offsets.append(at)
                list_of.append(lists.setdefault(_list_key(raw), len(lists)))
            at += len(raw)
    offsets.append(at)
    members = _members(list_of, len(lists))
    del list_of, lists
    parts, sizes = _cut(members, offsets, max_lines, max_bytes)
    return Plan(path, start, offsets, parts, digest.hexdigest(), (at, stamp.st_mtime_ns), sizes)


def cut_rows(rows: Sequence[object], max_lines: int) -> list[array[int]]:
    """Rows held in memory (parsed values), cut as a planned file's lines are: parts of whole
    lists, at most ``max_lines`` rows each (by count alone: each row weighs one), each part's
    rows by place, ascending."""
    lists: dict[tuple[str, ...] | None, int] = {}
    list_of = array("i", (lists.setdefault(list_key(row), len(lists)) for row in rows))
    one_each = array("q", range(len(rows) + 1))
    parts, _ = _cut(_members(list_of, len(lists)), one_each, max_lines, len(rows) + 1)
    return parts


def _members(list_of: array[int], lists: int) -> list[array[int]]:
    """Each list's places, ascending, from the list of each place."""
    members = [array("i") for _ in range(lists)]
    for i, n in enumerate(list_of):
        members[n].append(i)
    return members


def _cut(
    members: list[array[int]], offsets: array[int], max_lines: int, max_bytes: int
) -> tuple[list[array[int]], list[int]]:
    """Parts of whole lists (a list that fits no part is cut in order), in the order the
    lists first appear; each part's lines ascending."""
    parts: list[array[int]] = []
    sizes: list[int] = []
    part: list[int] = []
    size = 0

    def close() -> None:
        nonlocal part, size
        if part:
            parts.append(array("i", sorted(part)))
            sizes.append(size)
        part, size = [], 0

    for lines in members:
        whole = sum(offsets[i + 1] - offsets[i] for i in lines)
        if len(part) + len(lines) > max_lines or size + whole > max_bytes:
            close()  # the list starts a part of its own, where it fits whole
        for i in lines:
            length = offsets[i + 1] - offsets[i]
            if part and (len(part) >= max_lines or size + length > max_bytes):
                close()
            part.append(i)
            size += length
    close()
    return parts, sizes


def _list_key(raw: bytes) -> tuple[str, ...] | None:
    """What decides a line's list (None: not a JSON object; it is named when parsed)."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return list_key(data)


def list_key(row: object) -> tuple[str, ...] | None:
    """The list (the page) a row's memory goes to, as the row states it: its scope and
    category (None: not an object)."""
    if not isinstance(row, dict):
        return None
    return tuple(str(row.get(name)) for name in LIST_FIELDS)


def _runs(fd: int, offsets: array[int], lines: array[int]) -> Iterator[tuple[int, bytes]]:
    """The bytes of ``lines`` (ascending), read a run of consecutive lines at a time."""
    n = 0
    while n < len(lines):
        first = last = lines[n]
        while n + 1 < len(lines) and lines[n + 1] == last + 1 and last - first < 4096:
            n += 1
            last = lines[n]
        begin = offsets[first]
        block = os.pread(fd, offsets[last + 1] - begin, begin)
        if len(block) != offsets[last + 1] - begin:
            raise InputError("the file was cut short while it was being added")
        for i in range(first, last + 1):
            yield i, block[offsets[i] - begin : offsets[i + 1] - begin]
        n += 1
