"""Appends read by their new lines (index/tails.py): a batch's appends to many users' pages are
indexed from the lines added, and the index ends exactly where reading every file whole would
leave it, on both backends; a person's edit that makes a page no longer a plain append (a
changed memory, a line continuing the last one, an item added by hand, a pasted copy, a closing
paragraph) sends that page through a whole read."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import memcore.index.prepare as prepare
from memcore.core.settings import Settings
from memcore.memory.adding import NewMemory
from memcore.service import MemoryService
from memcore.vault.memory_format import Scope
from tests.conftest import make_service, on_backend
from tests.support import FakeEmbedder

USERS = 12  # over adding.MANY_FILES: the batch path


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, vault: Path) -> Settings:
    return on_backend(request, vault)


def _round(n: int) -> list[NewMemory]:
    return [
        NewMemory(f"round {n} fact {k} of user {u}", Scope(user_id=f"u{u}"))
        for u in range(USERS)
        for k in range(3)
    ]


async def _index_as_held(svc: MemoryService) -> tuple[list[Any], list[Any]]:
    """Every memory record, and every file's chunks as stored (fields, not row ids)."""
    records = sorted(await svc.memories.get_all(limit=10_000), key=lambda r: r.id)
    async with svc.store.snapshot() as r:
        paths = sorted(await r.file_states())
        files = await r.stored_files(paths)
    chunks = [
        (f.state.path, c.index, c.text, c.start_line, c.end_line, c.content_hash, c.date,
         c.metadata, v is not None)
        for f in files
        for c, v in zip(f.chunks, f.vectors, strict=True)
    ]  # fmt: skip
    return records, chunks


async def test_appends_read_by_their_new_lines_index_what_a_whole_read_would(
    backend: Settings, vault: Path, embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    tails: list[tuple[str, bool]] = []  # (page, read by its new lines)
    whole = prepare.appended_chunks

    def spied(text: str, data: bytes, path: str, *rest: Any) -> Any:
        out = whole(text, data, path, *rest)
        tails.append((path, out is not None))
        return out

    monkeypatch.setattr(prepare, "appended_chunks", spied)
    page = {u: vault / f"memory/users/u{u}/core.md" for u in range(USERS)}
    async with make_service(backend, embedder) as svc:
        for n in range(3):
            await svc.memories.add_batch(_round(n))
        assert {p for p, by_tail in tails if by_tail} == {
            f"memory/users/u{u}/core.md" for u in range(USERS)
        }
        assert all(by_tail for _, by_tail in tails)
        # a person's edits, each of which makes the page more than an append
        text = page[1].read_text()
        page[1].write_text(text.replace("round 0 fact 0 of user 1", "an edited fact", 1))
        pasted = next(ln for ln in page[6].read_text().splitlines() if ln.startswith("- "))
        with page[2].open("a") as fh:  # and a memory pasted from another page after it
            fh.write(f"  continuing the last memory\n{pasted}\n")
        with page[3].open("a") as fh:
            fh.write("- added by hand\n")
        lines = page[4].read_text().splitlines()
        with page[4].open("a") as fh:
            fh.write(next(line for line in lines if line.startswith("- ")) + "\n")
        with page[5].open("a") as fh:
            fh.write("\nA closing paragraph.\n")
        tails.clear()
        await svc.index()
        assert {p for p, by_tail in tails if by_tail} == set()  # each read whole
        tails.clear()
        await svc.memories.add_batch(_round(3))
        by_tail = {p for p, t in tails if t}
        assert f"memory/users/u{USERS - 1}/core.md" in by_tail
        assert "memory/users/u5/core.md" not in by_tail  # its last memory is not its end
        held = await _index_as_held(svc)
        records, _ = held
        # and the hand-added item (a pasted copy is still the memory it copies)
        assert len(records) == USERS * 12 + 1
        texts = {r.text for r in records}
        assert "an edited fact" in texts and "added by hand" in texts
        continued = [r.text for r in records if r.user_id == "u2" and "continuing" in r.text]
        assert len(continued) == 1 and continued[0].startswith("round 2 fact 2 of user 2")
        # the same vault read whole, every file, into the index again
        report = await svc.index(full=True)
        assert len(report.indexed) == USERS
        assert await _index_as_held(svc) == held
