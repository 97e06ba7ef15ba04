"""Many callers on one service: searches interleaved with re-indexes here and in another process."""

from __future__ import annotations

import asyncio
import os
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from memcore.core.models import FileState
from memcore.core.settings import Settings, load_settings
from memcore.index.file_batches import _replace
from memcore.index.prepare import PreparedFile
from memcore.service import MemoryService
from memcore.storage.ann import AnnIndex
from memcore.storage.sqlite.queries import SqliteReader
from memcore.storage.sqlite.store import SqliteStore
from memcore.vault.chunker import chunk_markdown
from memcore.vault.files import content_hash, read_memory_file
from tests.conftest import REPO, make_service
from tests.support import FakeEmbedder, write

SECTIONS = 200

SECOND_PROCESS = """
import asyncio, sys
from memcore.embedders.base import EmbeddingRunner
from memcore.service import MemoryService
from memcore.core.settings import load_settings
from memcore.storage.sqlite.store import SqliteStore
from tests.support import FakeEmbedder

async def main() -> None:
    settings = load_settings(sys.argv[1])
    store = SqliteStore(settings.db_path)
    async with MemoryService(settings, store, EmbeddingRunner(FakeEmbedder())) as svc:
        for _ in range(int(sys.argv[2])):
            await svc.index(full=True)

asyncio.run(main())
"""


def variant(n: int) -> str:
    return "# Log\n\n" + "".join(
        f"## Entry {i}\n\nneedle entry {i} of variant v{n}.\n\n" for i in range(SECTIONS)
    )


async def test_searches_during_reindexes_here_and_in_another_process_are_always_whole(
    vault: Path, settings: Settings, service: MemoryService
) -> None:
    await searches_stay_whole_during_reindexes(vault, service)


async def test_searches_stay_whole_while_the_vector_graph_is_built_and_swapped_in(
    vault: Path, embedder: FakeEmbedder
) -> None:
    """Past storage.ann_min_vectors the first search loads the matrix and starts building the
    graph in the background; the same hammering runs across the build and the swap."""
    settings = load_settings(vault, {"storage.ann_min_vectors": 50})
    async with make_service(settings, embedder) as service:
        store = service.store
        assert isinstance(store, SqliteStore)
        write(vault, "memory/a.md", variant(0))
        await service.index()
        await service.search("needle entry")
        assert service.model_id in store._building  # building while the hammering starts
        await searches_stay_whole_during_reindexes(vault, service, indexed=True)
        await store.prepare_vectors(service.model_id)
        assert isinstance(store._vectors[service.model_id], AnnIndex)
        final = await service.search("needle entry", limit=SECTIONS + 10)
        assert len(final.hits) == SECTIONS


async def searches_stay_whole_during_reindexes(
    vault: Path, service: MemoryService, indexed: bool = False
) -> None:
    if not indexed:
        write(vault, "memory/a.md", variant(0))
        await service.index()
    problems: list[str] = []
    searches = 0
    writers_done = asyncio.Event()

    async def rewrite() -> None:
        for n in range(1, 31):
            # Atomic, as editors save: a plain write_text is briefly an empty file, and the
            # other process may index that moment (a correct result, but not this test's point).
            tmp = vault / "memory" / ".a.md.tmp"
            tmp.write_text(variant(n), encoding="utf-8")
            os.replace(tmp, vault / "memory" / "a.md")
            await service.index(["memory/a.md"])
            await asyncio.sleep(0.01)

    async def reindex_elsewhere() -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", SECOND_PROCESS, str(vault), "3", env=env, cwd=REPO,
            stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
        _, err = await proc.communicate()
        if proc.returncode:
            problems.append(f"second process failed: {err.decode()[-500:]}")

    async def search_loop() -> None:
        nonlocal searches
        while not writers_done.is_set() or searches < 500:
            try:
                result = await service.search("needle entry", limit=10)
            except Exception as exc:
                problems.append(f"raised {type(exc).__name__}: {exc}")
                continue
            finally:
                searches += 1
            hits = result.hits
            variants = {m for h in hits for m in re.findall(r"variant (v\d+)", h.text)}
            if len(hits) != 10 or result.mode != "hybrid" or len(variants) != 1:
                problems.append(f"{len(hits)} hits, mode {result.mode}, variants {variants}")
            await asyncio.sleep(0)

    async def writers() -> None:
        await asyncio.gather(rewrite(), reindex_elsewhere())
        writers_done.set()

    started = time.monotonic()
    await asyncio.gather(writers(), search_loop(), search_loop(), search_loop())
    assert searches >= 500
    assert problems == [], problems[:5]
    assert time.monotonic() - started < 60
    # the index ends exactly where the file is
    final = await service.search("needle entry", limit=SECTIONS + 10)
    assert len(final.hits) == SECTIONS
    assert {re.findall(r"v\d+", h.text)[0] for h in final.hits} == {"v30"}


