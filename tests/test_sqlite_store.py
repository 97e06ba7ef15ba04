"""What only the SQLite adapter does: its file, schema ledger, WAL, locking and errors."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

from memcore.core.errors import StorageBusy, StorageError
from memcore.core.models import FileState, SearchFilters
from memcore.core.settings import load_settings
from memcore.embedders.base import EmbeddingRunner
from memcore.service import MemoryService
from memcore.storage.migrations import load_migrations
from memcore.storage.sqlite import file_rows, keywords, queries, snapshot
from memcore.storage.sqlite.store import SqliteStore
from memcore.storage.sqlite.vector_reads import embedded_hashes_sql
from memcore.vault.chunker import chunk_markdown
from tests.support import FakeEmbedder


async def test_migrations_run_once_are_recorded_and_use_wal(tmp_path: Path) -> None:
    db = tmp_path / "i.db"
    async with SqliteStore(db):
        pass
    async with SqliteStore(db):
        pass
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT version, name FROM schema_migrations").fetchall()
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert rows == [(m.version, m.name) for m in load_migrations("sqlite")]
    assert mode == "wal"


async def test_an_index_from_before_the_generation_counter_is_upgraded(tmp_path: Path) -> None:
    db = tmp_path / "i.db"
    first = load_migrations("sqlite")[0]
    with sqlite3.connect(db) as conn:
        conn.executescript(first.sql)
        conn.execute(
            "CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, name TEXT NOT NULL,"
            " applied_at TEXT NOT NULL)"
        )
        conn.execute("INSERT INTO schema_migrations VALUES (1, 'initial', 'then')")
    chunks, _ = chunk_markdown("# A\n\nupgraded\n", "MEMORY.md")
    async with SqliteStore(db) as store:
        async with store.transaction() as tx:
            await tx.replace_file(FileState("MEMORY.md", "h", 1, 1), chunks, [None], "m")
        async with store.snapshot() as r:
            assert len(await r.search_text("upgraded", 5, SearchFilters())) == 1


async def test_a_snapshot_is_fixed_for_others_while_its_first_query_still_runs(
    tmp_path: Path,
) -> None:
    """A search's keyword query starts its snapshot (BEGIN and the query, one hand-off), and
    its vector half waits only for the snapshot's generation: it is told as soon as BEGIN ran,
    not after the query (at 1M chunks the halves ran one after the other: 28 ms, not 19). A
    write committed meanwhile is not seen; a query failing after BEGIN fails only itself."""
    chunks, _ = chunk_markdown("# A\n\nbefore\n", "MEMORY.md")
    async with SqliteStore(tmp_path / "i.db") as store:
        async with store.transaction() as tx:
            await tx.replace_file(FileState("MEMORY.md", "h", 1, 1), chunks, [None], "m")
        release = threading.Event()

        def slow(db: sqlite3.Connection) -> int:
            assert release.wait(10)
            return len(db.execute("SELECT id FROM memory_chunks").fetchall())

        def failing(db: sqlite3.Connection) -> None:
            raise ValueError("this query only")

        async with store.snapshot() as r:
            first = asyncio.ensure_future(r._on_thread(slow))
            generation = await asyncio.wait_for(r.begun(), 5)  # the query is still blocked
            assert not first.done()
            release.set()
            assert await first == 1
            later, _ = chunk_markdown("# B\n\nafter\n", "notes.md")
            async with store.transaction() as tx:
                await tx.replace_file(FileState("notes.md", "h2", 1, 1), later, [None], "m")
            assert await r.begun() == generation
            assert await r.search_text("after", 5, SearchFilters()) == []
        async with store.snapshot() as r:
            with pytest.raises(ValueError, match="this query only"):
                await r._on_thread(failing)
            assert await r.begun() > generation  # the snapshot began: only the query failed
            assert len(await r.search_text("after", 5, SearchFilters())) == 1


async def test_a_writer_held_by_another_process_is_a_busy_error(tmp_path: Path) -> None:
    db = tmp_path / "i.db"
    async with SqliteStore(db, busy_timeout_s=0.1) as store:
        other = sqlite3.connect(db, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(StorageBusy, match="index is busy"):
                async with store.transaction() as tx:
                    await tx.set_meta("k", "v")
            async with store.snapshot() as r:  # readers are never blocked by a writer
                assert await r.get_meta("k") is None
        finally:
            other.execute("ROLLBACK")
            other.close()
        async with store.transaction() as tx:  # and the store works once the lock is gone
            await tx.set_meta("k", "v")


async def test_driver_errors_become_one_line_storage_errors(tmp_path: Path) -> None:
    db = tmp_path / "i.db"
    async with SqliteStore(db) as store:
        with sqlite3.connect(db) as conn:
            conn.execute("DROP TABLE meta")
        with pytest.raises(StorageError, match="index read failed: no such table: meta"):
            async with store.snapshot() as r:
                await r.get_meta("k")


async def test_unopenable_database_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StorageError, match="cannot open index"):
        async with SqliteStore(bad):
            pass


async def test_a_missing_folder_is_not_created(tmp_path: Path) -> None:
    with pytest.raises(StorageError, match="folder does not exist"):
        async with SqliteStore(tmp_path / "nope" / "i.db"):
            pass
    assert not (tmp_path / "nope").exists()


async def test_vectors_are_little_endian_float32_blobs(tmp_path: Path) -> None:
    db = tmp_path / "i.db"
    chunks, _ = chunk_markdown("# A\n\none\n", "MEMORY.md")
    v = np.array([1.0, -2.5], dtype=np.float32)
    async with SqliteStore(db) as store, store.transaction() as tx:
        await tx.replace_file(FileState("MEMORY.md", "h", 1, 1), chunks, [v], "m")
    with sqlite3.connect(db) as conn:
        blob, model = conn.execute(
            "SELECT embedding, embedding_model FROM memory_chunks"
        ).fetchone()
    assert blob == v.astype("<f4").tobytes() and model == "m"


async def test_when_every_word_is_common_chunks_holding_them_all_are_ranked_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keywords, "ANCHOR_CAP", 20)  # both words are "common" here
    async with SqliteStore(tmp_path / "index.db") as store:
        files = [(f"memory/a{i}.md", f"# A{i}\n\nart only {i}\n") for i in range(40)]
        files += [(f"memory/k{i}.md", f"# K{i}\n\nkind only {i}\n") for i in range(40)]
        files += [(f"memory/b{i}.md", f"# B{i}\n\nkind of art {i}\n") for i in range(3)]
        async with store.transaction() as tx:
            for path, text in files:
                chunks, _ = chunk_markdown(text, path)
                await tx.replace_file(FileState(path, path, len(text), 1), chunks, [None], "m")
        async with store.snapshot() as r:
            both = await r.search_text("kind art", 3, SearchFilters())
            more = await r.search_text("kind art", 10, SearchFilters())  # fills up from all
            rows = await r.chunk_rows([c for c, _ in more])
    assert {rows[c].path[:8] for c, _ in both} == {"memory/b"}
    assert len(more) == 10 and [rows[c].path[:8] for c, _ in more[:3]] == ["memory/b"] * 3


async def _index(store: SqliteStore, files: list[tuple[str, str]]) -> None:
    async with store.transaction() as tx:
        for path, text in files:
            chunks, _ = chunk_markdown(text, path)
            await tx.replace_file(FileState(path, path, len(text), 1), chunks, [None], "m")


async def test_word_counts_are_exact_under_the_cap_and_estimated_past_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memcore.storage.sqlite.file_rows import on_thread

    monkeypatch.setattr(keywords, "ANCHOR_CAP", 20)
    async with SqliteStore(tmp_path / "index.db") as store:
        # "alpha" in every chunk, "beta" only in a stretch of 100 notes, "gamma" in 8
        files = [
            (
                f"memory/{i:03d}.md",
                f"# N{i}\n\nalpha {'beta' if 100 <= i < 200 else 'x'}"
                f" {'gamma' if i % 50 == 7 else 'y'}\n",
            )
            for i in range(400)
        ]
        await _index(store, files)
        words = ["alpha", "beta", "gamma", "delta"]
        async with store.snapshot() as r:
            await r.search_text(" ".join(words), 3, SearchFilters())  # counts, remembers
            counts, span, _ = await on_thread(r.conn, keywords.doc_counts, words, 20, {})
        assert span == 400
        # estimates are remembered for the next query; exact counts are not (a new chunk counts)
        assert store.common_counts.get("alpha", span=400) == counts["alpha"]
        assert store.common_counts.get("gamma", span=400) is None
        await _index(store, [("memory/new.md", "# New\n\nalpha delta\n")])
        async with store.snapshot() as r:
            hits = await r.search_text("alpha delta", 3, SearchFilters())
            rows = await r.chunk_rows([c for c, _ in hits])
    assert rows[hits[0][0]].path == "memory/new.md"  # found the moment it is written
    assert counts["gamma"] == 8 and counts["delta"] == 0  # under the cap: exact
    assert 360 <= counts["alpha"] <= 440  # 400, from 21 + 10 chunks at the two ends
    assert 31 <= counts["beta"] <= 150  # 100 in one stretch: not taken for a word everywhere


async def test_with_three_common_words_chunks_holding_two_of_them_come_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(keywords, "ANCHOR_CAP", 20)
    async with SqliteStore(tmp_path / "index.db") as store:
        files = [
            (f"memory/{w}{i}.md", f"# {w}\n\n{w} only {i}\n")
            for w in ("art", "kind", "make")
            for i in range(40)
        ]
        files += [(f"memory/two{i}.md", f"# T{i}\n\nkind of art {i}\n") for i in range(2)]
        files += [(f"memory/two{i}.md", f"# T{i}\n\nmake art {i}\n") for i in range(2, 4)]
        await _index(store, files)
        async with store.snapshot() as r:
            hits = await r.search_text("kind art make", 4, SearchFilters())
            rows = await r.chunk_rows([c for c, _ in hits])
    assert sorted(rows[c].path for c, _ in hits) == [f"memory/two{i}.md" for i in range(4)]


async def test_a_word_too_common_to_weigh_leaves_the_rare_words_ranking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with SqliteStore(tmp_path / "index.db") as store:
        files = [(f"memory/n{i}.md", f"# N{i}\n\ncommon filler {i}\n") for i in range(120)]
        files += [(f"memory/z{i}.md", f"# Z{i}\n\nthe zebra {i} is common\n") for i in range(3)]
        await _index(store, files)
        async with store.snapshot() as r:
            weighed = await r.search_text("common zebra", 5, SearchFilters())
            monkeypatch.setattr(keywords, "RANK_POSTINGS", 50)  # 3 + 123 chunks: over
            budgeted = await r.search_text("common zebra", 5, SearchFilters())
            rows = await r.chunk_rows([c for c, _ in weighed])
    assert len(weighed) == 5 and [rows[c].path[:8] for c, _ in weighed[:3]] == ["memory/z"] * 3
    # only "zebra" is weighed: its three chunks, and no chunk that holds nothing but "common"
    assert [c for c, _ in budgeted] == [c for c, _ in weighed[:3]]


async def test_search_connections_keep_a_page_cache_of_the_configured_size(
    tmp_path: Path,
) -> None:
    store = SqliteStore(tmp_path / "index.db", reader_cache_mb=48)
    async with store, store.snapshot() as r:
        (size,) = (await r._all("PRAGMA cache_size"))[0]
    assert size == -48 * 1024  # KiB; SQLite's default of 2 MB thrashes on a big index


async def test_a_write_reads_its_files_chunks_by_path_not_every_chunk_of_the_model(
    tmp_path: Path,
) -> None:
    """Without statistics SQLite picked the embedding_model index for this query: every chunk
    of the model read on every write, 1.5 s at 1.19M chunks. The plan must go by source_file."""
    db = tmp_path / "index.db"
    async with SqliteStore(db):
        pass
    conn = sqlite3.connect(db)
    try:
        plan = conn.execute(
            f"EXPLAIN QUERY PLAN {embedded_hashes_sql(2)}", ("m", "a.md", "b.md")
        ).fetchall()
    finally:
        conn.close()
    (step,) = [row[3] for row in plan]
    assert "(source_file=?" in step and "memory_chunks_model" not in step, step


def _connection_threads() -> int:
    """aiosqlite connections alive in this process (each runs on its own thread)."""
    return sum(1 for t in threading.enumerate() if "_connection_worker_thread" in t.name)


async def test_concurrent_reads_open_no_more_readers_than_the_pool_holds(
    tmp_path: Path,
) -> None:
    """Twelve searches arriving together each saw room for one more reader while the first
    connects were awaited, and opened twelve: more threads taking turns at the GIL."""
    store = SqliteStore(tmp_path / "index.db", readers=2)
    none = _connection_threads()
    async with store:
        before = _connection_threads()  # the writer
        seen = []

        async def read(n: int) -> int:
            async with store.snapshot() as r:
                seen.append(_connection_threads() - before)
                await asyncio.sleep(0.01)
                return int((await r._all("SELECT ?", [n]))[0][0])

        assert await asyncio.gather(*(read(n) for n in range(12))) == list(range(12))
        assert max(seen) == 2 and _connection_threads() - before == 2
    for _ in range(200):  # all three closed together: each thread ends once it has replied
        if _connection_threads() == none:
            break
        await asyncio.sleep(0.01)
    assert _connection_threads() == none


async def test_a_reader_that_fails_to_open_lets_a_waiting_read_open_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The one reader slot's connect fails while another read waits for a reader: that read
    opens one itself instead of waiting for ever."""
    store = SqliteStore(tmp_path / "index.db", readers=1)
    async with store:
        connect = store._connect
        failures = [sqlite3.OperationalError("unable to open database file")]

        async def flaky(cache_mb: int | None = None) -> object:
            await asyncio.sleep(0.05)  # the second read arrives meanwhile and waits
            if failures:
                raise failures.pop()
            return await connect(cache_mb)

        monkeypatch.setattr(store, "_connect", flaky)

        async def read() -> int:
            async with store.snapshot() as r:
                return int((await r._all("SELECT 7"))[0][0])

        first, second = await asyncio.wait_for(
            asyncio.gather(read(), read(), return_exceptions=True), 5
        )
    assert isinstance(first, StorageError) and second == 7
    assert "unable to open database file" in str(first)


