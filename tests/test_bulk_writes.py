"""A batch over many users' files on PostgreSQL holds their pages against other nodes a few
hundred at a time (one statement, not two a file): it waits for a page another node is
writing, then lands whole beside that node's edit; past the busy timeout it is refused whole."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from memcore.core.errors import StorageBusy
from memcore.core.settings import load_settings
from memcore.memory.adding import NewMemory
from memcore.storage.postgres.roles import FileHolds
from memcore.vault.memory_format import Scope
from tests.conftest import make_service
from tests.support import FakeEmbedder

USERS = 30  # over adding.MANY_FILES: the many-files path


def _batch(tag: str) -> list[NewMemory]:
    return [NewMemory(f"{tag} fact {n} of user {n}", Scope(user_id=f"u{n}")) for n in range(USERS)]


async def test_a_batch_waits_for_a_page_another_node_writes_then_lands_beside_its_edit(
    vault: Path, postgres_url: str, namespace: str, embedder: FakeEmbedder
) -> None:
    settings = load_settings(vault, {"storage.url": postgres_url, "storage.namespace": namespace})
    other = FileHolds(postgres_url, namespace, busy_timeout_s=5.0)
    page = vault / "memory/users/u7/core.md"
    try:
        async with make_service(settings, embedder) as svc:
            await svc.memories.add_batch(_batch("first"))  # every user's page exists
            async with other.hold(["memory/users/u7/core.md"]):
                adding = asyncio.create_task(svc.memories.add_batch(_batch("second")))
                await asyncio.sleep(0.5)
                assert not adding.done()
                assert "second fact" not in (vault / "memory/users/u3/core.md").read_text()
                with page.open("a", encoding="utf-8") as fh:  # the other node's write
                    fh.write("- written by the other node\n")
            added = await asyncio.wait_for(adding, 30)
            assert len(added) == USERS
            text = page.read_text()
            assert "written by the other node" in text and "second fact 7 of user 7" in text
            found = await svc.memories.get_all(user_id="u7")
            assert {"first fact 7 of user 7", "second fact 7 of user 7"} <= {
                r.text for r in found
            }
    finally:
        await other.aclose()


async def test_a_batch_meeting_a_page_held_past_the_timeout_is_refused_whole(
    vault: Path, postgres_url: str, namespace: str, embedder: FakeEmbedder
) -> None:
    settings = load_settings(
        vault,
        {"storage.url": postgres_url, "storage.namespace": namespace,
         "storage.busy_timeout_s": 0.3},
    )  # fmt: skip
    other = FileHolds(postgres_url, namespace, busy_timeout_s=5.0)
    try:
        async with make_service(settings, embedder) as svc:
            await svc.memories.add_batch(_batch("first"))
            before = {p: p.read_bytes() for p in (vault / "memory").rglob("*.md")}
            async with other.hold(["memory/users/u12/core.md"]):
                with pytest.raises(StorageBusy, match="another memcore node"):
                    await svc.memories.add_batch(_batch("second"))
            assert {p: p.read_bytes() for p in (vault / "memory").rglob("*.md")} == before
            assert await svc.memories.count() == USERS
    finally:
        await other.aclose()
