"""PostgreSQL as a shared index: several processes, one database, namespaced vaults, pgvector's
HNSW index in use. On a real PostgreSQL (the postgres_url fixture)."""

from __future__ import annotations

import asyncio
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from memcore.compose import build_store
from memcore.core.errors import ConfigError, NotFound, StorageError
from memcore.core.models import FileState, SearchFilters
from memcore.core.settings import Settings, load_settings
from memcore.storage.postgres.queries import as_param, nearest_query
from memcore.storage.postgres.server import uses_iterative_scan
from memcore.storage.postgres.store import PostgresStore
from memcore.vault.chunker import chunk_markdown
from tests.conftest import REPO, backend_env, make_service
from tests.support import FakeEmbedder

INDEXER = """
import asyncio, sys
from memcore.compose import build_store
from memcore.embedders.base import EmbeddingRunner
from memcore.service import MemoryService
from memcore.core.settings import load_settings
from tests.support import FakeEmbedder

async def main() -> None:
    settings = load_settings(sys.argv[1])
    async with MemoryService(settings, build_store(settings),
                             EmbeddingRunner(FakeEmbedder())) as svc:
        for _ in range(int(sys.argv[2])):
            await svc.index()

asyncio.run(main())
"""


def pg_settings(vault: Path, url: str, namespace: str) -> Settings:
    return load_settings(vault, {"storage.url": url, "storage.namespace": namespace})


def note(n: int, version: int) -> str:
    sections = "\n\n".join(f"## Part {p}\n\nnote {n} part {p} version {version}" for p in range(3))
    return f"# Note {n}\n\n{sections}\n"


async def test_two_processes_indexing_one_shared_vault_lose_and_repeat_nothing(
    vault: Path, postgres_url: str, namespace: str
) -> None:
    """Two daemons on one shared vault (two machines, one synced folder) index the same files
    into one namespace while the files change under them."""
    settings = pg_settings(vault, postgres_url, namespace)
    for n in range(30):
        (vault / "memory" / f"n{n}.md").write_text(note(n, 0))
    env = {**os.environ, "PYTHONPATH": str(REPO), **backend_env(settings)}
    cmd = [sys.executable, "-c", INDEXER, str(vault), "8"]
    procs = [
        await asyncio.create_subprocess_exec(
            *cmd, env=env, cwd=REPO, stderr=asyncio.subprocess.PIPE
        )
        for _ in range(2)
    ]
    for version in range(1, 4):  # edits, new files and deletions while both index
        for n in range(0, 30, 3):
            (vault / "memory" / f"n{n}.md").write_text(note(n, version))
        (vault / "memory" / f"new{version}.md").write_text(note(100 + version, version))
        (vault / "memory" / f"n{29 - version}.md").unlink()
        await asyncio.sleep(0.2)
    for proc in procs:
        _, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()[-800:]
    async with make_service(settings, FakeEmbedder()) as svc:
        await svc.index()  # the last word: whatever changed after the other two finished
        async with svc.store.snapshot() as r:
            states = await r.file_states()
            on_disk = {p.name: p for p in (vault / "memory").glob("*.md")}
            assert set(states) == {f"memory/{name}" for name in on_disk}
            for name, path in on_disk.items():
                chunks, _ = chunk_markdown(path.read_text(), f"memory/{name}")
                hits = await r.search_text(f"note {name}", 500, SearchFilters(path_prefix=""))
                rows = await r.chunk_rows([c for c, _ in hits])
                mine = sorted(row.text for row in rows.values() if row.path == f"memory/{name}")
                assert mine == sorted(c.text for c in chunks), name  # each chunk once
            stats = await r.stats(svc.embedder.model_id)
            expected = sum(len(chunk_markdown(p.read_text(), "x")[0]) for p in on_disk.values())
            assert stats.chunks == expected and stats.vectors_pending == 0


