from __future__ import annotations

import sqlite3
from pathlib import Path

import numpy as np
import pytest

from memcore.chunker import chunk_markdown
from memcore.errors import StorageError
from memcore.models import FileState, SearchFilters
from memcore.storage.sqlite import SqliteStore


def fts_count(db: Path, term: str) -> int:
    with sqlite3.connect(db) as conn:
        return int(
            conn.execute(
                "SELECT count(*) FROM memory_fts WHERE memory_fts MATCH ?", (f'"{term}"',)
            ).fetchone()[0]
        )


async def test_migrations_run_once_and_are_recorded(tmp_path: Path) -> None:
    db = tmp_path / "i.db"
    async with SqliteStore(db):
        pass
    async with SqliteStore(db):
        pass
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT version, name FROM schema_migrations").fetchall()
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    assert rows == [(1, "initial")]
    assert mode == "wal"


async def test_replace_delete_and_fts_triggers_stay_in_sync(tmp_path: Path) -> None:
    db = tmp_path / "i.db"
    chunks, _ = chunk_markdown("# A\n\nalpha words\n\n# B\n\nbeta words\n", "MEMORY.md")
    state = FileState("MEMORY.md", "h1", 10, 1)
    async with SqliteStore(db) as store:
        ids = await store.replace_file(state, chunks, [c.text for c in chunks], [None, None], "m")
        assert len(ids) == 2
        assert fts_count(db, "alpha") == 1
        new, _ = chunk_markdown("# A\n\ngamma words\n", "MEMORY.md")
        await store.replace_file(
            FileState("MEMORY.md", "h2", 10, 2), new, [new[0].text], [None], "m"
        )
        assert fts_count(db, "alpha") == 0
        assert fts_count(db, "gamma") == 1
        # updating the embedding must not disturb the full-text row
        (new_id,) = await store.chunk_ids_of(["MEMORY.md"])
        await store.set_vectors({new_id: np.ones(4, dtype=np.float32)}, "m")
        assert fts_count(db, "gamma") == 1
        removed = await store.delete_files(["MEMORY.md"])
        assert removed == [new_id]
        assert fts_count(db, "gamma") == 0
        assert await store.file_states() == {}


async def test_vectors_cache_and_pending(tmp_path: Path) -> None:
    chunks, _ = chunk_markdown("# A\n\none\n\n# B\n\ntwo\n", "MEMORY.md")
    vec = np.arange(4, dtype=np.float32)
    async with SqliteStore(tmp_path / "i.db") as store:
        await store.replace_file(
            FileState("MEMORY.md", "h", 1, 1), chunks, ["one", "two"], [vec, None], "m1"
        )
        assert await store.count_pending("m1") == 1
        assert await store.count_pending("m2") == 2  # a model change makes every vector pending
        _, mat = await store.load_vectors("m1")
        assert mat.shape == (1, 4) and np.array_equal(mat[0], vec)
        await store.cache_vectors({"abc": vec}, "m1")
        assert list(await store.cached_vectors(["abc", "zzz"], "m1")) == ["abc"]
        assert await store.cached_vectors(["abc"], "m2") == {}
        pending = await store.pending_chunks("m1", 10)
        assert [p.embed_text for p in pending] == ["B\n" + chunks[1].text]


async def test_keyword_search_with_filters(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "i.db") as store:
        for path, text in [
            ("memory/2024-01-01.md", "# D\n\ncoffee #drink\n"),
            ("memory/2024-06-01.md", "# D\n\ncoffee beans\n"),
            ("MEMORY.md", "# M\n\ncoffee\n"),
        ]:
            chunks, _ = chunk_markdown(text, path)
            await store.replace_file(
                FileState(path, path, 1, 1),
                chunks,
                [c.text for c in chunks],
                [None] * len(chunks),
                "m",
            )
        rows = await store.chunk_rows(
            [cid for cid, _ in await store.keyword_search('"coffee"', 10, SearchFilters())]
        )
        assert {r.path for r in rows.values()} == {
            "memory/2024-01-01.md",
            "memory/2024-06-01.md",
            "MEMORY.md",
        }

        async def paths(f: SearchFilters) -> set[str]:
            hits = await store.keyword_search('"coffee"', 10, f)
            return {r.path for r in (await store.chunk_rows([c for c, _ in hits])).values()}

        assert await paths(SearchFilters(path_prefix="memory/")) == {
            "memory/2024-01-01.md",
            "memory/2024-06-01.md",
        }
        assert await paths(SearchFilters(tag="drink")) == {"memory/2024-01-01.md"}
        assert await paths(SearchFilters(date_from="2024-03-01", date_to="2024-12-31")) == {
            "memory/2024-06-01.md"
        }


async def test_bad_match_expression_is_a_storage_error_not_a_crash(tmp_path: Path) -> None:
    async with SqliteStore(tmp_path / "i.db") as store:
        with pytest.raises(StorageError, match="full-text query failed"):
            await store.keyword_search("AND(", 5, SearchFilters())


async def test_unopenable_database_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "not-a-db"
    bad.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StorageError, match="cannot open index"):
        async with SqliteStore(bad):
            pass
