"""Below storage.ann_min_vectors each process holds a model's vectors and scans them exactly
(held_vectors.py), on a real PostgreSQL: two processes (two stores) on one namespace, each
seeing the other's writes, a snapshot keeping its state while a write lands, and the switch to
pgvector's HNSW index once the model has ann_min_vectors vectors. And a scoped search of several
words through the service, its two halves at once on one snapshot."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
import psycopg
import pytest

from memcore.core.models import FileState, SearchFilters
from memcore.core.settings import load_settings
from memcore.storage.postgres import held_vectors
from memcore.storage.postgres.queries import vector_index_name
from memcore.storage.postgres.store import PostgresStore
from memcore.vault.chunker import chunk_markdown
from tests.conftest import make_service
from tests.support import FakeEmbedder

DIM = 16


@asynccontextmanager
async def two_processes(
    url: str, namespace: str, *, seed: int, n: int
) -> AsyncIterator[tuple[PostgresStore, PostgresStore, np.ndarray, np.random.Generator]]:
    """Two stores on one namespace, as two machines' processes would open it, n vectors to
    write, and the generator that made them."""
    rng = np.random.default_rng(seed)
    async with (
        PostgresStore(url, namespace, ann_min_vectors=100) as one,
        PostgresStore(url, namespace, ann_min_vectors=100) as two,
    ):
        yield one, two, rng.normal(size=(n, DIM)).astype(np.float32), rng


def unit(vecs: np.ndarray) -> np.ndarray:
    out: np.ndarray = vecs / np.linalg.norm(vecs, axis=-1, keepdims=True)
    return out


async def write(store: PostgresStore, vecs: np.ndarray, first: int, folder: str = "a") -> None:
    async with store.transaction() as tx:
        for n, vec in enumerate(vecs, start=first):
            path = f"memory/{folder}/n{n}.md"
            chunks, _ = chunk_markdown(f"# N{n}\n\nnote {n}\n", path)
            await tx.replace_file(FileState(path, f"h{n}", 1, 1), chunks, [vec], "m")


async def delete(store: PostgresStore, n: int, folder: str = "a") -> None:
    async with store.transaction() as tx:
        await tx.delete_files([f"memory/{folder}/n{n}.md"])


async def nearest(
    store: PostgresStore, q: np.ndarray, k: int = 5, filters: SearchFilters | None = None
) -> list[tuple[str, float]]:
    async with store.snapshot() as r:
        hits = await r.search_vectors(q, "m", k, filters or SearchFilters())
        rows = await r.chunk_rows([c for c, _ in hits])
    return [(rows[c].path, s) for c, s in hits]


async def has_hnsw(store: PostgresStore) -> bool:
    async with store.snapshot() as r:
        name = vector_index_name(store.namespace, "m", DIM)
        rows = await r.all("SELECT to_regclass(%s) IS NOT NULL", (name,))
    return bool(rows[0][0])


def expected(vecs: dict[int, np.ndarray], q: np.ndarray, k: int) -> list[tuple[str, float]]:
    sims = {n: float(unit(v) @ unit(q)) for n, v in vecs.items()}
    best = sorted(sims, key=lambda n: -sims[n])[:k]
    return [(f"memory/a/n{n}.md", sims[n]) for n in best]


async def test_two_processes_search_each_others_writes_in_their_held_vectors(
    postgres_url: str, namespace: str
) -> None:
    async with two_processes(postgres_url, namespace, seed=11, n=40) as (one, two, vecs, rng):
        await write(one, vecs[:30], 0)
        live = {n: vecs[n] for n in range(30)}
        for store in (one, two):
            q = rng.normal(size=DIM).astype(np.float32)
            got = await nearest(store, q)
            want = expected(live, q, 5)
            assert [p for p, _ in got] == [p for p, _ in want]
            assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-5)
        assert not await has_hnsw(one)  # 30 vectors: below ann_min_vectors, none built
        assert one.held.held("m", DIM) == two.held.held("m", DIM) == (30, 1)

        await delete(two, 5)  # written by the other process: the first catches up
        await write(two, vecs[30:40], 30)
        del live[5]
        live |= {n: vecs[n] for n in range(30, 40)}
        assert "memory/a/n5.md" not in [p for p, _ in await nearest(one, vecs[5], 10)]
        for n in (31, 39):
            assert (await nearest(one, vecs[n], 1))[0][0] == f"memory/a/n{n}.md"
        q = rng.normal(size=DIM).astype(np.float32)
        assert [p for p, _ in await nearest(one, q, 8)] == [p for p, _ in expected(live, q, 8)]
        assert one.held.held("m", DIM) == (39, 3)  # caught up, by the other's two writes

        # a generation whose log row is gone (pruned; or written by a memcore that does not
        # log): the ids are compared instead
        await delete(two, 6)
        await write(two, vecs[5:6] * 2, 50)
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as db:
            await db.execute(
                "DELETE FROM vector_changes WHERE ns = %s AND generation = 4", (namespace,)
            )
        assert one.held.compared == 0
        del live[6]
        live[50] = vecs[5] * 2
        assert (await nearest(one, vecs[5], 1))[0][0] == "memory/a/n50.md"
        assert "memory/a/n6.md" not in [p for p, _ in await nearest(one, vecs[6], 10)]
        assert one.held.held("m", DIM) == (39, 5)
        assert one.held.compared == 1
        # a filter inside the held matrix: only folder b's rows
        await write(two, vecs[:3] + 0.01, 100, folder="b")
        inside = await nearest(one, vecs[0], 5, SearchFilters(path_prefix="memory/b/"))
        assert inside[0][0] == "memory/b/n100.md"
        assert {p for p, _ in inside} == {f"memory/b/n{n}.md" for n in (100, 101, 102)}


async def test_a_snapshot_begun_before_a_write_keeps_its_state(
    postgres_url: str, namespace: str
) -> None:
    async with two_processes(postgres_url, namespace, seed=12, n=20) as (one, two, vecs, _):
        await write(one, vecs[:10], 0)
        async with two.snapshot() as old:
            before = await old.search_vectors(vecs[3], "m", 1, SearchFilters())
            await delete(one, 3)
            await write(one, vecs[10:12], 10)
            after = await nearest(two, vecs[3], 20)  # a newer snapshot: the matrix moves on
            assert "memory/a/n3.md" not in [p for p, _ in after]
            assert "memory/a/n10.md" in [p for p, _ in after]
            assert two.held.held("m", DIM) == (11, 3)
            again = await old.search_vectors(vecs[3], "m", 20, SearchFilters())
            assert again[0] == before[0]  # the old snapshot still sees chunk 3 ...
            assert len(again) == 10  # ... and not the two written after it began
            sims = await old.vector_similarity(vecs[3], "m", [before[0][0]])
            assert sims[before[0][0]] == pytest.approx(1.0, abs=1e-5)


async def test_from_ann_min_vectors_on_the_hnsw_index_is_built_and_searched(
    postgres_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(13)
    vecs = rng.normal(size=(70, DIM)).astype(np.float32)
    async with PostgresStore(postgres_url, namespace, ann_min_vectors=50) as store:
        await write(store, vecs[:40], 0)
        assert (await nearest(store, vecs[7], 1))[0][0] == "memory/a/n7.md"
        assert not await has_hnsw(store)
        assert store.held.held("m", DIM) == (40, 1)
        await write(store, vecs[40:70], 40)  # past 50: built after the write
        assert await has_hnsw(store)
        assert (await nearest(store, vecs[64], 1))[0][0] == "memory/a/n64.md"
        assert store.held.large("m", DIM) and store.held.held("m", DIM) is None
    async with PostgresStore(postgres_url, namespace, ann_min_vectors=50) as later:
        got = await nearest(later, vecs[12], 3)
        assert got[0][0] == "memory/a/n12.md"
        assert later.held.large("m", DIM)  # counted, never read into memory
        async with later.transaction() as tx:  # most of it deleted: counted again, later
            await tx.delete_files([f"memory/a/n{n}.md" for n in range(30, 70)])
        assert later.held.large("m", DIM)
        monkeypatch.setattr(held_vectors, "RECOUNT_S", 0.0)
        assert (await nearest(later, vecs[12], 1))[0][0] == "memory/a/n12.md"
        now_held = later.held.held("m", DIM)
        assert not later.held.large("m", DIM) and now_held is not None and now_held[0] == 30


async def test_a_scoped_search_of_several_words_weighs_them_in_the_scope(
    vault: Path, postgres_url: str, namespace: str
) -> None:
    """Through the service, both halves of a scoped search at once on one snapshot: a word
    rare in alice's memories outweighs one she uses often, and bob's never come back."""
    settings = load_settings(vault, {"storage.url": postgres_url, "storage.namespace": namespace})
    async with make_service(settings, FakeEmbedder()) as svc:
        for n in range(6):
            await svc.memories.add(f"alice likes green tea number {n}", user_id="alice")
        (rare,) = await svc.memories.add("alice keeps a kayak by the lake", user_id="alice")
        await svc.memories.add("bob likes a kayak and green tea", user_id="bob")
        found = await svc.memories.search("green kayak", user_id="alice", limit=3)
        assert found[0].id == rare.id  # "kayak" once in her 7, "green" in 6 of them
        assert {m.user_id for m in found} == {"alice"}
        async with svc.store.snapshot() as r:
            hits = await r.search_text("green kayak", 10, SearchFilters(user_id="alice"))
            counted = await r.keyword_coverage("green kayak", [hits[0][0]])
        assert len(hits) == 7 and counted[hits[0][0]] < 1.0  # "kayak" alone: part of the weight