async def test_vaults_in_one_database_never_see_each_other(
    tmp_path: Path, postgres_url: str
) -> None:
    vaults = []
    for name in ("alpha", "beta"):
        (tmp_path / name / "memory").mkdir(parents=True)
        vaults.append(load_settings(tmp_path / name, {"storage.url": postgres_url}))
    alpha, beta = vaults
    assert alpha.namespace != beta.namespace  # derived from each vault's own path
    async with make_service(alpha, FakeEmbedder()) as a, make_service(beta, FakeEmbedder()) as b:
        (mine,) = await a.memories.add("alpha keeps the launch codes", user_id="u")
        await b.memories.add("beta has a cat", user_id="u")
        assert [m.text for m in await b.memories.get_all(user_id="u")] == ["beta has a cat"]
        assert all("launch" not in h.text for h in (await b.search("launch codes")).hits)
        assert [m.id for m in await a.memories.search("launch codes", user_id="u")] == [mine.id]
        with pytest.raises(NotFound):
            await b.memories.get(mine.id)


async def test_vector_search_uses_the_hnsw_index_with_filters_in_sql(
    postgres_url: str, namespace: str
) -> None:
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(60, 16)).astype(np.float32)
    async with PostgresStore(postgres_url, namespace, ann_min_vectors=0) as store:
        async with store.transaction() as tx:
            for n in range(60):
                chunks, _ = chunk_markdown(f"# N{n}\n\nnote {n}\n", f"memory/{n % 3}/n{n}.md")
                state = FileState(chunks[0].path, f"h{n}", 1, 1)
                await tx.replace_file(state, chunks, [vecs[n]], "m")
        async with store.snapshot() as r:
            await r.conn.execute("SET LOCAL enable_sort = off")  # as on a big table
            q = as_param(vecs[7])
            # sent in pgvector's binary form: the very vector the float4[] text form gives
            cur = await r.conn.execute(
                "SELECT %s::vector = %s::float4[]::vector", [q, vecs[7].tolist()]
            )
            assert (await cur.fetchall()) == [(True,)]
            cur = await r.conn.execute(
                b"EXPLAIN " + nearest_query(namespace, "m", 16).as_bytes(r.conn), [q, 5]
            )
            plan = "\n".join(str(row[0]) for row in await cur.fetchall())
            assert "memory_chunks_hnsw_" in plan, plan
            hits = await r.search_vectors(vecs[7], "m", 5, SearchFilters(path_prefix="memory/1/"))
            rows = await r.chunk_rows([c for c, _ in hits])
            assert len(hits) == 5 and {row.path[:9] for row in rows.values()} == {"memory/1/"}
            assert rows[hits[0][0]].path == "memory/1/n7.md"


async def write_vectors(store: PostgresStore, vecs: np.ndarray, folder_of: list[str]) -> None:
    """One note per vector, note n under ``memory/<folder_of[n]>/``."""
    async with store.transaction() as tx:
        for n, vec in enumerate(vecs):
            chunks, _ = chunk_markdown(f"# N{n}\n\nnote {n}\n", f"memory/{folder_of[n]}/n{n}.md")
            await tx.replace_file(FileState(chunks[0].path, f"h{n}", 1, 1), chunks, [vec], "m")


@pytest.mark.parametrize("share", [0.02, 0.5])
async def test_filtered_vector_search_is_exact_on_every_pgvector(
    postgres_url: str, namespace: str, share: float
) -> None:
    """A filter that keeps 2% or half of 1,200 chunks, with a small ef_search, so that an
    index scan stopping after ef_search candidates would come back short: on every pgvector
    (iterative scan from 0.8, an exact scan inside the filter before it) the k nearest inside
    the filter, in order, as numpy computes them."""
    rng = np.random.default_rng(1)
    vecs = rng.normal(size=(1200, 16)).astype(np.float32)
    inside = rng.random(1200) < share
    async with PostgresStore(postgres_url, namespace, ef_search=40, ann_min_vectors=0) as store:
        await write_vectors(store, vecs, ["in" if flag else "out" for flag in inside])
        unit = vecs / np.linalg.norm(vecs, axis=1, keepdims=True)
        for q in rng.normal(size=(5, 16)).astype(np.float32):
            sims = unit @ (q / np.linalg.norm(q))
            expected = sorted(np.flatnonzero(inside), key=lambda n: -sims[n])[:10]
            async with store.snapshot() as r:
                await r.conn.execute("SET LOCAL enable_seqscan = off")  # as on a big table
                await r.conn.execute("SET LOCAL enable_sort = off")
                hits = await r.search_vectors(q, "m", 10, SearchFilters(path_prefix="memory/in/"))
                rows = await r.chunk_rows([c for c, _ in hits])
            assert [rows[c].path for c, _ in hits] == [f"memory/in/n{n}.md" for n in expected]
            assert [s for _, s in hits] == pytest.approx([sims[n] for n in expected], abs=1e-5)


