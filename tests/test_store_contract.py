"""The storage contract: what every backend must do, written against the ports only (no SQL).

Parametrised over backends; SQLite runs it now, and a new backend joins by adding a factory.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import numpy as np
import pytest

from memcore.core.errors import StorageError
from memcore.core.models import Chunk, FileState, SearchFilters, SkippedFile
from memcore.storage.base import IndexWriter, Store, Vector
from memcore.storage.sqlite.store import SqliteStore
from memcore.vault.chunker import chunk_markdown

OpenStore = Callable[[], AbstractAsyncContextManager[Store]]
M = "test:model"


@pytest.fixture(params=["sqlite", "sqlite-graph", "postgres", "postgres-builtin"])
def open_store(request: pytest.FixtureRequest, tmp_path: Path) -> OpenStore:
    """Opens a store on one shared location; each call is a new client, as another process
    would be. ``sqlite-graph`` searches vectors in the HNSW graph from the first vector on
    (the path big vaults take), so every vector promise here holds for it too. ``postgres``
    is a real PostgreSQL with pgvector, in a namespace of this test's own, ranking keywords
    with pg_textsearch where the server has it, vectors in the matrix each process holds
    below ``ann_min_vectors``; ``postgres-builtin`` with PostgreSQL's own full text there
    too, and vectors in pgvector's HNSW index from the first one on."""
    if request.param.startswith("postgres"):
        url = request.getfixturevalue("postgres_url")
        namespace = request.getfixturevalue("namespace")

        @asynccontextmanager
        async def pg_opener() -> AsyncIterator[Store]:
            from memcore.storage.postgres.store import PostgresStore

            bm25 = request.param == "postgres"
            graph_from = 10**9 if bm25 else 0
            async with PostgresStore(
                url, namespace, bm25=bm25, ann_min_vectors=graph_from
            ) as store:
                yield store

        return pg_opener
    ann_min = 1 if request.param == "sqlite-graph" else 10**9

    @asynccontextmanager
    async def opener() -> AsyncIterator[Store]:
        async with SqliteStore(tmp_path / "index.db", ann_min_vectors=ann_min) as store:
            yield store

    return opener


def last_line(text: str) -> str:
    return text.splitlines()[-1]


def vec(*xs: float) -> Vector:
    return np.array(xs, dtype=np.float32)


async def put(
    tx: IndexWriter, path: str, text: str, vectors: list[Vector | None] | None = None
) -> list[int]:
    chunks, _ = chunk_markdown(text, path)
    vs = vectors if vectors is not None else [None] * len(chunks)
    return await tx.replace_file(FileState(path, f"h{hash(text)}", len(text), 1), chunks, vs, M)


async def text_paths(store: Store, query: str, filters: SearchFilters | None = None) -> set[str]:
    async with store.snapshot() as r:
        hits = await r.search_text(query, 20, filters or SearchFilters())
        return {row.path for row in (await r.chunk_rows([c for c, _ in hits])).values()}


async def test_replace_and_delete_keep_full_text_in_step(open_store: OpenStore) -> None:
    async with open_store() as store:
        async with store.transaction() as tx:
            assert len(await put(tx, "MEMORY.md", "# A\n\nalpha words\n\n# B\n\nbeta\n")) == 2
        assert await text_paths(store, "alpha") == {"MEMORY.md"}
        async with store.transaction() as tx:
            await put(tx, "MEMORY.md", "# A\n\ngamma words\n")
        assert await text_paths(store, "alpha") == set()
        assert await text_paths(store, "gamma") == {"MEMORY.md"}
        async with store.transaction() as tx:
            assert await tx.delete_files(["MEMORY.md"]) == 1
        assert await text_paths(store, "gamma") == set()
        async with store.snapshot() as r:
            assert await r.file_states() == {}


async def test_a_failed_transaction_changes_nothing(open_store: OpenStore) -> None:
    async with open_store() as store:
        async with store.transaction() as tx:
            await put(tx, "MEMORY.md", "# A\n\nkept text\n")

        async def fail_midway() -> None:
            async with store.transaction() as tx:
                await put(tx, "MEMORY.md", "# A\n\nreplacement\n")
                await tx.set_meta("k", "v")
                raise RuntimeError("boom")

        with pytest.raises(RuntimeError):
            await fail_midway()
        assert await text_paths(store, "kept") == {"MEMORY.md"}
        assert await text_paths(store, "replacement") == set()
        async with store.snapshot() as r:
            assert await r.get_meta("k") is None


