"""The L1 cache of search results: hits for a repeated query, never a stale answer."""

from __future__ import annotations

from pathlib import Path

import pytest

from memcore.core.lru import LRU
from memcore.core.settings import Settings, load_settings
from memcore.service import MemoryService
from tests.conftest import make_service
from tests.support import FakeEmbedder, write


def test_lru_keeps_the_most_recently_used_entries() -> None:
    cache: LRU[str, int] = LRU(2)
    cache.put("a", 1)
    cache.put("b", 2)
    assert cache.get("a") == 1  # a is now newer than b
    cache.put("c", 3)
    assert cache.get("b") is None and cache.get("a") == 1 and cache.get("c") == 3
    assert len(cache) == 2 and cache.hits == 3 and cache.misses == 1
    assert cache.peek("b") is None and cache.peek("a") == 1 and cache.hits == 3  # not counted
    cache.put("d", 4)  # a peek did not make "a" the most recent: it goes
    assert cache.peek("a") is None
    assert cache.get("c", lambda v: v > 5) is None and cache.misses == 2  # not fresh: a miss


async def test_a_repeated_query_is_answered_from_the_cache_until_the_index_changes(
    vault: Path, service: MemoryService
) -> None:
    write(vault, "MEMORY.md", "# Engine\n\nDiveAdstra uses DX12 by default.\n")
    await service.index()
    cache = service.searcher.cache
    assert cache is not None
    first = await service.search("DX12 default")
    again = await service.search("DX12 default")
    assert again is first and cache.hits == 1
    assert (await service.search("DX12 default", limit=1)) is not first  # another question
    await service.memories.add("DiveAdstra's DX12 default is set in engine.ini")
    fresh = await service.search("DX12 default")
    assert fresh is not first and any("engine.ini" in h.text for h in fresh.hits)


async def test_a_hit_asks_the_index_for_nothing_but_its_state(
    vault: Path, service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A question asked before starts its snapshot alone and is answered from the cache: no
    keyword query is left running on the snapshot's connection for the next search to wait
    behind. An answer of an older state is not given: the search runs in full."""
    write(vault, "MEMORY.md", "# Engine\n\nDiveAdstra uses DX12 by default.\n")
    await service.index()
    asked: list[str] = []
    async with service.store.snapshot() as reader:
        cls = type(reader)  # the backend's reader
    search_text = cls.search_text

    async def counted(self: object, query: str, *args: object) -> list[tuple[int, float]]:
        asked.append(query)
        return await search_text(self, query, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(cls, "search_text", counted)
    first = await service.search("DX12 default")
    assert asked == ["DX12 default"]
    assert await service.search("DX12 default") is first and asked == ["DX12 default"]
    await service.memories.add("DiveAdstra's DX12 default is set in engine.ini")
    fresh = await service.search("DX12 default")
    assert fresh is not first and asked.count("DX12 default") == 2
    assert any("engine.ini" in h.text for h in fresh.hits)


async def test_a_write_by_another_process_invalidates_the_cache(
    vault: Path, settings: Settings, embedder: FakeEmbedder
) -> None:
    write(vault, "MEMORY.md", "# Tea\n\nAlice drinks green tea.\n")
    async with (
        make_service(settings, embedder) as reader,
        make_service(settings, embedder) as writer,
    ):
        await reader.index()
        before = await reader.search("what does Alice drink")
        await writer.memories.add("Alice switched to oolong tea")  # another connection
        after = await reader.search("what does Alice drink")
    assert after is not before and any("oolong" in h.text for h in after.hits)


async def test_the_cache_can_be_turned_off(vault: Path, embedder: FakeEmbedder) -> None:
    settings = load_settings(vault, {"search.cache_size": 0}, env={})
    async with make_service(settings, embedder) as svc:
        assert svc.searcher.cache is None
        write(vault, "MEMORY.md", "# Tea\n\nAlice drinks green tea.\n")
        await svc.index()
        assert (await svc.search("tea")) is not (await svc.search("tea"))


async def test_a_keyword_only_answer_while_the_embedder_is_down_is_not_kept(
    vault: Path, service: MemoryService, embedder: FakeEmbedder
) -> None:
    write(vault, "MEMORY.md", "# Tea\n\nAlice drinks green tea.\n")
    await service.index()
    embedder.down = True
    degraded = await service.search("green tea")
    assert degraded.mode == "keyword" and degraded.warnings
    embedder.down = False
    service.embedder.mark_up()
    recovered = await service.search("green tea")
    assert recovered.mode == "hybrid" and recovered is not degraded