async def vector_index_exists(store: PostgresStore, dim: int) -> bool:
    from memcore.storage.postgres.queries import vector_index_name

    async with store.snapshot() as r:
        rows = await r.all(
            "SELECT to_regclass(%s) IS NOT NULL",
            (vector_index_name(store.namespace, "m", dim),),
        )
    return bool(rows[0][0])


async def test_a_bulk_load_builds_a_small_vector_index_once_after_it(
    postgres_url: str, namespace: str
) -> None:
    """A load much larger than the namespace's vector index drops it and builds it once at
    the end; searches inside the load still find the nearest rows (compared exactly), and
    a load that is small next to the index leaves it alone."""
    rng = np.random.default_rng(3)
    vecs = rng.normal(size=(300, 16)).astype(np.float32)
    async with PostgresStore(postgres_url, namespace, ann_min_vectors=0) as store:
        await write_vectors(store, vecs[:10], ["a"] * 10)
        assert await vector_index_exists(store, 16)
        async with store.bulk(expected=290):
            assert not await vector_index_exists(store, 16)
            async with store.transaction() as tx:
                for n in range(10, 300):
                    path = f"memory/b/n{n}.md"
                    chunks, _ = chunk_markdown(f"# N{n}\n\nnote {n}\n", path)
                    await tx.replace_file(FileState(path, f"h{n}", 1, 1), chunks, [vecs[n]], "m")
            async with store.snapshot() as r:
                (best, _), *_ = await r.search_vectors(vecs[200], "m", 3, SearchFilters())
                assert (await r.chunk_rows([best]))[best].path == "memory/b/n200.md"
            assert not await vector_index_exists(store, 16)
        assert await vector_index_exists(store, 16)
        async with store.snapshot() as r:
            await r.conn.execute("SET LOCAL enable_sort = off")  # as on a big table
            cur = await r.conn.execute(
                b"EXPLAIN " + nearest_query(namespace, "m", 16).as_bytes(r.conn),
                [as_param(vecs[5]), 5],
            )
            plan = "\n".join(str(row[0]) for row in await cur.fetchall())
            assert "memory_chunks_hnsw_" in plan, plan
            assert await r.stats("m") is not None
        async with store.bulk(expected=10):  # 300 rows are more than 4 x 10: kept
            assert await vector_index_exists(store, 16)


async def test_the_exact_query_keeps_the_hnsw_index_out(postgres_url: str, namespace: str) -> None:
    rng = np.random.default_rng(2)
    async with PostgresStore(postgres_url, namespace, ann_min_vectors=0) as store:
        await write_vectors(store, rng.normal(size=(20, 16)).astype(np.float32), ["a"] * 20)
        async with store.snapshot() as r:
            await r.conn.execute("SET LOCAL enable_sort = off")  # as on a big table
            query = nearest_query(namespace, "m", 16, exact=True).as_bytes(r.conn)
            cur = await r.conn.execute(b"EXPLAIN " + query, [as_param(np.ones(16)), 5])
            plan = "\n".join(str(row[0]) for row in await cur.fetchall())
    assert "memory_chunks_hnsw_" not in plan, plan


