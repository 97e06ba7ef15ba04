"""Pages: how a long list of memories (a scope's category, a session's transcript) is spread
over files of a bounded size, so no file nears ``index.max_file_bytes`` and a write touches
one page.

Page 1 is the list's own file (``core.md``), then ``core.p0002.md``, ``core.p0003.md``, ...
in the same folder: a file manager lists them in order. A memory never moves to another page
on its own (its page is where it was written); pages a person empties stay until removed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from memcore.vault.chunker import memory_items_in

PAGE_ITEMS = 1000  # memories (or turns) a page holds before the next one starts
_PAGE = re.compile(r"\.p(\d{4,})\.md")


def page_path(first: str, page: int) -> str:
    """The vault path of page ``page`` of the list whose first page is ``first``."""
    return first if page == 1 else f"{first.removesuffix('.md')}.p{page:04d}.md"


def list_pages(vault: Path, first: str) -> list[tuple[int, str]]:
    """The list's pages on disk: (page number, vault path), in order (blocking)."""
    folder, _, name = first.rpartition("/")
    stem = name.removesuffix(".md")
    try:
        with os.scandir(vault / folder) as entries:
            names = [e.name for e in entries if e.is_file(follow_symlinks=False)]
    except (FileNotFoundError, NotADirectoryError):
        return []
    found = []
    for n in names:
        if n == name:
            found.append((1, first))
        elif n.startswith(stem) and (m := _PAGE.fullmatch(n, len(stem))):
            found.append((int(m[1]), f"{folder}/{n}" if folder else n))
    return sorted(found)


def page_of(rel: str) -> tuple[str, int]:
    """(the first page's path, the page number) of a page's path."""
    folder, _, name = rel.rpartition("/")
    stem, dot, number = name.removesuffix(".md").rpartition(".p")
    if dot and number.isdigit() and len(number) >= 4:
        first = f"{stem}.md"
        return (f"{folder}/{first}" if folder else first), int(number)
    return rel, 1


def open_page(vault: Path, first: str, room_bytes: int, adding: int) -> tuple[str, int]:
    """The page new memories go to, and how many more it takes: the last page while it holds
    fewer than ``PAGE_ITEMS`` and ``room_bytes`` is free of its size, else a new one (blocking).
    ``adding``: the bytes about to be added."""
    pages = list_pages(vault, first)
    if not pages:
        return first, PAGE_ITEMS
    number, rel = pages[-1]
    try:
        data = (vault / rel).read_bytes()
    except OSError:
        return rel, PAGE_ITEMS
    held = memory_items_in(rel, data.decode("utf-8", "replace"))
    if held is None:
        return rel, PAGE_ITEMS  # not a memory file: the write says so
    if held < PAGE_ITEMS and len(data) + adding <= room_bytes:
        return rel, PAGE_ITEMS - held
    return page_path(first, number + 1), PAGE_ITEMS