async def _note(store: SqliteStore, path: str, text: str, vector: np.ndarray) -> list[int]:
    chunks, _ = chunk_markdown(text, path)
    async with store.transaction() as tx:
        state = FileState(path, f"h{hash(text)}", len(text), 1)
        return await tx.replace_file(state, chunks, [vector] * len(chunks), "m")


async def test_a_snapshot_starts_with_its_first_query_and_queries_sent_meanwhile_share_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No hand-off of its own for BEGIN: the first query carries it, the ones sent while it
    is on its way queue behind it in the same transaction, and later writes stay unseen."""
    vec = np.ones(4, dtype=np.float32)
    begins = []
    begin = snapshot.begin_snapshot

    def counted(db: sqlite3.Connection) -> int:
        begins.append(1)
        return begin(db)

    monkeypatch.setattr(snapshot, "begin_snapshot", counted)
    async with SqliteStore(tmp_path / "index.db") as store:
        await _note(store, "a.md", "# A\n\nfirst note\n", vec)
        async with store.snapshot() as r:
            await _note(store, "b.md", "# B\n\nsecond note\n", vec)  # before its first query
            states, hits, generation = await asyncio.gather(
                r.file_states(), r.search_text("note", 5, SearchFilters()), r.begun()
            )
            assert sorted(states) == ["a.md", "b.md"] and len(hits) == 2
            assert begins == [1]
            await _note(store, "c.md", "# C\n\nthird note\n", vec)
            assert sorted(await r.file_states()) == ["a.md", "b.md"]
            assert len(await r.search_text("note", 5, SearchFilters())) == 2
            assert r.generation == generation == await r.begun()
            assert begins == [1]


async def test_a_write_committed_while_a_snapshot_starts_drops_no_rows_it_needs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A snapshot's BEGIN runs on its connection's thread while a write commits and the
    matrix compacts on the event loop. The snapshot, opened before, holds the matrix's
    generation, so the rows of its older state stay: it is answered from the matrix as of
    its own state, not by reloading every vector."""
    vecs = np.eye(4, dtype=np.float32)
    began, go_on = threading.Event(), threading.Event()
    begin = snapshot.begin_snapshot
    async with SqliteStore(tmp_path / "index.db") as store:
        (gone,) = await _note(store, "a.md", "# A\n\nsoon deleted\n", vecs[0])
        await _note(store, "b.md", "# B\n\nstays\n", vecs[1])
        async with store.snapshot() as r:  # the matrix, loaded
            assert [c for c, _ in await r.search_vectors(vecs[0], "m", 1, SearchFilters())] == [
                gone
            ]
        loads = []
        load = store._load

        async def counted(reader: object, model_id: str) -> object:
            loads.append(model_id)
            return await load(reader, model_id)  # type: ignore[arg-type]

        def held(db: sqlite3.Connection) -> int:
            generation = begin(db)
            began.set()
            go_on.wait(5)
            return generation

        monkeypatch.setattr(store, "_load", counted)
        monkeypatch.setattr(snapshot, "begin_snapshot", held)
        async with store.snapshot() as r:
            search = asyncio.ensure_future(r.search_vectors(vecs[0], "m", 1, SearchFilters()))
            assert await asyncio.to_thread(began.wait, 5)  # BEGIN ran: the old state is fixed
            monkeypatch.setattr(snapshot, "begin_snapshot", begin)
            async with store.transaction() as tx:
                await tx.delete_files(["a.md"])
            go_on.set()
            assert [c for c, _ in await search] == [gone]  # as of its own state
        assert loads == []
        async with store.snapshot() as r:
            found = await r.search_vectors(vecs[0], "m", 2, SearchFilters())
            assert gone not in [c for c, _ in found]