def server_has_bm25(url: str) -> bool:
    """Whether this server can rank keywords with pg_textsearch (installed and preloaded)."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_available_extensions WHERE name = 'pg_textsearch') "
            "AND current_setting('shared_preload_libraries') LIKE '%pg_textsearch%'"
        ).fetchone()
    return bool(row and row[0])


@pytest.mark.parametrize("keyword_index", ["auto", "builtin"])
async def test_status_names_the_postgresql_pgvector_and_pg_textsearch_versions(
    vault: Path, postgres_url: str, namespace: str, keyword_index: str
) -> None:
    """pg_textsearch is named when keywords are ranked by it: on a server that has it, unless
    storage.keyword_index says builtin."""
    settings = load_settings(
        vault,
        {"storage.url": postgres_url, "storage.namespace": namespace,
         "storage.keyword_index": keyword_index},
        env={},
    )  # fmt: skip
    async with make_service(settings, FakeEmbedder()) as svc:
        engine = (await svc.status()).engine
    versions = r"PostgreSQL \d+\.\d+, pgvector 0\.\d+\.\d+"
    if keyword_index == "auto" and server_has_bm25(postgres_url):
        assert re.fullmatch(versions + r", pg_textsearch \d+\.\d+\.\d+ \(BM25\)", engine)
    else:
        assert re.fullmatch(versions, engine), engine


def test_pgvector_below_0_5_is_a_one_line_error_saying_what_is_needed() -> None:
    with pytest.raises(StorageError) as err:
        uses_iterative_scan("0.4.4", "0.4.4", "postgresql://db/x")
    assert "pgvector 0.4.4" in str(err.value) and ">= 0.5" in str(err.value)
    assert "\n" not in str(err.value)
    assert not uses_iterative_scan("0.5.0", "0.7.4", "db")
    assert uses_iterative_scan("0.6.2", "0.8.0", "db")  # the library decides: 0.8 loaded


async def test_an_unreachable_database_is_a_one_line_error(vault: Path) -> None:
    settings = pg_settings(vault, "postgresql://nobody@127.0.0.1:9/none", "x")
    with pytest.raises(StorageError) as err:
        async with build_store(settings):
            pass
    assert "cannot open index postgresql://nobody@127.0.0.1:9/none" in str(err.value)
    assert "\n" not in str(err.value)


async def test_a_restarted_server_connection_is_replaced(
    vault: Path, postgres_url: str, namespace: str
) -> None:
    """The server drops every memcore connection (a restart, a failover): the pooled reader
    and the writer connect again, and nothing the caller asked for fails."""
    settings = pg_settings(vault, postgres_url, namespace)
    write_file = vault / "memory" / "a.md"
    write_file.write_text("# A\n\nfirst note\n")
    async with make_service(settings, FakeEmbedder()) as svc:
        await svc.index()
        async with await __import__("psycopg").AsyncConnection.connect(
            postgres_url, autocommit=True
        ) as admin:
            await admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                "WHERE application_name = 'memcore' AND pid <> pg_backend_pid()"
            )
        write_file.write_text("# A\n\nsecond note\n")
        report = await svc.index()  # its read and its write each meet a dead connection
        assert report.indexed == ("memory/a.md",) and not report.failed
        hits = (await svc.search("second note")).hits
        assert hits and hits[0].text.endswith("second note")


async def test_pool_size_bounds_the_connections_concurrent_reads_take(
    tmp_path: Path, postgres_url: str, namespace: str
) -> None:
    import psycopg

    async def connections() -> int:
        async with await psycopg.AsyncConnection.connect(postgres_url) as probe:
            cur = await probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND backend_type = 'client backend'"  # not an autovacuum worker passing by
            )
            row = await cur.fetchone()
            return int(row[0]) - 1 if row else 0  # not the probe itself

    (tmp_path / "memory").mkdir()
    before = await connections()
    opened = {}
    for size in (2, 5):
        settings = load_settings(tmp_path, {"storage.url": postgres_url,
                                            "storage.namespace": namespace,
                                            "storage.pool_size": size})  # fmt: skip
        async with make_service(settings, FakeEmbedder()) as svc:
            await svc.memories.add("pooled reads", user_id="p")
            await asyncio.gather(*(svc.search(f"pooled {n}") for n in range(12)))
            opened[size] = await connections() - before
        for _ in range(100):  # a closed connection's backend leaves pg_stat_activity shortly after
            if await connections() <= before:
                break
            await asyncio.sleep(0.05)
    # the readers, the writer, the connection kept for the reads writes make, and the one
    # that holds memory files for a write (against other nodes)
    assert opened[2] <= 5 < opened[5] <= 8
    with pytest.raises(ConfigError, match=r"storage\.pool_size: must be 1-100, got 0"):
        load_settings(tmp_path, {"storage.pool_size": 0})


def test_the_memory_a_vector_index_build_may_take_is_a_setting(
    tmp_path: Path, postgres_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memcore.compose import build_store

    monkeypatch.setenv("MEMCORE_STORAGE_BUILD_MEMORY_MB", "2048")
    settings = load_settings(tmp_path, {"storage.url": postgres_url})
    assert build_store(settings).build_memory_mb == 2048  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match=r"storage\.build_memory_mb: must be 64-1048576"):
        load_settings(tmp_path, {"storage.build_memory_mb": 8})


@pytest.fixture
def own_database(postgres_url: str, namespace: str) -> Iterator[str]:
    """A database of this test's own (the session's is shared by every test's namespace)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    name = f"own_{namespace.replace('-', '_')}"
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name}")
        admin.execute(f"CREATE DATABASE {name}")
    yield make_conninfo(**{**conninfo_to_dict(postgres_url), "dbname": name})
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        admin.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


