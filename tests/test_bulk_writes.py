"""A batch over many users' files on PostgreSQL holds their pages against other nodes a few
hundred at a time (one statement, not two a file): it waits for a page another node is
writing, then lands whole beside that node's edit; past the busy timeout it is refused whole.
And the indexer's overlapped batches: at most N at once, every error surfaced, none left
running."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from memcore.core.errors import StorageBusy
from memcore.core.overlap import overlapped
from memcore.core.settings import Settings, load_settings
from memcore.memory.adding import NewMemory
from memcore.storage.postgres.roles import FileHolds
from memcore.vault.memory_format import Scope
from tests.conftest import make_service, on_backend
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
            assert {"first fact 7 of user 7", "second fact 7 of user 7"} <= {r.text for r in found}
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


async def test_overlapped_jobs_run_at_most_n_at_once_and_all_end_before_an_error_is_raised() -> (
    None
):
    running, most, ended = 0, 0, []

    def job(n: int, fail: bool = False):  # type: ignore[no-untyped-def]
        async def run() -> None:
            nonlocal running, most
            running += 1
            most = max(most, running)
            try:
                await asyncio.sleep(0.02 if n % 2 else 0.05)
                if fail:
                    raise ValueError(f"job {n} failed")
            finally:
                running -= 1
                ended.append(n)

        return run

    await overlapped([job(n) for n in range(7)], 2)
    assert most == 2 and sorted(ended) == list(range(7))

    ended.clear()
    with pytest.raises(ValueError, match="job 2 failed"):
        await overlapped([job(n, fail=n == 2) for n in range(10)], 3)
    assert running == 0  # nothing left running when the error comes out
    assert 2 in ended and len(ended) < 10  # the jobs after the error were never started

    ended.clear()
    done: list[int] = []
    await overlapped(
        [job(n) for n in range(6)], 2, stopped=lambda: len(ended) >= 2,
        each_done=lambda: done.append(1),
    )  # fmt: skip
    assert len(ended) < 6 and len(done) == len(ended)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, vault: Path) -> Settings:
    return on_backend(request, vault)


async def test_a_load_over_many_files_counts_its_memories_without_reading_them_back(
    backend: Settings, embedder: FakeEmbedder
) -> None:
    async with make_service(backend, embedder) as svc:

        async def no_records(*_: object, **__: object) -> list[object]:
            raise AssertionError("a load read its records back")

        writer = svc.memories.writer  # type: ignore[attr-defined]
        reading = writer.records
        writer.records = no_records
        try:
            assert await svc.memories.load(_batch("loaded")) == USERS
        finally:
            writer.records = reading
        assert await svc.memories.count() == USERS
        found = await svc.memories.search("loaded fact 9 of user 9", user_id="u9", limit=1)
        assert found and found[0].text == "loaded fact 9 of user 9"