async def test_nearest_vectors_with_filters_and_models(open_store: OpenStore) -> None:
    async with open_store() as store:
        async with store.transaction() as tx:
            await put(tx, "memory/a.md", "# A\n\none\n\n# B\n\ntwo\n", [vec(1, 0), vec(0, 1)])
            await put(tx, "notes.md", "# C\n\nthree\n", [vec(0.9, 0.1)])
        async with store.snapshot() as r:
            assert await r.has_vectors(M) and not await r.has_vectors("other")
            hits = await r.search_vectors(vec(1, 0), M, 2, SearchFilters())
            rows = await r.chunk_rows([c for c, _ in hits])
            assert [last_line(rows[c].text) for c, _ in hits] == ["one", "three"]
            assert hits[0][1] == pytest.approx(1.0)
            only = await r.search_vectors(vec(1, 0), M, 5, SearchFilters(path_prefix="memory/"))
            assert {
                rows2.path for rows2 in (await r.chunk_rows([c for c, _ in only])).values()
            } == {"memory/a.md"}
            assert await r.search_vectors(vec(1, 0), "other", 5, SearchFilters()) == []
            sims = await r.vector_similarity(vec(0, 1), M, [c for c, _ in hits])
            # a backend may keep vectors in half precision: cosines to three decimals
            assert sims[hits[1][0]] == pytest.approx(0.1 / np.hypot(0.9, 0.1), abs=1e-3)


async def test_pending_vectors_and_the_cache(open_store: OpenStore) -> None:
    async with open_store() as store:
        async with store.transaction() as tx:
            ids = await put(tx, "MEMORY.md", "# A\n\none\n\n# B\n\ntwo\n", [vec(1, 0), None])
            await tx.cache_vectors({"abc": vec(1, 2)}, M)
        async with store.snapshot() as r:
            assert await r.count_pending(M) == 1
            assert await r.count_pending("m2") == 2  # a model change makes every vector pending
            (pending,) = await r.pending_chunks(M, 10)
            assert pending.chunk_id == ids[1] and last_line(pending.embed_text) == "two"
            assert list(await r.cached_vectors(["abc", "zzz"], M)) == ["abc"]
            assert await r.cached_vectors(["abc"], "m2") == {}
        async with store.transaction() as tx:
            assert await tx.set_vectors([(pending.chunk_id, pending.content_hash, vec(0, 1))], M)
        async with store.snapshot() as r:
            assert await r.count_pending(M) == 0
            assert await text_paths(store, "two") == {"MEMORY.md"}  # text untouched
            (best, _), *_ = await r.search_vectors(vec(0, 1), M, 1, SearchFilters())
            assert best == ids[1]


async def test_a_vector_for_replaced_text_is_not_stored(open_store: OpenStore) -> None:
    async with open_store() as store:
        async with store.transaction() as tx:
            (old,) = await put(tx, "MEMORY.md", "# A\n\nold\n")
        async with store.snapshot() as r:
            (pending,) = await r.pending_chunks(M, 10)
        async with store.transaction() as tx:  # the file changes while the vector is computed
            await put(tx, "MEMORY.md", "# A\n\nnew text\n")
        async with store.transaction() as tx:
            assert await tx.set_vectors([(old, pending.content_hash, vec(1, 0))], M) == 0
        async with store.snapshot() as r:
            assert await r.count_pending(M) == 1


