"""Symbolic links: memcore never writes through one out of the vault, and reads through one
only when index.follow_links says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from memcore.core.errors import VaultError
from memcore.core.settings import load_settings
from tests.conftest import make_service
from tests.support import FakeEmbedder, write


def listing(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "secret.md").write_text("# Secret\n\nThe launch code is 0000.\n")
    return folder


async def test_writes_never_follow_a_link_out_of_the_vault(vault: Path, outside: Path) -> None:
    (vault / "memory" / "users").mkdir()
    (vault / "memory" / "users" / "alice").symlink_to(outside)  # a folder on the way
    (vault / "memory" / "shared.md").symlink_to(outside / "secret.md")  # the file itself
    before = listing(outside)
    async with make_service(load_settings(vault), FakeEmbedder()) as svc:
        with pytest.raises(VaultError, match="leads out of the vault") as err:
            await svc.memories.add("Alice likes tea", user_id="alice")
        assert "\n" not in str(err.value)
        with pytest.raises(VaultError, match="leads out of the vault"):
            await svc.memories.write_memory("appended", "memory/shared.md")
        await svc.memories.add("a shared fact")  # memory/core.md: inside, fine
    assert listing(outside) == before
    assert (outside / "secret.md").read_text() == "# Secret\n\nThe launch code is 0000.\n"


async def test_notes_behind_links_out_of_the_vault_are_read_only_when_asked(
    vault: Path, outside: Path
) -> None:
    write(vault, "memory/own.md", "# Own\n\nThe cat is called Miso.\n")
    (vault / "memory" / "linked.md").symlink_to(outside / "secret.md")
    (vault / "memory" / "team").symlink_to(outside)
    async with make_service(load_settings(vault), FakeEmbedder()) as svc:
        await svc.index()
        await svc.index(["memory/team/secret.md"])  # as a watch event would name it
        assert (await svc.status()).files == 1
        assert all("launch" not in h.text for h in (await svc.search("launch code")).hits)
    followed = load_settings(vault, {"index.follow_links": True})
    async with make_service(followed, FakeEmbedder()) as svc:
        await svc.index()
        assert (await svc.status()).files == 3
        hits = (await svc.search("launch code")).hits
        assert hits and "launch code" in hits[0].text
