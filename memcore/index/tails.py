"""Appends read by their new lines: what an index run keeps of the memory files it wrote, so
that the next run over an append parses only what was added.

A batch that adds ten memories to each of 10,000 users' pages of a hundred, ten times over,
would otherwise have every run read, parse, chunk and compare every memory already there
(and ask the index for all of their rows). The indexer keeps, for each memory file it wrote,
a few numbers about the version the index holds (an ``Appendable``); when the file on disk is
that version with lines added after its last memory, only those lines are parsed and only
their chunks written. The store checks the claim again in the transaction that writes them
(``FileRows.appended``); a file that is not as claimed is read whole.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memcore.core.models import Chunk
from memcore.vault.chunker import memory_tail_chunks
from memcore.vault.files import content_hash

APPENDABLE_FILES = 262_144  # memory files remembered so (about 150 bytes each)


@dataclass(frozen=True, slots=True)
class Appendable:
    """A memory file as the index holds it, when an append to it can be read by its new
    lines: its content hash and length, and how many memories (one chunk each) it holds. Its
    last memory ends the file (only blank lines after it), so lines added after it start
    anew; and every memory in it has a created date (one without takes the file's date,
    which a whole read would refresh)."""

    content_hash: str
    size: int
    count: int
    model_id: str = ""  # set once its chunks are written, every one with a vector of it


def appendable(text: str, new: Sequence[Chunk], state_hash: str, size: int) -> Appendable | None:
    """What ``text`` (``size`` bytes, hashed ``state_hash``) is as an Appendable once its
    chunks are written, or None. ``new``: its chunks not known to be dated already (all of
    them, unless it was read as an append)."""
    if not new or not all(_dated(c) for c in new):
        return None
    last = new[-1]
    if text.rstrip().count("\n") + 1 != last.end_line:  # something follows its last memory
        return None
    return Appendable(state_hash, size, last.index + 1)


def _dated(chunk: Chunk) -> bool:
    memory = chunk.metadata.get("memory")
    return isinstance(memory, dict) and bool(memory.get("created"))


def appended_chunks(
    text: str, data: bytes, path: str, base: Appendable, fallback_date: str | None
) -> list[Chunk] | None:
    """The chunks of the memories added to ``base`` when ``data`` (decoded: ``text``) is that
    version with lines after it; None when it is not (read the file whole)."""
    size = base.size
    if len(data) <= size or data[size - 1] != ord("\n") or b"\r" in data:
        return None
    if data.startswith(b"\xef\xbb\xbf") or content_hash(data[:size]) != base.content_hash:
        return None
    return memory_tail_chunks(text, data[size:].decode("utf-8"), path, base.count, fallback_date)
