"""`memcore migrate`: an index copied to PostgreSQL and back, vectors included, answers alike."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

from memcore.compose import build_store
from memcore.core.models import MemoryQuery
from memcore.core.settings import load_settings
from memcore.storage.base import Store
from tests.conftest import make_service
from tests.support import FakeEmbedder, write
from tests.test_cli import cli


async def snapshot_of(store: Store) -> dict[str, object]:
    """Everything an index holds that a copy must keep, as comparable values."""
    async with store.snapshot() as r:
        paths = sorted(await r.file_states())
        out: dict[str, object] = {"skipped": sorted(await r.skipped_files())}
        for f in await r.stored_files(paths):
            out[f.state.path] = (
                f.state,
                [(c.index, c.heading_path, c.text, c.content_hash, c.tags, dict(c.metadata))
                 for c in f.chunks],
                [None if v is None else np.round(v, 5).tolist() for v in f.vectors],
                f.models,
            )  # fmt: skip
        memories = await r.memories(MemoryQuery(limit=1000))
        out["memories"] = sorted((m.id, m.text, m.user_id, m.path) for m in memories)
        return out


def test_an_index_goes_to_postgresql_and_back_without_embedding_again(
    vault: Path, postgres_url: str, namespace: str, tmp_path: Path
) -> None:
    settings = load_settings(vault)
    write(vault, "MEMORY.md", "# Facts\n\nDiveAdstra uses DX12 by default.\n")
    write(vault, "memory/notes.md", "# Standup\n\nThe build farm was slow.\n\n## More\n\n中文\n")
    (vault / "memory" / "bad.md").write_bytes(b"\x00\x01binary")
    embedder = FakeEmbedder()

    async def build() -> tuple[dict[str, object], list[tuple[str, int]]]:
        async with make_service(settings, embedder) as svc:
            await svc.index()
            await svc.memories.add("Alice prefers dark mode", user_id="alice")
            answer = [(h.path, h.start_line) for h in (await svc.search("build farm")).hits]
            return await snapshot_of(svc.store), answer

    before, answer = asyncio.run(build())
    calls = embedder.calls

    code, out, err = cli("--vault", str(vault), "migrate", "--to", postgres_url,
                         "--namespace", namespace)  # fmt: skip
    assert code == 0, err
    assert "Copied 3 files" in out and f"#{namespace}" in out
    pg = load_settings(vault, {"storage.url": postgres_url, "storage.namespace": namespace})

    async def on_postgres() -> None:
        async with make_service(pg, embedder) as svc:
            assert await snapshot_of(svc.store) == before
            hits = (await svc.search("build farm")).hits
            # the same best answer (keyword scores differ: BM25 in SQLite, ts_rank_cd here)
            assert (hits[0].path, hits[0].start_line) == answer[0]
            report = await svc.index()  # the copy is current: nothing to read or embed
            assert not report.indexed

    asyncio.run(on_postgres())
    assert embedder.calls == calls + 1  # the one query above, no document

    back = tmp_path / "copy" / "index.db"
    back.parent.mkdir()
    with pytest.MonkeyPatch.context() as env:  # now from PostgreSQL back to a SQLite file
        env.setenv("MEMCORE_STORAGE_NAMESPACE", namespace)
        code, out, err = cli("--vault", str(vault), "--db", postgres_url, "migrate", "--to",
                             str(back))  # fmt: skip
    assert code == 0, err
    assert "Copied 3 files" in out

    async def copied() -> dict[str, object]:
        async with build_store(load_settings(vault, {"storage.db": str(back)})) as copy:
            return await snapshot_of(copy)

    assert asyncio.run(copied()) == before
    code, _, err = cli("--vault", str(vault), "migrate", "--to", str(settings.db_path))
    assert code == 2 and "is the index being copied" in err
