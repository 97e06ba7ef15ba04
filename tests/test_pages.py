"""A scope grows without limit: a category's memories are paged (vault/pages.py), an add
touches one page, an upsert finds its key on any page, and nothing is lost or moved."""

from __future__ import annotations

import re
from pathlib import Path

from memcore.memory.adding import NewMemory
from memcore.service import MemoryService
from memcore.vault.memory_format import Scope
from memcore.vault.pages import PAGE_ITEMS, list_pages, page_of, page_path

ALICE = Scope(user_id="alice")


def items_in(vault: Path, rel: str) -> int:
    return len(re.findall(r"^- ", (vault / rel).read_text(), flags=re.M))


def test_page_names_read_back() -> None:
    first = "memory/users/alice/core.md"
    assert page_path(first, 1) == first
    assert page_path(first, 2) == "memory/users/alice/core.p0002.md"
    assert page_of("memory/users/alice/core.p0012.md") == (first, 12)
    assert page_of(first) == (first, 1)
    assert page_of("memory/users/alice/core.p12.md") == ("memory/users/alice/core.p12.md", 1)


async def test_a_scope_past_one_page_goes_on_to_the_next_and_keeps_every_memory(
    vault: Path, service: MemoryService
) -> None:
    m = service.memories
    total = 2 * PAGE_ITEMS + PAGE_ITEMS // 2
    batch = [NewMemory(f"fact {n}", ALICE, key="first" if n == 0 else None) for n in range(total)]
    for start in range(0, total, PAGE_ITEMS // 2 + 7):  # batches that straddle pages
        await m.add_batch(batch[start : start + PAGE_ITEMS // 2 + 7])
    first = "memory/users/alice/core.md"
    pages = list_pages(vault, first)
    assert [n for n, _ in pages] == [1, 2, 3]
    assert [items_in(vault, rel) for _, rel in pages] == [PAGE_ITEMS, PAGE_ITEMS, PAGE_ITEMS // 2]
    assert await m.count(user_id="alice") == total
    # an upsert finds its key on page 1 and changes it there; a new add goes to the last page
    (kept,) = await m.add("fact zero, revised", user_id="alice", key="first")
    assert kept.path == first and kept.id == batch[0].id
    (new,) = await m.add("one more", user_id="alice")
    assert new.path == page_path(first, 3)
    assert await m.count(user_id="alice") == total + 1
    # a person's edit on a middle page is read as theirs; memcore's ids stay
    middle = vault / page_path(first, 2)
    middle.write_text(middle.read_text().replace(f"fact {PAGE_ITEMS + 5} ", "fact edited "))
    await service.index()
    edited = await m.get(batch[PAGE_ITEMS + 5].id)
    assert edited.text == "fact edited"
    # a rebuilt index holds the same memories at the same places
    before = {r.id: r.path for r in await m.get_all(user_id="alice", limit=10_000)}
    await service.index(full=True)
    after = {r.id: r.path for r in await m.get_all(user_id="alice", limit=10_000)}
    assert after == before and len(after) == total + 1
    await m.delete(batch[3].id)
    assert items_in(vault, first) == PAGE_ITEMS - 1
    (again,) = await m.add("after a delete", user_id="alice")
    assert again.path == page_path(first, 3)  # the last page; page 1's gap stays a gap


async def test_two_categories_and_two_users_page_apart(vault: Path, service: MemoryService) -> None:
    m = service.memories
    await m.add_batch([NewMemory(f"a{n}", ALICE) for n in range(PAGE_ITEMS + 1)])
    await m.add("bob's", user_id="bob")
    await m.add("alice's prefs", user_id="alice", category="prefs")
    assert [n for n, _ in list_pages(vault, "memory/users/alice/core.md")] == [1, 2]
    assert [n for n, _ in list_pages(vault, "memory/users/alice/prefs.md")] == [1]
    assert [n for n, _ in list_pages(vault, "memory/users/bob/core.md")] == [1]


def test_a_page_is_counted_as_the_parser_counts_it_without_being_parsed() -> None:
    from memcore.vault.chunker import memory_file_of, memory_items_in

    page = (
        '---\nmemcore: memories\nuser_id: "u1"\ncategory: "core"\n---\n# Memories: core\n\n'
        '- first <!-- memcore {"id": "m-0000000000000001"} -->\n'
        "  a continuation line\n"
        "\n```\n- not an item: inside a fence\n```\n\n"
        "- added by hand, no id yet\n"
        "A paragraph ends the list.\n\n- a new list\n"
    )
    parsed = memory_file_of("memory/users/u1/core.md", page)
    assert parsed is not None
    counted = memory_items_in("memory/other.md", page)  # not the parse just cached
    assert counted == len(parsed.items) == 4
    assert memory_items_in("memory/notes.md", "# just notes\n\n- a list item\n") is None