async def test_concurrent_index_runs_of_one_file_end_with_its_last_content(
    vault: Path, service: MemoryService
) -> None:
    write(vault, "memory/a.md", "# A\n\nfirst\n")
    await service.index()

    async def edit(n: int) -> None:
        write(vault, "memory/a.md", f"# A\n\nedit number{n}\n")
        await service.index(["memory/a.md"])

    await asyncio.gather(*(edit(n) for n in range(20)))
    await service.index(["memory/a.md"])
    (hit,) = (await service.search("edit", limit=5)).hits
    assert hit.text == (vault / "memory/a.md").read_text().strip()


async def test_a_limit_two_search_after_a_file_shrinks_returns_two(
    vault: Path, service: MemoryService
) -> None:
    write(vault, "MEMORY.md", "".join(f"# S{i}\n\nshared word {i}\n\n" for i in range(5)))
    await service.search("warm the vector matrix")
    await service.index()
    await service.search("shared")
    write(vault, "MEMORY.md", "".join(f"# S{i}\n\nshared word {i}\n\n" for i in range(2, 5)))
    await service.index()
    result = await service.search("shared word", limit=2)
    assert len(result.hits) == 2 and result.mode == "hybrid"


async def test_a_version_read_before_a_newer_one_was_indexed_never_replaces_it(
    vault: Path, service: MemoryService
) -> None:
    """Two writers of one file: the first reads version A, the second writes and indexes B,
    then the first commits. A must not replace B in the index (the file says B)."""
    write(vault, "memory/a.md", "# A\n\nversion A\n")
    await service.index()
    st = (vault / "memory" / "a.md").stat()
    text, data = read_memory_file(vault, "memory/a.md", 10**6)
    chunks, _ = chunk_markdown(text, "memory/a.md")
    old = PreparedFile(FileState("memory/a.md", content_hash(data), st.st_size, st.st_mtime_ns),
                       chunks, [None] * len(chunks))  # fmt: skip
    await asyncio.sleep(0.01)
    write(vault, "memory/a.md", "# A\n\nversion B, newer\n")
    await service.index()
    stale: list[str] = []
    async with service.store.transaction() as tx:
        await _replace([old], {}, "m", vault, stale, tx)
    assert stale == ["memory/a.md"]
    hits = (await service.search("version")).hits
    assert [h.text.splitlines()[-1] for h in hits] == ["version B, newer"]


class _GatedEmbedder(FakeEmbedder):
    """Embeds a search's query only once ``gate`` opens (the documents at once)."""

    def __init__(self, in_process: bool) -> None:
        super().__init__(in_process=in_process)
        self.gate = asyncio.Event()

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if "otter pebbles" in texts:  # the query, not the page
            await self.gate.wait()
        return await super().embed(texts)


@pytest.mark.parametrize("in_process", [True, False])
async def test_a_search_runs_its_keyword_query_while_a_model_in_this_process_embeds(
    settings: Settings, vault: Path, monkeypatch: pytest.MonkeyPatch, in_process: bool
) -> None:
    """With a model in this process the query's vector takes milliseconds: the snapshot opens
    and the keyword query runs meanwhile. A remote embedder may take seconds (or retry): no
    snapshot waits on it, so the keyword query starts only once the vector is there."""
    write(vault, "MEMORY.md", "# Notes\n\nThe otter counted pebbles by the river.\n")
    embedder = _GatedEmbedder(in_process)
    started = asyncio.Event()
    search_text = SqliteReader.search_text

    async def keyword_query(self: SqliteReader, *args: Any, **kwargs: Any) -> Any:
        started.set()
        return await search_text(self, *args, **kwargs)

    async with make_service(settings, embedder) as svc:
        await svc.index()
        monkeypatch.setattr(SqliteReader, "search_text", keyword_query)
        search = asyncio.ensure_future(svc.search("otter pebbles"))
        try:
            await asyncio.wait_for(started.wait(), 0.5)
        except TimeoutError:
            assert not in_process, "the keyword query waited for the model"
        else:
            assert in_process, "the keyword query ran while a remote embedder answered"
        assert not search.done()
        embedder.gate.set()
        result = await asyncio.wait_for(search, 10)
    assert result.mode == "hybrid" and result.hits[0].path == "MEMORY.md"
    assert result.hits[0].vector_score is not None and result.hits[0].keyword_score is not None
