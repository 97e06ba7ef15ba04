"""storage.db = ":memory:": an index that lives as long as its store, for tests and
short-lived agents. The Markdown is still the truth; nothing else is left behind."""

from __future__ import annotations

import os
from pathlib import Path

from memcore.compose import open_service
from memcore.core.settings import load_settings
from tests.support import FakeEmbedder, write


def memcore_scratch() -> set[str]:
    found: set[str] = set()
    for folder in ("/dev/shm", os.environ.get("TMPDIR", "/tmp")):
        if os.path.isdir(folder):
            found |= {
                os.path.join(folder, n) for n in os.listdir(folder) if n.startswith("memcore-")
            }
    return found


async def test_an_in_memory_index_serves_and_leaves_nothing_behind(vault: Path) -> None:
    write(vault, "MEMORY.md", "# Memory\n\nThe cat is called Miso.\n")
    before = memcore_scratch()
    settings = load_settings(vault, {"storage.db": ":memory:"})
    async with open_service(settings, FakeEmbedder()) as svc:  # a new index: catches up first
        assert (await svc.status()).db_path == ":memory:"
        (m,) = await svc.memories.add("Alice likes tea", user_id="alice")
        hits = (await svc.search("what is the cat called")).hits
        assert hits and hits[0].path == "MEMORY.md"
        assert [r.id for r in await svc.memories.get_all(user_id="alice")] == [m.id]
        assert len(memcore_scratch() - before) == 1  # its private folder, while it is open
    assert memcore_scratch() == before
    assert not (vault / ".memcore").exists()
    assert "Alice likes tea" in (vault / m.path).read_text()  # the Markdown stays the truth
    # a second process (or run) starts from the Markdown again
    async with open_service(settings, FakeEmbedder()) as svc:
        assert [r.text for r in await svc.memories.get_all(user_id="alice")] == ["Alice likes tea"]