async def test_a_snapshot_sees_one_state_while_writes_commit(open_store: OpenStore) -> None:
    async with open_store() as store:
        async with store.transaction() as tx:
            old_ids = await put(tx, "MEMORY.md", "# A\n\nbefore\n", [vec(1, 0)])
        async with store.snapshot() as old:
            assert await old.search_vectors(vec(1, 0), M, 5, SearchFilters()) != []
            async with store.transaction() as tx:
                new_ids = await put(
                    tx, "MEMORY.md", "# A\n\nafter\n\n# B\n\nmore\n", [vec(0, 1), vec(1, 1)]
                )
            hits = await old.search_vectors(vec(1, 0), M, 5, SearchFilters())
            assert [c for c, _ in hits] == old_ids
            rows = await old.chunk_rows(old_ids)
            assert [last_line(r.text) for r in rows.values()] == ["before"]
            assert [c for c, _ in await old.search_text("after", 5, SearchFilters())] == []
            # (on PostgreSQL the keyword half may run on another connection, in this snapshot)
            assert [c for c, _ in await old.search_text("before", 5, SearchFilters())] == old_ids
        async with store.snapshot() as new:
            hits = await new.search_vectors(vec(1, 0), M, 5, SearchFilters())
            assert sorted(c for c, _ in hits) == sorted(new_ids)
            rows = await new.chunk_rows([c for c, _ in hits])
            assert {last_line(r.text) for r in rows.values()} == {"after", "more"}


async def test_a_writes_reads_never_wait_behind_the_searches_holding_the_readers(
    open_store: OpenStore,
) -> None:
    """Under load every reader is held by a search and more searches queue for one; the reads
    an add makes (what the index holds of its file, the rows it confirms) must not join that
    queue: they were half of an add's time at 12 clients. A second write's read meanwhile
    (or one nested in the first) takes a reader like a search, and never deadlocks."""
    async with open_store() as store:
        async with store.transaction() as tx:
            (held,) = await put(tx, "MEMORY.md", "# A\n\nheld\n", [vec(1, 0)])
        release = asyncio.Event()
        holding = 0

        async def search() -> list[tuple[int, float]]:
            nonlocal holding
            async with store.snapshot() as r:
                holding += 1
                await release.wait()
                return await r.search_text("held", 5, SearchFilters())

        searches = [asyncio.create_task(search()) for _ in range(12)]
        await asyncio.sleep(0.3)
        assert 0 < holding < 12  # every reader held, the other searches queued
        async with asyncio.timeout(5), store.snapshot(writing=True) as w:
            assert [last_line(r.text) for r in (await w.chunk_rows([held])).values()] == ["held"]
            nested = asyncio.create_task(text_paths(store, "held"))
            await asyncio.sleep(0.05)
            assert not nested.done()  # queued with the searches
        release.set()
        assert [c for c, _ in (await asyncio.gather(*searches))[0]] == [held]
        assert await nested == {"MEMORY.md"}
        # the kept connection is taken: the inner read takes a reader
        async with (
            asyncio.timeout(5),
            store.snapshot(writing=True) as w,
            store.snapshot(writing=True) as inner,
        ):
            assert await inner.chunk_rows([held]) == await w.chunk_rows([held])


async def test_writes_by_another_client_reach_this_ones_vector_search(
    open_store: OpenStore,
) -> None:
    async with open_store() as store:
        async with store.transaction() as tx:
            await put(tx, "MEMORY.md", "# A\n\nmine\n", [vec(1, 0)])
        async with store.snapshot() as r:
            assert len(await r.search_vectors(vec(1, 0), M, 5, SearchFilters())) == 1
        async with open_store() as other, other.transaction() as tx:
            await put(tx, "memory/x.md", "# X\n\ntheirs\n", [vec(0, 1)])
            await tx.delete_files(["MEMORY.md"])
        async with store.snapshot() as r:
            hits = await r.search_vectors(vec(1, 0), M, 5, SearchFilters())
            rows = await r.chunk_rows([c for c, _ in hits])
            assert [last_line(row.text) for row in rows.values()] == ["theirs"]


@pytest.mark.parametrize(
    "query",
    ["AND(", '"unbalanced', "col:umn", "NEAR(a b)", "a* OR", "^start", "-", "'; DROP TABLE x"],
)
async def test_query_text_is_never_syntax(open_store: OpenStore, query: str) -> None:
    async with open_store() as store:
        async with store.transaction() as tx:
            await put(tx, "MEMORY.md", "# A\n\nstart column near and drop table\n")
        async with store.snapshot() as r:
            await r.search_text(query, 5, SearchFilters())  # must not raise
            assert await r.search_text("?!...", 5, SearchFilters()) == []


async def test_chinese_words_are_searchable(open_store: OpenStore) -> None:
    async with open_store() as store:
        async with store.transaction() as tx:
            await put(tx, "memory/zh.md", "# 项目\n\n我们的渲染引擎默认使用DX12。\n")
        assert await text_paths(store, "渲染引擎") == {"memory/zh.md"}
        assert await text_paths(store, "引") == {"memory/zh.md"}  # one character


