"""The HNSW graph big vaults search in: recall against exact search, snapshots, filters, saving."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from memcore.core.models import FileState, SearchFilters
from memcore.core.vectors import VectorIndex
from memcore.storage import ann
from memcore.storage.ann import AnnIndex
from memcore.storage.sqlite.queries import SqliteReader
from memcore.storage.sqlite.store import SqliteStore, Vectors
from memcore.vault.chunker import chunk_markdown

DIM = 32


def clustered(n: int, seed: int = 0) -> np.ndarray:
    """Vectors around 50 centres, like topics in a vault (uniform noise is no real corpus)."""
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(50, DIM))
    out = centres[rng.integers(0, 50, n)] + 0.4 * rng.normal(size=(n, DIM))
    return out.astype(np.float32)


def both(n: int) -> tuple[AnnIndex, VectorIndex, np.ndarray]:
    """The same vectors in a graph and in the exact matrix. The graph is built on one thread:
    one built on several differs from run to run, and about 1 build in 200 of these 500
    vectors left one unreachable from the entry point (a stored vector's own search missed it;
    seen once in CI). These tests are about snapshots, files and filters; recall is measured
    on its own (test_recall_at_10_against_exact_search)."""
    vecs = clustered(n)
    graph, exact = AnnIndex(DIM, threads=1), VectorIndex()
    graph.add(list(range(1, n + 1)), vecs)
    exact.add(list(range(1, n + 1)), vecs)
    return graph, exact, vecs


def test_recall_at_10_against_exact_search() -> None:
    graph, exact, _ = both(5000)
    queries = clustered(200, seed=1)
    found = 0
    for q in queries:
        truth = {c for c, _ in exact.search(q, 10)}
        found += len(truth & {c for c, _ in graph.search(q, 10)})
    assert found / (10 * len(queries)) >= 0.98
    top = graph.search(queries[0], 3)
    want = exact.search(queries[0], 3)
    assert [s for _, s in top] == pytest.approx([s for _, s in want], abs=1e-3)


def test_keys_replaced_over_and_over_leave_the_graph() -> None:
    """usearch before 2.26 kept removed keys findable after a few add/remove cycles (a file
    rewritten 5 times: searches returned its deleted chunks); pyproject pins the fixed one."""
    graph = AnnIndex(DIM)
    ids = list(range(1, 201))
    graph.add(ids, clustered(200, seed=12))
    for round_ in range(1, 31):
        new = [i + 200 for i in ids]
        graph.apply(round_, removed=ids, added_ids=new, added=clustered(200, seed=12 + round_))
        graph.compact()
        ids = new
        assert len(graph) == 200 and len(graph.keys()) == 200, f"round {round_}"
        found = {k for k, _ in graph.search(clustered(1, seed=99)[0], 50)}
        assert found <= set(ids), f"round {round_}: deleted keys found"


def test_a_snapshot_sees_its_own_generation() -> None:
    graph = AnnIndex(DIM)
    a, b, c = clustered(3, seed=2)
    graph.add([1, 2], np.stack([a, b]))
    graph.apply(1, removed=[1], added_ids=[3], added=c[None, :])
    assert {k for k, _ in graph.search(a, 5, generation=0)} == {1, 2}
    assert {k for k, _ in graph.search(a, 5, generation=1)} == {2, 3}
    assert set(graph.similarity(a, [1, 2, 3], generation=0)) == {1, 2}
    assert set(graph.similarity(a, [1, 2, 3])) == {2, 3}
    assert len(graph) == 2 and 1 not in graph and 3 in graph
    graph.compact()  # no reader left: 1 goes for good, generation 0 is no longer served
    assert not graph.serves(0)
    with pytest.raises(ValueError, match="not served"):
        graph.search(a, 5, generation=0)
    assert {k for k, _ in graph.search(a, 5)} == {2, 3}


def test_a_key_removed_and_added_in_one_write_stays() -> None:
    graph = AnnIndex(DIM)
    a = clustered(1, seed=3)
    graph.add([7], a)
    graph.apply(1, removed=[7], added_ids=[7], added=a)  # a vector set again, same content
    assert [k for k, _ in graph.search(a[0], 1, generation=1)] == [7]
    assert [k for k, _ in graph.search(a[0], 1, generation=0)] == [7]


@pytest.mark.parametrize("exact_below", [1, ann.EXACT_BELOW])
def test_filters_never_let_an_excluded_chunk_through(
    monkeypatch: pytest.MonkeyPatch, exact_below: int
) -> None:
    """A narrow filter is answered exactly; a wide one (exact_below=1 forces the graph) asks
    the graph for more neighbours and still returns only allowed chunks, best first."""
    monkeypatch.setattr(ann, "EXACT_BELOW", exact_below)
    graph, exact, _ = both(3000)
    allowed = set(range(1, 3001, 3))
    for q in clustered(20, seed=4):
        got = graph.search(q, 10, allowed=allowed)
        assert len(got) == 10 and {k for k, _ in got} <= allowed
        want = exact.search(q, 10, allowed=allowed)
        assert len({k for k, _ in got} & {k for k, _ in want}) >= 9
    q = clustered(1, seed=5)[0]
    one = graph.search(q, 5, allowed={5})
    assert [k for k, _ in one] == [5]
    assert one[0][1] == pytest.approx(exact.search(q, 1, allowed={5})[0][1], abs=1e-3)
    assert graph.search(q, 5, allowed=set()) == []


def test_saved_graph_loads_with_its_keys(tmp_path: Path) -> None:
    graph, _, vecs = both(500)
    path = tmp_path / "g.hnsw"
    graph.save(path)
    assert graph.changes == 0
    again = AnnIndex.load(path, DIM, generation=4)
    assert again is not None and len(again) == 500 and again.generation == 4
    assert again.search(vecs[41], 1)[0][0] == 42
    assert AnnIndex.load(path, DIM + 1, 0) is None  # another model's size
    assert AnnIndex.load(tmp_path / "missing.hnsw", DIM, 0) is None
    (tmp_path / "bad.hnsw").write_bytes(b"not a graph")
    assert AnnIndex.load(tmp_path / "bad.hnsw", DIM, 0) is None


@pytest.mark.parametrize("replaced", [False, True])
def test_a_loaded_graph_is_mapped_until_its_first_change(tmp_path: Path, replaced: bool) -> None:
    graph, _, vecs = both(500)
    path = tmp_path / "g.hnsw"
    graph.save(path)
    again = AnnIndex.load(path, DIM, generation=1)
    assert again is not None and again.mapped  # served from the file: searchable at once
    assert again.search(vecs[9], 1)[0][0] == 10
    if replaced:  # another process saved a different graph there meanwhile
        other, _, _ = both(20)
        other.save(path)
    fresh = clustered(3, seed=7)
    again.add([9001, 9002, 9003], fresh)  # read into memory first: a mapping is read-only
    again.remove([10])
    assert not again.mapped and len(again) == 502
    assert again.search(fresh[1], 1)[0][0] == 9002
    assert 10 not in again and again.search(vecs[41], 1)[0][0] == 42


def test_while_a_graph_is_read_in_searches_wait_and_compaction_steps_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """usearch blocks a search of a graph being copied, GIL held, so nothing else runs: searches
    must wait on the index's lock instead, and the event loop's compaction must not wait."""
    graph, _, vecs = both(500)
    path = tmp_path / "g.hnsw"
    graph.save(path)
    again = AnnIndex.load(path, DIM, generation=1)
    assert again is not None and again.mapped
    again.apply(2, [5])  # a key dead since generation 2, for compaction to drop
    read_in = ann._read_in
    answers: list[int] = []
    search = threading.Thread(target=lambda: answers.append(again.search(vecs[41], 1)[0][0]))

    def read_in_while_others_call(*args: object) -> object:
        search.start()
        search.join(0.3)
        assert search.is_alive() and not answers  # waiting for the lock, not on the copy
        done = threading.Thread(target=again.compact_soon)
        done.start()
        done.join(10)
        assert not done.is_alive(), "compaction waited for the graph to be read in"
        return read_in(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(ann, "_read_in", read_in_while_others_call)
    again.unmap()
    search.join(10)
    assert answers == [42] and not again.mapped
    again.unmap()  # read in already: nothing to do
    assert 5 in again._graph  # compaction was skipped while the graph was busy...
    again.compact_soon()
    assert 5 not in again._graph  # ...and done by the next call
    again.add([9001], clustered(1, seed=9))
    assert len(again) == 500 and again.search(vecs[41], 1)[0][0] == 42


M = "test:model"


async def write(store: SqliteStore, path: str, text: str, vectors: np.ndarray) -> list[int]:
    chunks, _ = chunk_markdown(text, path)
    async with store.transaction() as tx:
        state = FileState(path, f"h{hash(text)}", len(text), 1)
        return await tx.replace_file(state, chunks, list(vectors[: len(chunks)]), M)


async def write_notes(store: SqliteStore, vecs: np.ndarray, numbers: range) -> list[int]:
    """One note per number, n{n}.md holding vecs[n]: the chunk ids written, in order."""
    ids: list[int] = []
    for n in numbers:
        ids += await write(store, f"n{n}.md", f"# N{n}\n\nnote {n}\n", vecs[n : n + 1])
    return ids


async def nearest(store: SqliteStore, q: np.ndarray, k: int = 3) -> list[int]:
    async with store.snapshot() as r:
        return [c for c, _ in await r.search_vectors(q, M, k, SearchFilters())]


async def test_the_store_saves_its_graph_and_catches_up_with_writes_made_meanwhile(
    tmp_path: Path,
) -> None:
    db = tmp_path / "index.db"
    vecs = clustered(40, seed=5)
    async with SqliteStore(db, ann_min_vectors=10) as store:
        ids = await write_notes(store, vecs, range(20))
        legacy = store.graph_path(M, 1)
        legacy.write_bytes(b"saved by usearch 2.25")
        await store.prepare_vectors(M)  # built in the background: wait for it
        assert isinstance(store._vectors[M], AnnIndex)
        assert await nearest(store, vecs[3], 1) == [ids[3]]
        graph_file = store.graph_path(M)
    assert graph_file.exists()  # saved once built
    assert not legacy.exists()  # a graph an older usearch saved is never loaded, and goes
    # Meanwhile another client, on the exact path, deletes one note and adds another.
    async with SqliteStore(db) as other:
        async with other.transaction() as tx:
            await tx.delete_files(["n3.md"])
        new = await write(other, "late.md", "# Late\n\nlate note\n", vecs[30:31])
    async with SqliteStore(db, ann_min_vectors=10) as store:
        assert ids[3] not in await nearest(store, vecs[3], 20)
        assert await nearest(store, vecs[30], 1) == new
        assert set(new).isdisjoint(ids)  # ids are never handed out twice


@pytest.mark.parametrize("ann_min", [10, 1000], ids=["graph", "matrix"])
async def test_searches_arriving_together_at_a_start_load_the_vectors_once(
    tmp_path: Path, ann_min: int
) -> None:
    db = tmp_path / "index.db"
    vecs = clustered(30, seed=8)
    async with SqliteStore(db) as store:
        ids = await write_notes(store, vecs, range(30))
    async with SqliteStore(db, ann_min_vectors=ann_min) as store:
        loads = []
        load = store._load

        async def counted(reader: SqliteReader, model_id: str) -> Vectors:
            loads.append(model_id)
            return await load(reader, model_id)

        store._load = counted  # type: ignore[method-assign]
        found = await asyncio.gather(*(nearest(store, vecs[n], 1) for n in range(12)))
        assert found == [[ids[n]] for n in range(12)]
        assert loads == [M]  # twelve searches over three connections, one load between them


async def test_without_a_saved_graph_the_matrix_answers_until_the_graph_built_beside_it_takes_over(
    tmp_path: Path,
) -> None:
    db = tmp_path / "index.db"
    vecs = clustered(40, seed=9)
    async with SqliteStore(db) as store:
        ids = await write_notes(store, vecs, range(30))
    async with SqliteStore(db, ann_min_vectors=10) as store:
        assert await nearest(store, vecs[4], 1) == [ids[4]]  # answered at once, exactly
        assert isinstance(store._vectors[M], VectorIndex)
        async with store.snapshot() as before:
            await before.begun()  # its state is fixed now, before the writes below
            # writes while the graph is built: wherever they land, the graph must hold them
            async with store.transaction() as tx:
                await tx.delete_files(["n4.md"])
            new = await write(store, "late.md", "# Late\n\nlate note\n", vecs[35:36])
            await store.prepare_vectors(M)
            assert isinstance(store._vectors[M], AnnIndex)
            assert await nearest(store, vecs[35], 1) == new
            assert ids[4] not in await nearest(store, vecs[4], 30)
            old = await before.search_vectors(vecs[4], M, 1, SearchFilters())
            assert [c for c, _ in old] == [ids[4]]  # older than the graph: still its own state
        assert not store._retired  # the matrix went with the last snapshot that needed it
        assert store.graph_path(M).exists()
    async with SqliteStore(db, ann_min_vectors=10) as store:  # the next start loads it
        assert await nearest(store, vecs[35], 1) == new
        assert isinstance(store._vectors[M], AnnIndex) and not store._building


async def test_a_matrix_that_grows_past_the_graph_size_is_replaced_by_a_graph(
    tmp_path: Path,
) -> None:
    vecs = clustered(40, seed=10)
    async with SqliteStore(tmp_path / "index.db", ann_min_vectors=10) as store:
        ids = await write_notes(store, vecs, range(5))
        assert await nearest(store, vecs[2], 1) == [ids[2]]
        await store.prepare_vectors(M)  # too small for a graph: nothing to build
        assert isinstance(store._vectors[M], VectorIndex) and not store.graph_path(M).exists()
        ids += await write_notes(store, vecs, range(5, 15))
        assert M in store._building  # started by the write that took it past ann_min_vectors
        await store.prepare_vectors(M)
        assert isinstance(store._vectors[M], AnnIndex) and store.graph_path(M).exists()
        assert [await nearest(store, vecs[n], 1) for n in range(15)] == [[i] for i in ids]


async def test_a_graph_owed_to_another_process_is_counted_not_built(tmp_path: Path) -> None:
    """``here=False`` (a batch that ends by becoming the graph's builder): nothing is built
    or read into memory, and what is owed is counted; a process that builds owes nothing."""
    db = tmp_path / "index.db"
    vecs = clustered(30, seed=12)
    async with SqliteStore(db, ann_min_vectors=40) as store:
        ids = await write_notes(store, vecs, range(30))
        assert await store.prepare_vectors(M, here=False) == 0  # below the graph's size
    async with SqliteStore(db, ann_min_vectors=10) as store:
        assert await store.prepare_vectors(M, here=False) == 30
        assert not store._building and not store.graph_path(M).exists()
        assert M not in store._vectors  # no matrix loaded either
    async with SqliteStore(db, ann_min_vectors=10) as store:  # the fresh process
        assert await store.prepare_vectors(M) == 0
        assert store.graph_path(M).exists()
    async with SqliteStore(db, ann_min_vectors=10) as store:
        assert await store.prepare_vectors(M, here=False) == 0  # saved and current
        assert await nearest(store, vecs[4], 1) == [ids[4]]


async def test_closing_during_a_graph_build_stops_it_and_loses_nothing(tmp_path: Path) -> None:
    db = tmp_path / "index.db"
    vecs = clustered(30, seed=11)
    async with SqliteStore(db) as store:
        ids = await write_notes(store, vecs, range(30))
    async with SqliteStore(db, ann_min_vectors=10) as store:
        assert await nearest(store, vecs[7], 1) == [ids[7]]
        assert not store._building[M].done()  # still building as the store closes
    assert not store.graph_path(M).exists()
    async with SqliteStore(db, ann_min_vectors=10) as store:
        assert await nearest(store, vecs[8], 1) == [ids[8]]
        await store.prepare_vectors(M)
        assert await nearest(store, vecs[9], 1) == [ids[9]]


async def test_chunk_ids_are_never_reused_after_the_newest_are_deleted(tmp_path: Path) -> None:
    vecs = clustered(4, seed=6)
    async with SqliteStore(tmp_path / "index.db") as store:
        first = await write(store, "a.md", "# A\n\none\n", vecs)
        async with store.transaction() as tx:
            await tx.delete_files(["a.md"])
        second = await write(store, "b.md", "# B\n\ntwo\n", vecs)
        assert min(second) > max(first)


async def test_a_graph_catches_up_in_place_with_another_clients_writes(tmp_path: Path) -> None:
    db = tmp_path / "index.db"
    vecs = clustered(40, seed=7)
    async with SqliteStore(db, ann_min_vectors=10) as store, SqliteStore(db) as other:
        ids = await write_notes(store, vecs, range(20))
        await store.prepare_vectors(M)
        assert await nearest(store, vecs[5], 1) == [ids[5]]
        graph = store._vectors[M]
        assert isinstance(graph, AnnIndex)
        async with other.transaction() as tx:  # a write that only deletes
            await tx.delete_files(["n6.md"])
        assert ids[6] not in await nearest(store, vecs[6], 20)
        async with store.snapshot() as before:
            await before.begun()  # its state is fixed now, before the writes below
            async with other.transaction() as tx:
                await tx.delete_files(["n5.md"])
            new = await write(other, "late.md", "# Late\n\nlate note\n", vecs[30:31])
            assert await nearest(store, vecs[30], 1) == new  # a new snapshot sees both writes
            assert ids[5] not in await nearest(store, vecs[5], 20)
            assert store._vectors[M] is graph  # advanced in place, never reloaded
            old = await before.search_vectors(vecs[5], M, 1, SearchFilters())
            assert [c for c, _ in old] == [ids[5]]  # the open snapshot still sees its state


@pytest.mark.parametrize("writer", ["this store", "another process"])
async def test_a_saved_graph_is_read_in_off_the_event_loop_before_a_write_changes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, writer: str
) -> None:
    """A graph loaded from its file is memory-mapped, and read into memory before its first
    change (~1 s at 1M chunks). The read runs in a worker thread, never on the event loop
    applying a write (or catching up with another process's)."""
    db = tmp_path / "index.db"
    vecs = clustered(40, seed=11)
    async with SqliteStore(db, ann_min_vectors=10) as store:
        ids = await write_notes(store, vecs, range(20))
        await store.prepare_vectors(M)
    read_in = ann._read_in
    threads: list[int] = []

    def recording(*args: object) -> object:
        threads.append(threading.get_ident())
        return read_in(*args)  # type: ignore[arg-type]

    monkeypatch.setattr(ann, "_read_in", recording)
    async with SqliteStore(db, ann_min_vectors=10) as store, SqliteStore(db) as other:
        assert await nearest(store, vecs[2], 1) == [ids[2]]
        graph = store._vectors[M]
        assert isinstance(graph, AnnIndex) and graph.mapped
        target = store if writer == "this store" else other
        async with target.transaction() as tx:
            await tx.delete_files(["n2.md"])
        new = await write(target, "new.md", "# New\n\nnew note\n", vecs[35:36])
        assert await nearest(store, vecs[35], 1) == new
        assert ids[2] not in await nearest(store, vecs[2], 20)
        assert store._vectors[M] is graph and not graph.mapped
    assert len(threads) == 1 and threading.get_ident() not in threads


def test_the_graph_library_loaded_first_leaves_the_local_model_working() -> None:
    """usearch 2.26 loaded before onnxruntime made onnxruntime's import crash the process (a
    daemon opening a big vault's graph before its first embedding); pyproject pins it out."""
    script = (
        "import memcore.storage.ann\n"
        "from memcore.embedders.local import OnnxMiniLMEmbedder\n"
        "print(OnnxMiniLMEmbedder().embed_sync(['hello']).shape)\n"
    )
    cmd = [sys.executable, "-c", script]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.strip() == "(1, 384)"


def test_a_few_allowed_rows_score_the_same_as_the_whole_matrix_masked() -> None:
    """A filter allowing few rows (a user's among a fleet's) scores only those rows; it ranks
    them exactly as the masked scan of every row does, deleted rows and unknown ids aside."""
    _, exact, _ = both(800)
    exact.remove([3, 4])
    allowed = {1, 2, 3, 4, 50, 51, 52, 400, 799, 5000}  # 3 and 4 removed, 5000 never stored
    for q in clustered(20, seed=3):
        few = exact.search(q, 5, allowed)
        masked = [(c, s) for c, s in exact.search(q, 800) if c in allowed][:5]
        assert [c for c, _ in few] == [c for c, _ in masked]
        assert [s for _, s in few] == pytest.approx([s for _, s in masked], abs=1e-6)
    assert exact.search(clustered(1)[0], 5, set()) == []


def scores(found: list[tuple[int, float]]) -> dict[int, float]:
    return dict(found)


def test_the_int8_graph_proposes_and_the_float16_copies_score() -> None:
    """The graph keeps int8 vectors, whose cosines are a few thousandths off: every score a
    search or a similarity gives comes from the float16 copies, as the exact matrix has it."""
    graph, exact, _ = both(2000)
    raw = graph._graph.search(clustered(1, seed=3)[0], 10)
    for q in clustered(20, seed=3):
        got = scores(graph.search(q, 10))
        want = scores(exact.search(q, 10))
        assert set(got) & set(want)
        for key in set(got) & set(want):
            assert got[key] == pytest.approx(want[key], abs=2e-3)
        keys = list(want)
        assert scores(graph.similarity(q, keys)) == pytest.approx(
            scores(exact.search(q, 10, allowed=set(keys))), abs=2e-3
        )
    # the graph's own scores are the int8 ones: what re-scoring is for
    q = clustered(1, seed=3)[0]
    int8 = {int(k): 1.0 - float(d) for k, d in zip(raw.keys, raw.distances, strict=True)}
    assert max(abs(int8[k] - s) for k, s in scores(exact.search(q, 10)).items() if k in int8) > 0


def test_copies_are_saved_beside_the_graph_and_mapped_back(tmp_path: Path) -> None:
    graph, exact, vecs = both(500)
    path = tmp_path / "g.hnsw"
    graph.save(path)
    copies = ann.exact_path(path)
    assert copies.exists() and graph.exact.unsaved == 0 and len(graph.exact) == 500
    again = AnnIndex.load(path, DIM, generation=1)
    assert again is not None and again.exact.path == copies and len(again.exact) == 500
    q = vecs[41]
    assert scores(again.search(q, 5)) == pytest.approx(scores(exact.search(q, 5)), abs=2e-3)
    # vectors added after the save are held in memory, then written with the rest
    again.add([9001], clustered(1, seed=11))
    again.remove([42])
    assert again.exact.unsaved == 1
    again.save(path)
    third = AnnIndex.load(path, DIM, generation=2)
    assert third is not None and len(third.exact) == 500  # 9001 in, 42 out
    assert third.exact.missing(np.array([9001, 42, 41], dtype=np.uint64)).tolist() == [42]


def test_a_file_of_copies_cut_short_or_of_another_size_is_not_used(tmp_path: Path) -> None:
    from memcore.storage.exact_vectors import ExactVectors

    graph, _, _ = both(100)
    path = tmp_path / "g.hnsw"
    graph.save(path)
    copies = ann.exact_path(path)
    assert ExactVectors.open(copies, DIM + 1) is None
    copies.write_bytes(copies.read_bytes()[:-10])  # a full disk
    assert ExactVectors.open(copies, DIM) is None
    again = AnnIndex.load(path, DIM, generation=1)
    assert again is not None and len(again.exact) == 0  # the store reads them from the index


@pytest.mark.parametrize("lost", ["all", "all, rewritten", "some"])
async def test_a_graph_whose_copies_are_lost_gets_them_back_from_the_index(
    tmp_path: Path, lost: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Either file can be lost or older than the other (a process stopped between the two
    saves): the copies the graph lacks are read from the index (a new file of them when they
    are many), and its scores stay exact."""
    from memcore.storage.sqlite import store as store_module

    if lost == "all, rewritten":
        monkeypatch.setattr(store_module, "REWRITE_COPIES", 0)
    db = tmp_path / "index.db"
    vecs = clustered(40, seed=12)
    async with SqliteStore(db, ann_min_vectors=10) as store:
        ids = await write_notes(store, vecs, range(30))
        await store.prepare_vectors(M)
        copies = ann.exact_path(store.graph_path(M))
        assert copies.exists()
        before = copies.read_bytes()
        async with store.snapshot() as r:
            want = await r.search_vectors(vecs[7], M, 5, SearchFilters())
    late: list[int] = []
    if lost.startswith("all"):
        copies.unlink()
    else:  # copies saved before the last notes were written and the graph saved again
        async with SqliteStore(db, ann_min_vectors=10) as store:
            late = await write_notes(store, vecs, range(30, 40))
            async with store.snapshot() as r:
                await r.search_vectors(vecs[7], M, 5, SearchFilters())
        copies.write_bytes(before)
    async with SqliteStore(db, ann_min_vectors=10) as store, store.snapshot() as r:
        got = await r.search_vectors(vecs[7], M, 5, SearchFilters())
        graph = store._vectors[M]
        assert isinstance(graph, AnnIndex) and not store._building  # not rebuilt
        assert len(graph.exact.missing(graph.alive_keys())) == 0
        unsaved = {"all": len(ids), "all, rewritten": 0, "some": len(late)}
        assert graph.exact.unsaved == unsaved[lost]
        assert copies.exists() == (lost != "all")
        assert got[0][0] == ids[7]
        same = set(scores(got)) & set(scores(want))
        assert len(same) >= 3
        assert {k: scores(got)[k] for k in same} == pytest.approx(
            {k: scores(want)[k] for k in same}, abs=1e-6
        )
        if late:
            near = await r.vector_similarity(vecs[35], M, [late[5], ids[7]])
            assert near[late[5]] == pytest.approx(1.0, abs=2e-3)
            assert near[ids[7]] < 0.999
