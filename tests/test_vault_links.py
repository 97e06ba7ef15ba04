"""Symbolic links: memcore never writes through one out of the vault, and reads through one
only when index.follow_links says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from memcore.core.errors import VaultError
from memcore.core.settings import load_settings
from memcore.vault import files
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


@pytest.mark.parametrize("walk", ["kernel", "python"])
def test_links_are_judged_alike_by_the_kernel_walk_and_the_python_one(
    vault: Path, outside: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, walk: str
) -> None:
    if walk == "python":  # a system without O_PATH and /proc: Path.resolve walks
        monkeypatch.setattr(files, "_O_PATH", 0)
    memory = vault / "memory"
    (memory / "users").mkdir()
    (memory / "users" / "alice").symlink_to(outside)  # out
    (memory / "inner").mkdir()
    (memory / "team").symlink_to(memory / "inner")  # a link that stays inside
    sibling = vault.parent / f"{vault.name}-other"  # the vault's path is a prefix of its path
    sibling.mkdir()
    (memory / "peer").symlink_to(sibling)
    via = tmp_path / "via"
    via.symlink_to(vault)  # the vault itself, reached through a link
    for root in (vault, via):
        assert files.leads_out(root, "memory/users/alice/core.md")
        assert files.leads_out(root, "memory/peer/core.md")
        assert not files.leads_out(root, "memory/team/core.md")
        assert not files.leads_out(root, "memory/new/deeper/core.md")  # not there yet
        assert files.check_writable(root, "memory/team/core.md") == root / "memory/team/core.md"
        with pytest.raises(VaultError, match="leads out of the vault"):
            files.check_writable(root, "memory/users/alice/new/core.md")