async def test_word_rarity_read_from_the_bm25_index_is_the_counted_one(
    own_database: str, namespace: str
) -> None:
    """Where keywords are ranked by pg_textsearch and the index is this namespace's, a
    search's word counts come from the index's statistics, not from reading rows: coverage
    is then what counting the namespace's rows gives. Where the server has no pg_textsearch,
    PostgreSQL's own full text serves and says so."""
    files = [(f"memory/n{i}.md", f"# N{i}\n\ncommon filler {i}\n") for i in range(80)]
    files += [
        ("memory/zebra.md", "# Zebra\n\nthe zebra is common\n"),
        ("memory/both.md", "# Both\n\nzebra stripes, common ones\n"),
    ]
    ids: dict[str, int] = {}
    async with PostgresStore(own_database, namespace) as store:
        async with store.transaction() as tx:
            for path, text in files:
                chunks, _ = chunk_markdown(text, path)
                (ids[path],) = await tx.replace_file(
                    FileState(path, path, len(text), 1), chunks, [None], "m"
                )
        wanted = [ids["memory/zebra.md"], ids["memory/both.md"], ids["memory/n3.md"]]
        async with store.snapshot() as r:
            await r.search_text("zebra stripes common nowhereword", 3, SearchFilters())
            counted = r._counted
            indexed = await r.keyword_coverage("zebra stripes common nowhereword", wanted)
        bm25 = store.bm25
    async with (
        PostgresStore(own_database, namespace, bm25=False) as store,
        store.snapshot() as r,
    ):
        rows = await r.keyword_coverage("zebra stripes common nowhereword", wanted)
    if server_has_bm25(own_database):
        assert bm25 and counted is not None
        assert counted[1] == {"zebra": 2, "stripes": 1, "common": 82, "nowhereword": 0}
    else:
        assert not bm25
    assert indexed == pytest.approx(rows, abs=1e-3)


async def test_keywords_rank_right_after_the_server_restarts(
    tmp_path: Path, namespace: str
) -> None:
    """pg_textsearch 1.0 forgets its statistics when the server restarts and would rank the
    commonest words highest: the store notices when it connects again, ranks with
    PostgreSQL's own full text while it rebuilds the index, then with the index again. On a
    server of its own (restarted here); without pg_textsearch the same searches hold."""
    import warnings

    from memcore.storage.postgres.bm25 import lost_statistics

    with warnings.catch_warnings():  # it asks platformdirs for a runtime dir (as pg_server.py)
        warnings.simplefilter("ignore")
        import pgserver  # type: ignore[import-untyped]
        from pgserver._commands import pg_ctl  # type: ignore[import-untyped]

        server = pgserver.get_server(tmp_path / "pg", cleanup_mode="stop")
    try:
        url = server.get_uri()
        async with PostgresStore(url, namespace) as store:
            async with store.transaction() as tx:
                for i in range(40):
                    text = f"# N{i}\n\ncommon filler {i} common again\n"
                    if i < 2:
                        text = f"# Z{i}\n\nthe zebra {i} is common\n"
                    chunks, _ = chunk_markdown(text, f"memory/n{i}.md")
                    state = FileState(f"memory/n{i}.md", f"h{i}", 1, 1)
                    await tx.replace_file(state, chunks, [None], "m")
            pg_ctl(["-w", "restart"], pgdata=tmp_path / "pg", user=server.system_user)
            if store.bm25:
                import psycopg

                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as db:
                    assert await lost_statistics(db)  # what the store must notice
            for _ in range(2):  # while the index is rebuilt, and after
                async with store.snapshot() as r:
                    hits = await r.search_text("zebra common", 2, SearchFilters())
                    rows = await r.chunk_rows([c for c, _ in hits])
                assert sorted(rows[c].path for c, _ in hits) == ["memory/n0.md", "memory/n1.md"]
                if store._repairing is not None:
                    await store._repairing
            assert store.bm25_sound
            if store.bm25:
                async with await psycopg.AsyncConnection.connect(url, autocommit=True) as db:
                    assert not await lost_statistics(db)
    finally:
        server.cleanup()