async def test_filters_on_path_tag_and_date(open_store: OpenStore) -> None:
    async with open_store() as store:
        async with store.transaction() as tx:
            await put(tx, "memory/2024-01-01.md", "# D\n\ncoffee #Drink\n")
            await put(tx, "memory/2024-06-01.md", "# D\n\ncoffee beans\n")
            await put(tx, "MEMORY.md", "# M\n\ncoffee\n")
        assert await text_paths(store, "coffee") == {
            "memory/2024-01-01.md", "memory/2024-06-01.md", "MEMORY.md"
        }  # fmt: skip
        assert await text_paths(store, "coffee", SearchFilters(path_prefix="memory/")) == {
            "memory/2024-01-01.md", "memory/2024-06-01.md"
        }  # fmt: skip
        for tag in ("drink", "#drink", "DRINK"):
            got = await text_paths(store, "coffee", SearchFilters(tag=tag))
            assert got == {"memory/2024-01-01.md"}
        window = SearchFilters(date_from="2024-03-01", date_to="2024-12-31")
        assert await text_paths(store, "coffee", window) == {"memory/2024-06-01.md"}


async def test_meta_touch_and_stats(open_store: OpenStore) -> None:
    async with open_store() as store:
        async with store.transaction() as tx:
            await put(tx, "MEMORY.md", "# A\n\none\n\n# B\n\ntwo\n", [vec(1, 0), None])
            await tx.set_meta("chunking", "v2")
            await tx.touch_file(FileState("MEMORY.md", "ignored", 99, 12345))
            assert (await tx.file_state("MEMORY.md")) is not None
        async with store.snapshot() as r:
            assert await r.get_meta("chunking") == "v2"
            state = (await r.file_states())["MEMORY.md"]
            assert (state.size, state.mtime_ns) == (99, 12345)
            st = await r.stats(M)
            assert (st.files, st.chunks, st.vectors_pending) == (1, 2, 1)
            assert st.last_indexed is not None and st.db_bytes > 0
            assert (await r.stats("other")).other_models == {M: 1}
        assert store.location


async def test_using_a_closed_store_is_a_storage_error(open_store: OpenStore) -> None:
    async with open_store() as store:
        pass
    with pytest.raises(StorageError):
        async with store.snapshot():
            pass
    with pytest.raises(StorageError):
        async with store.transaction():
            pass


async def test_skipped_files_are_recorded_until_the_path_is_written_or_deleted(
    open_store: OpenStore,
) -> None:
    async with open_store() as store:
        async with store.transaction() as tx:
            await tx.set_skipped(
                [SkippedFile("a.md", "binary file", 3, 7), SkippedFile("b.md", "too big", 9, 1)]
            )
        async with store.transaction() as tx:
            await tx.set_skipped([SkippedFile("a.md", "invalid UTF-8 at byte 1", 4, 8)])
        async with store.snapshot() as r:
            assert await r.skipped_files() == {
                "a.md": SkippedFile("a.md", "invalid UTF-8 at byte 1", 4, 8),
                "b.md": SkippedFile("b.md", "too big", 9, 1),
            }
        async with store.transaction() as tx:
            await put(tx, "a.md", "# A\n\nnow fine\n")
            await tx.delete_files(["b.md"])
        async with store.snapshot() as r:
            assert await r.skipped_files() == {}


async def test_stored_files_give_back_what_was_written(open_store: OpenStore) -> None:
    text = "---\ntags: [ops]\n---\n# A\n\n## B\n\none #x\n\n## C\n\ntwo\n"
    chunks, _ = chunk_markdown(text, "memory/a.md")
    vectors: list[Vector | None] = [vec(1, 0), None, vec(0, 1)][: len(chunks)]
    async with open_store() as store:
        async with store.transaction() as tx:
            state = FileState("memory/a.md", "h1", len(text), 7)
            await tx.replace_file(state, chunks, vectors, M)
        async with store.snapshot() as r:
            (got,) = await r.stored_files(["memory/a.md", "memory/missing.md"])
    assert got.state == FileState("memory/a.md", "h1", len(text), 7)
    assert [(c.heading_path, c.start_line, c.end_line, c.text, c.content_hash, c.tags, c.date,
             dict(c.metadata), c.index) for c in got.chunks] == [
        (c.heading_path, c.start_line, c.end_line, c.text, c.content_hash, c.tags, c.date,
         dict(c.metadata), c.index) for c in chunks
    ]  # fmt: skip
    assert got.models == tuple(None if v is None else M for v in vectors)
    for mine, theirs in zip(got.vectors, vectors, strict=True):
        assert (mine is None) == (theirs is None)
        if mine is not None and theirs is not None:
            assert np.allclose(mine, theirs, atol=1e-6)


