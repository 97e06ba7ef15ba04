"""The L1 cache of search results: hits for a repeated query, never a stale answer."""

from __future__ import annotations

from pathlib import Path

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