async def test_a_search_holds_its_reader_for_one_hand_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under load every hand-off to a reader's thread waits its turn on the event loop (and
    the GIL) while the search holds that reader: BEGIN rides with the keyword query, and the
    hits' few rows and their memories are read on the event loop, the connection idle."""
    vault = tmp_path / "vault"
    (vault / "memory").mkdir(parents=True)
    (vault / "MEMORY.md").write_text("# Engines\n\nThe render engine uses DX12.\n")
    settings = load_settings(vault)
    settings.state_dir.mkdir(exist_ok=True)
    store = SqliteStore(settings.db_path)
    async with MemoryService(settings, store, EmbeddingRunner(FakeEmbedder())) as service:
        await service.index()
        for n in range(queries.INLINE_HIT_ROWS):
            await service.memories.add(f"Water shader {n} runs in DX12 too", user_id="u")
        hand_offs = []
        on_thread = file_rows.on_thread

        async def counted(conn: object, fn: object, *args: object) -> object:
            hand_offs.append(getattr(fn, "__name__", fn))
            return await on_thread(conn, fn, *args)  # type: ignore[arg-type]

        monkeypatch.setattr(file_rows, "on_thread", counted)
        result = await service.search("DX12 engine")
        assert {h.path for h in result.hits} == {"MEMORY.md", "memory/users/u/core.md"}
        assert any(h.id for h in result.hits)  # a memory's hit, with its record
        assert hand_offs == ["_begun_with"]
        result = await service.search("DX12 engine", limit=queries.INLINE_HIT_ROWS + 1)
        assert hand_offs == ["_begun_with", "_begun_with", "_hit_rows"]  # many: on its thread
        assert len(result.hits) == queries.INLINE_HIT_ROWS + 1 and all(
            h.id for h in result.hits if h.path != "MEMORY.md"
        )