async def test_keyword_search_ranks_only_chunks_with_rare_words_and_fills_up_when_short(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memcore.storage.postgres import keywords as postgres_queries
    from memcore.storage.sqlite import keywords as sqlite_keywords

    for module in (sqlite_keywords, postgres_queries):
        monkeypatch.setattr(module, "ANCHOR_CAP", 50)  # "common" at 120 chunks is common
        monkeypatch.setattr(module, "ANCHOR_ROWS", 2)
    async with open_store() as store:
        files = [
            (f"memory/n{i}.md", f"# N{i}\n\ncommon filler {i} common again\n") for i in range(120)
        ]
        files += [(f"memory/z{i}.md", f"# Z{i}\n\nthe zebra {i} is common\n") for i in range(3)]
        async with store.transaction() as tx:
            for path, text in files:
                chunks, _ = chunk_markdown(text, path)
                await tx.replace_file(FileState(path, path, len(text), 1), chunks, [None], M)
        async with store.snapshot() as r:
            anchored = await r.search_text("common zebra", 2, SearchFilters())
            filled = await r.search_text("common zebra", 5, SearchFilters())
            paths = {c: row.path for c, row in (await r.chunk_rows([c for c, _ in filled])).items()}
    assert len(anchored) == 2 and len(filled) == 5
    assert [paths[c][:8] for c, _ in filled[:3]] == ["memory/z"] * 3  # the rare word first
    assert {c for c, _ in anchored} <= {c for c, _ in filled[:3]}


async def test_keyword_coverage_is_the_share_of_the_querys_rarity_a_chunk_holds(
    open_store: OpenStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A chunk with every word covers 1.0 and one with none 0.0; between, each word counts by
    its rarity over the whole index, a word found nowhere most. Past the count cap (here 50
    chunks) a word's count is estimated, and it still weighs little."""
    from memcore.storage.postgres import keywords as postgres_queries
    from memcore.storage.sqlite import keywords as sqlite_keywords

    for module in (sqlite_keywords, postgres_queries):
        monkeypatch.setattr(module, "ANCHOR_CAP", 50)
    async with open_store() as store:
        files = [(f"memory/n{i}.md", f"# N{i}\n\ncommon filler {i}\n") for i in range(80)]
        files += [
            ("memory/zebra.md", "# Zebra\n\nthe zebra is common\n"),
            ("memory/both.md", "# Both\n\nzebra stripes, common ones\n"),
            ("memory/cn.md", "# 笔记\n\n数据库迁移已经完成\n"),
        ]
        ids: dict[str, int] = {}
        async with store.transaction() as tx:
            for path, text in files:
                chunks, _ = chunk_markdown(text, path)
                (ids[path],) = await tx.replace_file(
                    FileState(path, path, len(text), 1), chunks, [None], M
                )
        zebra, both, common, cn = (
            ids["memory/zebra.md"], ids["memory/both.md"], ids["memory/n0.md"], ids["memory/cn.md"]
        )  # fmt: skip
        async with store.snapshot() as r:
            held = await r.keyword_coverage("zebra stripes common", [zebra, both, common])
            nowhere = await r.keyword_coverage("zebra nosuchword", [zebra])
            alone = await r.keyword_coverage("Zebra", [zebra, common])
            chinese = await r.keyword_coverage("数据库 天气", [cn])
            nothing = await r.keyword_coverage("?!", [zebra])
            gone = await r.keyword_coverage("zebra", [10**9])
        async with store.snapshot() as r:  # after a search, which counted the words already
            found = await r.search_text("zebra stripes common", 3, SearchFilters())
            top = await r.keyword_coverage("zebra stripes common", [found[0][0]])
            again = await r.keyword_coverage("zebra stripes common", [zebra, both, common])
    assert top == pytest.approx({found[0][0]: held[found[0][0]]})
    assert held[both] == pytest.approx(1.0) and again == pytest.approx(held)
    assert 0.0 < held[common] < 0.1 < held[zebra] < 0.6  # "common" is in 81 of 83 chunks
    assert 0.0 < nowhere[zebra] < 0.5  # the word found nowhere weighs more than "zebra"
    assert alone == {zebra: 1.0, common: 0.0}
    # 数据库 is asked as 数据, 据库 and 数据库 (jieba's search mode), all held; 天气 is not
    assert chinese[cn] == pytest.approx(0.75, abs=0.05)
    assert nothing == {} and gone == {10**9: 0.0}


async def test_a_write_that_names_its_unchanged_chunks_leaves_their_rows_and_only_if_true(
    open_store: OpenStore,
) -> None:
    """An append to a memory file names the chunks it left as the index holds them: their
    rows (ids, vectors) stay as they are. The claim is taken only when the file is stored in
    the version it names, with those rows: a stale one is compared in full as usual."""
    from memcore.core.models import MemoryQuery
    from memcore.vault.memory_format import MemoryItem, Scope, new_memory_file, render_item

    path = "memory/users/u/core.md"
    head = new_memory_file(Scope(user_id="u"), "core")

    def file(*texts: str) -> tuple[FileState, list[Chunk]]:
        lines = [
            line
            for n, t in enumerate(texts)
            for line in render_item(MemoryItem(f"m{n}", t, None, "2024-01-01", "", {}))
        ]
        text = head + "\n".join(lines) + "\n"
        return FileState(path, f"h{hash(text)}", len(text), 1), chunk_markdown(text, path)[0]

    async with open_store() as store:
        first_state, first = file("likes tea", "works in Oslo", "has a cat")
        async with store.transaction() as tx:
            ids = await tx.replace_file(first_state, first, [vec(1, 0), vec(0, 1), vec(1, 1)], M)
        state, chunks = file("likes tea", "works in Oslo", "has a cat", "plays chess")
        async with store.transaction() as tx:
            more = await tx.replace_file(
                state, chunks, [None, None, None, vec(2, 1)], M, 3, first_state.content_hash
            )
        assert more[:3] == ids and len(set(more)) == 4
        async with store.snapshot() as r:
            (stored,) = await r.stored_files([path])
            assert [c.text for c in stored.chunks][-1] == "plays chess"
            assert all(v is not None for v in stored.vectors)  # the kept rows kept theirs
            found = await r.memories(MemoryQuery(path=path, limit=10))
            assert [m.text for m in found] == [
                "likes tea",
                "works in Oslo",
                "has a cat",
                "plays chess",
            ]
        # a claim about a version the index no longer holds: compared in full
        edited_state, edited = file("likes green tea", "works in Oslo", "has a cat", "plays chess")
        async with store.transaction() as tx:
            await tx.replace_file(edited_state, edited, [vec(1, 0)] + [None] * 3, M, 4, "stale")
        # a claim of more rows than the file holds: compared in full
        last_state, last = file("likes green tea", "works in Bergen", "has a cat", "plays chess")
        async with store.transaction() as tx:
            await tx.replace_file(
                last_state, last, [None, vec(0, 1), None, None], M, 9, edited_state.content_hash
            )
        async with store.snapshot() as r:
            found = await r.memories(MemoryQuery(path=path, limit=10))
            assert [m.text for m in found] == [
                "likes green tea", "works in Bergen", "has a cat", "plays chess"
            ]  # fmt: skip
            assert await r.search_text("Bergen", 5, SearchFilters())
            assert not await r.search_text("Oslo", 5, SearchFilters())
        # a true claim is taken as it is: the rows it names are not even read (what makes an
        # append cheap), so a chunk given for one of them changes nothing there
        final_state, final = file("likes black tea", "works in Bergen", "has a cat", "plays go")
        async with store.transaction() as tx:
            await tx.replace_file(final_state, final, [None] * 4, M, 1, last_state.content_hash)
        async with store.snapshot() as r:
            found = await r.memories(MemoryQuery(path=path, limit=10))
            assert [m.text for m in found] == [
                "likes green tea", "works in Bergen", "has a cat", "plays go"
            ]  # fmt: skip


async def test_an_append_given_by_its_new_chunks_is_written_only_onto_the_version_it_names(
    open_store: OpenStore,
) -> None:
    """``FileRows`` whose chunks are a ChunkTail (an append read by its new lines): written
    onto the version it names; left unwritten, and named, when the file is not stored so
    (another node changed it, or it holds fewer rows). The other files of the call are
    written either way, and nothing of the left one changes."""
    from memcore.core.models import MemoryQuery
    from memcore.storage.base import ChunkTail, FileRows
    from memcore.vault.memory_format import MemoryItem, Scope, new_memory_file, render_item

    def page(user: str, *texts: str) -> tuple[FileState, list[Chunk]]:
        path = f"memory/users/{user}/core.md"
        lines = [
            line
            for n, t in enumerate(texts)
            for line in render_item(MemoryItem(f"{user}{n}", t, None, "2024-01-01", "", {}))
        ]
        text = new_memory_file(Scope(user_id=user), "core") + "\n".join(lines) + "\n"
        return FileState(path, f"h{hash(text)}", len(text), 1), chunk_markdown(text, path)[0]

    def appended(state: FileState, chunks: list[Chunk], head: int, on: str) -> FileRows:
        tail = ChunkTail(head, chunks[head:])
        return FileRows(state, tail, [vec(1, float(n)) for n in range(len(chunks))], head, on)

    async def texts(user: str) -> list[str]:
        async with store.snapshot() as r:
            found = await r.memories(MemoryQuery(user_id=user, limit=10))
        return [m.text for m in found]

    async with open_store() as store:
        a0, a_chunks = page("a", "likes tea")
        b0, b_chunks = page("b", "likes coffee")
        async with store.transaction() as tx:
            assert not await tx.replace_files(
                [FileRows(a0, a_chunks, [vec(1, 0)]), FileRows(b0, b_chunks, [vec(0, 1)])], M
            )
        a1, a_more = page("a", "likes tea", "works in Oslo")
        b1, b_more = page("b", "likes coffee", "has a cat")
        c0, c_chunks = page("c", "plays chess")
        async with store.transaction() as tx:
            left = await tx.replace_files(
                [
                    appended(a1, a_more, 1, a0.content_hash),  # true
                    appended(b1, b_more, 1, "another version"),  # stale
                    FileRows(c0, c_chunks, [vec(1, 1)]),
                ],
                M,
            )
        assert left == [b1.path]
        assert await texts("a") == ["likes tea", "works in Oslo"]
        assert await texts("b") == ["likes coffee"]  # as it was
        assert await texts("c") == ["plays chess"]
        async with store.snapshot() as r:
            assert {s.path: s.content_hash for s in (await r.file_states()).values()} == {
                a1.path: a1.content_hash, b0.path: b0.content_hash, c0.path: c0.content_hash
            }  # fmt: skip
            assert await r.search_text("Oslo", 5, SearchFilters())
            assert not await r.search_text("cat", 5, SearchFilters())
        # a claim of more rows than the file holds is not taken either
        a2, a_last = page("a", "likes tea", "works in Oslo", "plays go", "reads Ibsen")
        async with store.transaction() as tx:
            assert await tx.replace_files([appended(a2, a_last, 3, a1.content_hash)], M) == [
                a2.path
            ]
            assert not await tx.replace_files([appended(a2, a_last, 2, a1.content_hash)], M)
        assert await texts("a") == ["likes tea", "works in Oslo", "plays go", "reads Ibsen"]
        tail = ChunkTail(2, a_last[2:])
        assert len(tail) == 4 and tail[3] is a_last[3] and list(tail[2:]) == a_last[2:]
        with pytest.raises(LookupError):
            tail[1]  # a chunk before the tail is not here
        with pytest.raises(LookupError):
            list(tail)


async def test_many_files_in_one_call_end_as_if_written_one_by_one(open_store: OpenStore) -> None:
    """``replace_files`` of new files, a file whose chunks move, and one memory id in two
    files of the same call: each file ends as ``replace_file`` alone would leave it, the id's
    home is the smaller path and the other place a copy; the ids returned stay in order."""
    from memcore.core.models import MemoryQuery
    from memcore.storage.base import FileRows
    from memcore.vault.memory_format import MemoryItem, Scope, new_memory_file, render_item

    def page(user: str, *items: tuple[str, str]) -> FileRows:
        path = f"memory/users/{user}/core.md"
        lines = [
            line
            for mid, text in items
            for line in render_item(MemoryItem(mid, text, None, "2024-01-01", "", {}))
        ]
        text = new_memory_file(Scope(user_id=user), "core") + "\n".join(lines) + "\n"
        chunks, _ = chunk_markdown(text, path)
        return FileRows(
            FileState(path, f"h{hash(text)}", len(text), 1), chunks, [None] * len(chunks)
        )

    async with open_store() as store:
        first = [page(f"u{n}", (f"m{n}a", f"tea {n}"), (f"m{n}b", f"chess {n}")) for n in range(5)]
        first.append(page("zz", ("shared", "the zebra is striped")))
        async with store.transaction() as tx:
            await tx.replace_files(first, M)
        moved = page("u1", ("m1new", "opera first"), ("m1a", "tea 1"), ("m1b", "chess 1"))
        twin = page("aa", ("shared", "the zebra is striped"))
        async with store.transaction() as tx:
            await tx.replace_files([moved, twin], M)
            ids = await tx.replace_file(
                moved.state, moved.chunks, moved.vectors, M
            )  # the same again, alone: nothing changes, ids in chunk order
        async with store.snapshot() as r:
            found = await r.memories(MemoryQuery(limit=50))
            u1 = await r.memories(MemoryQuery(path="memory/users/u1/core.md", limit=10))
            copies = await r.memory_copies()
            zebra = await r.search_text("zebra", 10, SearchFilters())
            opera = await r.search_text("opera", 10, SearchFilters())
            rows = await r.chunk_rows(ids)
    assert len(found) == 12 and len({m.id for m in found}) == 12
    assert [m.text for m in u1] == ["opera first", "tea 1", "chess 1"]
    assert [rows[i].start_line for i in ids] == sorted(rows[i].start_line for i in ids)
    assert next(m for m in found if m.id == "shared").path == "memory/users/aa/core.md"
    assert copies == {"shared": ["memory/users/zz/core.md"]}  # the home is not a copy
    assert len(zebra) == 2 and len(opera) == 1


async def test_a_list_continued_after_its_last_memory_is_the_list_in_one_piece(
    open_store: OpenStore,
) -> None:
    """``MemoryQuery.after`` pages: memories of one timestamp in several files, and several of
    one file, come page after page in the list's order (oldest first, ties in file order),
    each once, whatever the page's size; with a filter too."""
    import dataclasses

    from memcore.core.models import MemoryQuery
    from memcore.vault.memory_format import MemoryItem, Scope, new_memory_file, render_item

    def page_text(user: str, items: list[tuple[str, str]]) -> str:
        made = [MemoryItem(mid, f"fact {mid}", None, when, when, {}) for mid, when in items]
        lines = [line for item in made for line in render_item(item)]
        return new_memory_file(Scope(user_id=user), "core") + "\n".join(lines) + "\n"

    same = "2024-01-01T00:00:00.000+00:00"
    later = "2024-02-01T00:00:00.000+00:00"
    async with open_store() as store:
        async with store.transaction() as tx:
            for user in ("u2", "u1", "u3"):  # all of one moment, in three files
                items = [(f"{user}-{n}", same) for n in range(3)] + [(f"{user}-late", later)]
                await put(tx, f"memory/users/{user}/core.md", page_text(user, items))
        async with store.snapshot() as r:
            whole = await r.memories(MemoryQuery(limit=100))
            for query in (MemoryQuery(limit=100), MemoryQuery(user_id="u2", limit=100)):
                expected = await r.memories(query)
                for size in (1, 2, 5):
                    pages: list[str] = []
                    q = dataclasses.replace(query, limit=size)
                    while found := await r.memories(q):
                        pages += [m.id for m in found]
                        last = found[-1]
                        after = (last.created, last.path, last.start_line, last.id)
                        q = dataclasses.replace(q, after=after)
                    assert pages == [m.id for m in expected], (query, size)
    assert [m.id for m in whole] == [
        *(f"{u}-{n}" for u in ("u1", "u2", "u3") for n in range(3)),
        "u1-late", "u2-late", "u3-late",
    ]  # fmt: skip