def _sqlite_memory_used(first: str) -> int:
    """What SQLite says it has allocated, in a fresh process that starts with ``first``."""
    code = (
        f"{first}\nimport ctypes, importlib.util, sqlite3\n"
        "sqlite3.connect(':memory:').execute('CREATE TABLE t (x)')\n"
        "lib = ctypes.CDLL(importlib.util.find_spec('_sqlite3').origin)\n"
        "lib.sqlite3_memory_used.restype = ctypes.c_int64\n"
        "print(lib.sqlite3_memory_used())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return int(out.stdout)


@pytest.mark.skipif(sys.platform == "darwin", reason="memcore leaves the setting alone there")
def test_sqlite_keeps_no_memory_statistics_in_a_process_memcore_starts() -> None:
    """The statistics take one process-wide mutex at every allocation, which the readers'
    keyword searches took turns at (storage/sqlite/library.py)."""
    assert _sqlite_memory_used("import memcore") == 0
    # a process that started SQLite before memcore is left as it was (and the test can tell)
    assert _sqlite_memory_used("import sqlite3, memcore") > 0


async def test_a_first_search_loads_the_vectors_while_its_query_is_embedded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process's first search (a one-shot command's only one) reads the vectors into memory
    while the model embeds its query, not after; a later one finds them loaded."""
    vault = tmp_path / "vault"
    (vault / "memory").mkdir(parents=True)
    (vault / "MEMORY.md").write_text("# Engines\n\nThe render engine uses DX12.\n")
    settings = load_settings(vault)
    settings.state_dir.mkdir(exist_ok=True)
    async with MemoryService(
        settings, SqliteStore(settings.db_path), EmbeddingRunner(FakeEmbedder())
    ) as service:
        await service.index()
    events: list[str] = []
    release = asyncio.Event()

    class Slow(FakeEmbedder):
        async def embed(self, texts):  # type: ignore[no-untyped-def]
            if texts == ["DX12 engine"]:
                await release.wait()
                events.append("embedded")
            return await super().embed(texts)

    load_vectors = queries.SqliteReader.load_vectors

    async def loading(self: queries.SqliteReader, *args: object) -> object:
        loaded = await load_vectors(self, *args)  # type: ignore[arg-type]
        events.append("loaded")
        release.set()  # the query's vector comes only once they are in memory
        return loaded

    monkeypatch.setattr(queries.SqliteReader, "load_vectors", loading)
    async with MemoryService(
        settings, SqliteStore(settings.db_path), EmbeddingRunner(Slow())
    ) as service:
        first = await asyncio.wait_for(service.search("DX12 engine"), 10)
        assert events == ["loaded", "embedded"]
        assert first.mode == "hybrid" and [h.path for h in first.hits] == ["MEMORY.md"]
        service.searcher.cache = None
        again = await service.search("DX12 engine")
        assert events == ["loaded", "embedded"]  # the query's vector remembered, none reloaded
        assert [(h.path, h.score) for h in again.hits] == [(h.path, h.score) for h in first.hits]
