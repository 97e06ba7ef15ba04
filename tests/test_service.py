"""End to end through MemoryService with real SQLite files and real Markdown."""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
import sqlite3
from pathlib import Path

import pytest

from memcore.compose import open_service
from memcore.core.errors import InputError
from memcore.core.models import FileFailure, IndexReport, SearchFilters
from memcore.core.settings import Settings, load_settings
from memcore.service import MemoryService
from tests.conftest import make_service
from tests.support import Crash, FakeEmbedder, write


def db_rows(settings: Settings, sql: str) -> list[tuple[object, ...]]:
    with sqlite3.connect(settings.db_path) as conn:
        return conn.execute(sql).fetchall()


async def test_index_then_search_finds_by_meaning_and_keyword(
    vault: Path, service: MemoryService
) -> None:
    write(
        vault,
        "MEMORY.md",
        "# Projects\n\n## DiveAdstra\n\nDiveAdstra uses DX12 by default.\n\n"
        "## Coffee\n\nThe user drinks espresso.\n",
    )
    report = await service.index()
    assert report.indexed == ("MEMORY.md",)
    assert report.chunks_embedded == 2 and report.chunks_pending == 0
    result = await service.search("DX12")
    assert result.mode == "hybrid"
    top = result.hits[0]
    assert (top.path, top.start_line, top.end_line, top.heading) == (
        "MEMORY.md",
        3,
        5,
        "Projects > DiveAdstra",
    )
    assert "DX12 by default" in top.text
    rows = db_rows(service.settings, "SELECT embedding, embedding_model FROM memory_chunks")
    assert all(len(blob) == 64 * 4 and model == "test:hash64" for blob, model in rows)  # type: ignore[arg-type]


async def test_unchanged_files_are_not_reread_or_reembedded(
    vault: Path, service: MemoryService, embedder: FakeEmbedder
) -> None:
    write(vault, "MEMORY.md", "# A\n\none\n")
    await service.index()
    calls = embedder.calls
    report = await service.index()
    assert report.indexed == () and report.unchanged == 1
    assert embedder.calls == calls


async def test_touch_without_content_change_reembeds_nothing(
    vault: Path, service: MemoryService, embedder: FakeEmbedder
) -> None:
    write(vault, "MEMORY.md", "# A\n\none\n")
    await service.index()
    path = vault / "MEMORY.md"
    path.write_text(path.read_text())  # new mtime, same bytes
    report = await service.index()
    assert report.indexed == () and report.unchanged == 1 and report.chunks_embedded == 0


async def test_editing_one_paragraph_reembeds_only_that_chunk(
    vault: Path, service: MemoryService, embedder: FakeEmbedder
) -> None:
    sections = "".join(
        f"## Section {i}\n\nParagraph number {i} about topic {i}.\n\n" for i in range(10)
    )
    write(vault, "MEMORY.md", "# Notes\n\n" + sections)
    first = await service.index()
    assert first.chunks_embedded == 10
    embedder.texts.clear()
    write(vault, "MEMORY.md", "# Notes\n\n" + sections.replace("topic 7.", "topic seven, edited."))
    report = await service.index()
    assert report.chunks_embedded == 1
    assert report.chunks_reused == 9
    assert len(embedder.texts) == 1 and "topic seven, edited" in embedder.texts[0]
    result = await service.search("seven edited")
    assert result.hits[0].heading == "Notes > Section 7"


async def test_deleted_file_loses_its_chunks(vault: Path, service: MemoryService) -> None:
    write(vault, "memory/a.md", "# A\n\nunique-word-alpha\n")
    write(vault, "memory/b.md", "# B\n\nother\n")
    await service.index()
    assert (await service.search("unique-word-alpha")).hits[0].path == "memory/a.md"
    (vault / "memory" / "a.md").unlink()
    report = await service.index()
    assert report.deleted == ("memory/a.md",)
    assert all(h.path != "memory/a.md" for h in (await service.search("unique-word-alpha")).hits)
    assert db_rows(
        service.settings, "SELECT count(*) FROM memory_chunks WHERE source_file = 'memory/a.md'"
    ) == [(0,)]


async def test_bad_files_are_reported_and_the_rest_indexed(
    vault: Path, service: MemoryService
) -> None:
    write(vault, "memory/good.md", "# Good\n\nfine text\n")
    (vault / "memory" / "binary.md").write_bytes(b"\x00\x01\x02PNG")
    (vault / "memory" / "latin1.md").write_bytes(b"# Caf\xe9\n")
    (vault / "memory" / "huge.md").write_bytes(b"word " * 1_000_000)
    report = await service.index()
    reasons = {f.path: f.reason for f in report.failed}
    assert report.indexed == ("memory/good.md",)
    assert reasons["memory/binary.md"].startswith("binary file")
    assert reasons["memory/latin1.md"] == "invalid UTF-8 at byte 5"
    assert "over index.max_file_bytes" in reasons["memory/huge.md"]
    assert all("\n" not in r for r in reasons.values())


async def test_a_skipped_file_is_listed_and_not_reread_until_it_changes(
    vault: Path, service: MemoryService
) -> None:
    bad = vault / "memory" / "latin1.md"
    bad.write_bytes(b"# Caf\xe9\n")
    first = await service.index()
    assert [f.path for f in first.failed] == ["memory/latin1.md"]
    assert (await service.status()).skipped == {"memory/latin1.md": "invalid UTF-8 at byte 5"}
    again = await service.index(["memory/latin1.md"])  # a watch event for an untouched file
    assert again.failed == () and again.still_skipped == ("memory/latin1.md",)
    write(vault, "memory/latin1.md", "# Café\n\nfixed now\n")
    fixed = await service.index()
    assert fixed.indexed == ("memory/latin1.md",) and fixed.failed == ()
    assert (await service.status()).skipped == {}
    bad.write_bytes(b"\x00binary again")
    await service.index()
    assert set((await service.status()).skipped) == {"memory/latin1.md"}
    assert (await service.search("fixed now")).hits  # the last good text stays searchable
    bad.unlink()
    gone = await service.index()
    assert (await service.status()).skipped == {} and gone.deleted == ("memory/latin1.md",)


async def test_fts_syntax_characters_in_queries_never_error(
    vault: Path, service: MemoryService
) -> None:
    write(vault, "MEMORY.md", "# Q\n\nquotes and stars and minus signs\n")
    await service.index()
    for query in [
        '"',
        '"unbalanced',
        "AND(",
        "*",
        "-",
        "a -b",
        "NEAR(",
        "col:x",
        "OR",
        "''",
        "()",
        "^",
        "",
    ]:
        result = await service.search(query)
        assert result.mode in ("hybrid", "keyword")
    assert (await service.search('stars" AND (')).hits[0].path == "MEMORY.md"


async def test_unreachable_embedder_keeps_keyword_search_and_fills_vectors_later(
    vault: Path, settings: Settings
) -> None:
    embedder = FakeEmbedder(down=True)
    write(vault, "MEMORY.md", "# Facts\n\nThe deploy key rotates monthly.\n")
    async with make_service(settings, embedder) as svc:
        report = await svc.index()
        assert report.indexed == ("MEMORY.md",)
        assert report.chunks_pending == 1
        assert any("embedder unavailable" in w for w in report.warnings)
        result = await svc.search("deploy key")
        assert result.mode == "keyword"
        assert result.hits[0].path == "MEMORY.md"
        assert any("keyword results only" in w for w in result.warnings)
        embedder.down = False
        filled = await svc.fill_pending()
        assert filled.chunks_embedded == 1 and filled.chunks_pending == 0
        result = await svc.search("deploy key")
        assert result.mode == "hybrid" and result.hits[0].vector_score is not None


async def test_model_change_reembeds_instead_of_mixing_vector_spaces(
    vault: Path, settings: Settings
) -> None:
    write(vault, "MEMORY.md", "# A\n\nalpha\n\n# B\n\nbeta\n")
    async with make_service(settings, FakeEmbedder(model_id="test:one")) as svc:
        await svc.index()
    second = FakeEmbedder(model_id="test:two")
    async with make_service(settings, second) as svc:
        status = await svc.status()
        assert status.vectors_pending == 2 and status.other_models == {"test:one": 2}
        report = await svc.index()
        assert report.chunks_embedded == 2 and report.indexed == ()
        status = await svc.status()
        assert status.vectors_pending == 0 and status.other_models == {}
    assert db_rows(settings, "SELECT DISTINCT embedding_model FROM memory_chunks") == [
        ("test:two",)
    ]
    # switching back reuses the cache: nothing is embedded again
    back = FakeEmbedder(model_id="test:one")
    async with make_service(settings, back) as svc:
        report = await svc.index()
    assert back.calls == 0 and report.chunks_pending == 0


async def test_after_a_model_change_a_write_embeds_only_its_own_chunks(
    vault: Path, settings: Settings
) -> None:
    """A one-shot `memcore add` after an embedder change must not embed the whole vault (hours
    at 1M chunks): the daemon's retry loop, or a whole-vault index, fills the others."""
    for n in range(20):
        write(vault, f"memory/n{n}.md", f"# Note {n}\n\nnote number {n}\n")
    async with make_service(settings, FakeEmbedder(model_id="test:one")) as svc:
        await svc.index()
    second = FakeEmbedder(model_id="test:two")
    async with make_service(settings, second) as svc:
        (added,) = await svc.memories.add("the deploy key rotates monthly")
        assert len(second.texts) == 1 and second.texts[0].endswith("the deploy key rotates monthly")
        assert (await svc.status()).vectors_pending == 20
        found = await svc.search("deploy key rotation")
        assert found.hits[0].path == added.path  # by keyword, and by its own vector
        report = await svc.index()  # the whole vault: the rest is filled in now
        assert report.chunks_embedded == 20 and report.chunks_pending == 0


async def test_chunk_setting_change_rechunks_and_reuses_unchanged_vectors(
    vault: Path, settings: Settings
) -> None:
    write(vault, "MEMORY.md", "# Short\n\nA small note.\n")
    long_para = " ".join(f"word{i}" for i in range(500))  # ~4k chars: several windows at any size
    write(vault, "memory/long.md", f"# Long\n\n{long_para}\n")
    first = FakeEmbedder()
    async with make_service(settings, first) as svc:
        await svc.index()
    before = db_rows(settings, "SELECT count(*) FROM memory_chunks")[0][0]
    smaller = load_settings(
        vault, overrides={"index.chunk_tokens": 100, "index.overlap_tokens": 10}
    )
    second = FakeEmbedder()
    async with make_service(smaller, second) as svc:
        report = await svc.index()
        assert any("chunking changed" in w for w in report.warnings)
        assert sorted(report.indexed) == ["MEMORY.md", "memory/long.md"]
        # the short note's chunk text is unchanged: its cached vector is reused
        assert "# Short\n\nA small note." not in "\n".join(second.texts)
        assert second.texts and all("word" in t for t in second.texts)
        assert report.chunks_pending == 0
        again = await svc.index()  # settled: nothing re-chunked the second time
        assert again.indexed == () and not again.warnings
    after = db_rows(settings, "SELECT count(*) FROM memory_chunks")[0][0]
    assert after > before  # type: ignore[operator]


async def test_index_built_before_chunking_was_recorded_rechunks_once(
    vault: Path, settings: Settings
) -> None:
    write(vault, "memory/s.md", "# S\n\nDate: 2023/05/21 (Sun) 19:50\n\nUser: hello\n")
    async with make_service(settings, FakeEmbedder()) as svc:
        await svc.index()
    with sqlite3.connect(settings.db_path) as conn:  # as an older memcore left it
        conn.execute("DELETE FROM meta WHERE key = 'chunking'")
        conn.execute("UPDATE memory_chunks SET date = NULL")
    async with make_service(settings, FakeEmbedder()) as svc:
        report = await svc.index()
        assert report.indexed == ("memory/s.md",)
        hits = (await svc.search("hello", filters=SearchFilters(date_from="2023-05-21"))).hits
        assert hits and hits[0].path == "memory/s.md"


async def test_crash_midway_leaves_whole_files_and_rerun_finishes(
    vault: Path, settings: Settings
) -> None:
    for i in range(100):
        write(
            vault,
            f"memory/note-{i:03d}.md",
            f"# Note {i}\n\nbody of note {i}\n\n## More\n\nsecond part {i}\n",
        )
    crashing = FakeEmbedder(crash_after_calls=4)
    with pytest.raises(Crash):
        async with make_service(settings, crashing) as svc:
            await svc.index()
    done = db_rows(settings, "SELECT count(*) FROM files")[0][0]
    assert 0 < done < 100  # type: ignore[operator]
    # every indexed file is complete: two chunks each, none half written
    per_file = db_rows(
        settings, "SELECT source_file, count(*) FROM memory_chunks GROUP BY source_file"
    )
    assert all(n == 2 for _, n in per_file) and len(per_file) == done
    fresh = FakeEmbedder()
    async with make_service(settings, fresh) as svc:
        report = await svc.index()
        assert len(report.indexed) == 100 - done  # type: ignore[operator]
        assert report.chunks_pending == 0
    assert db_rows(settings, "SELECT count(*) FROM memory_chunks") == [(200,)]


async def test_filters_by_tag_path_and_date(vault: Path, service: MemoryService) -> None:
    write(vault, "memory/2024-01-05.md", "# Jan\n\nlaunch plan #release\n")
    write(vault, "memory/2024-06-05.md", "# Jun\n\nlaunch retro\n")
    write(vault, "MEMORY.md", "# M\n\nlaunch checklist\n")
    await service.index()

    async def paths(**kw: str) -> set[str]:
        return {h.path for h in (await service.search("launch", filters=SearchFilters(**kw))).hits}

    assert await paths(tag="release") == {"memory/2024-01-05.md"}
    assert await paths(path_prefix="memory/") == {"memory/2024-01-05.md", "memory/2024-06-05.md"}
    assert await paths(date_from="2024-06-01") >= {"memory/2024-06-05.md"}
    assert "memory/2024-01-05.md" not in await paths(date_from="2024-06-01")


async def test_chinese_keyword_search_through_the_service(
    vault: Path, service: MemoryService
) -> None:
    write(
        vault,
        "MEMORY.md",
        "# 偏好\n\n用户喜欢喝咖啡，下午不要安排会议。\n\n# Other\n\nunrelated english text\n",
    )
    await service.index()
    for query in ("咖啡", "喜欢喝咖啡", "咖", "会议 coffee"):
        hits = (await service.search(query, fusion_name="keyword")).hits
        assert hits and hits[0].heading == "偏好", query


async def test_recency_boost_prefers_the_newer_of_equal_memories(
    vault: Path, settings: Settings
) -> None:
    today = dt.date.today()
    old, new = f"memory/{today - dt.timedelta(days=90)}.md", f"memory/{today}.md"
    note = "# Editor\n\nThe user's editor of choice is Helix.\n"
    write(vault, old, note)
    write(vault, new, note)
    write(vault, "memory/undated.md", "# Misc\n\nUnrelated grocery list.\n")
    async with make_service(settings, FakeEmbedder()) as svc:
        await svc.index()
        plain = (await svc.search("editor Helix")).hits
        assert {h.path for h in plain[:2]} == {old, new}
        assert plain[0].score == pytest.approx(plain[1].score)
    boosted = dataclasses.replace(
        settings, search=dataclasses.replace(settings.search, recency_weight=0.2)
    )
    async with make_service(boosted, FakeEmbedder()) as svc:
        hits = (await svc.search("editor Helix")).hits  # ages counted from today
        assert [h.path for h in hits[:2]] == [new, old]
        assert hits[0].score == pytest.approx(plain[0].score)  # dated today: all of it
        assert hits[1].score == pytest.approx(plain[0].score * (1 + 0.2 / 8) / 1.2)  # 3 half-lives
        # counted from a day before both, both are "future" (age 0): equal again
        early = (await svc.search("editor Helix", as_of=today - dt.timedelta(days=365))).hits
        assert early[0].score == pytest.approx(early[1].score)


async def test_limit_and_min_score(vault: Path, service: MemoryService) -> None:
    write(vault, "MEMORY.md", "".join(f"# S{i}\n\nshared word {i}\n\n" for i in range(10)))
    await service.index()
    assert len((await service.search("shared word", limit=3)).hits) == 3
    every = (await service.search("shared word", limit=10)).hits
    floor = every[4].score
    kept = (await service.search("shared word", limit=10, min_score=floor)).hits
    assert kept == tuple(h for h in every if h.score >= floor) and len(kept) >= 5
    above = math.nextafter(every[0].score, 2.0)
    assert (await service.search("shared word", min_score=above)).hits == ()
    for bad in (1.5, -0.1, float("nan")):
        with pytest.raises(InputError, match="between 0 and 1"):
            await service.search("shared word", min_score=bad)


async def test_context_block_lists_relevant_memories(vault: Path, service: MemoryService) -> None:
    write(
        vault,
        "memory/2024-10-01.md",
        "# Fixes\n\n## DX12 crash\n\nReset the command list before execution.\n",
    )
    await service.index()
    block = await service.context("DX12 crash command list", limit=3)
    assert block.startswith("## Relevant Memories\n1. [2024-10-01] Fixes > DX12 crash: ")
    assert "(memory/2024-10-01.md:3-5)" in block


async def test_every_fusion_method_answers(vault: Path, service: MemoryService) -> None:
    write(vault, "MEMORY.md", "# A\n\nalpha beta\n\n# B\n\ngamma delta\n")
    await service.index()
    for method in ("adaptive", "weighted", "rrf", "linear", "vector", "keyword"):
        result = await service.search("alpha", fusion_name=method)
        assert result.hits and result.hits[0].heading == "A", method


async def test_reindex_rebuilds_from_markdown(
    vault: Path, service: MemoryService, embedder: FakeEmbedder
) -> None:
    write(vault, "MEMORY.md", "# A\n\nalpha\n")
    await service.index()
    with sqlite3.connect(service.settings.db_path) as conn:
        conn.execute("DELETE FROM memory_chunks")
    report = await service.index(full=True)  # the rows held the vectors: embedded again
    assert report.indexed == ("MEMORY.md",) and report.chunks_embedded == 1
    assert (await service.search("alpha")).hits


def test_sample_vault_render_engine_ranks_dx12_first(tmp_path: Path) -> None:
    """The design's acceptance test, with the real default (local ONNX) embedder."""
    import asyncio
    import shutil

    from memcore.compose import open_service
    from tests.conftest import SAMPLE_VAULT

    vault = tmp_path / "sample"
    shutil.copytree(SAMPLE_VAULT, vault, ignore=shutil.ignore_patterns(".memcore"))

    async def run() -> str:
        async with open_service(load_settings(vault)) as svc:
            await svc.index()
            return (await svc.search("render engine")).hits[0].text

    assert "DiveAdstra uses DX12 by default." in asyncio.run(run())


async def test_an_include_that_matches_nothing_does_not_empty_the_index(
    vault: Path, settings: Settings, embedder: FakeEmbedder
) -> None:
    write(vault, "MEMORY.md", "# M\n\nkept safe\n")
    async with make_service(settings, embedder) as svc:
        await svc.index()
    wrong = dataclasses.replace(
        settings, index=dataclasses.replace(settings.index, include=('["MEMORY.md"]',))
    )
    async with make_service(wrong, embedder) as svc:
        report = await svc.index()
        assert report.deleted == ()
        assert any("no file in the vault matches index.include" in w for w in report.warnings)
        assert (await svc.search("kept safe")).hits


async def test_a_query_without_words_finds_nothing_and_says_why(
    vault: Path, service: MemoryService
) -> None:
    write(vault, "MEMORY.md", "# M\n\nsome text that is near everything\n")
    await service.index()
    for query in ["", "?", "...", "!!! ---"]:
        result = await service.search(query)
        assert result.hits == () and "the query has no words to search for" in result.warnings


async def test_the_python_api_leaves_a_self_ignoring_state_folder(vault: Path) -> None:
    write(vault, "MEMORY.md", "# M\n\nfrom the API\n")
    settings = load_settings(vault, {"embedder.provider": "static"})
    async with open_service(settings) as memory:
        await memory.index()
    assert (vault / ".memcore" / ".gitignore").read_text().strip().endswith("*")


def test_report_summary_counts_in_words() -> None:
    one = IndexReport(indexed=("a.md",), unchanged=1, chunks_embedded=1, elapsed_ms=1200)
    assert one.summary() == "1 file indexed, 1 unchanged; 1 chunk embedded (1.2 s)"
    many = IndexReport(
        indexed=("a.md", "b.md"),
        failed=(FileFailure("c.md", "binary file"),),
        chunks_embedded=3,
        chunks_pending=2,
        warnings=("embedder unavailable, vectors pending: connection refused",),
    )
    assert many.summary() == (
        "2 files indexed, 0 unchanged, 1 skipped (c.md); 3 chunks embedded, 2 waiting for "
        "vectors (embedder unavailable, vectors pending: connection refused) (0.0 s)"
    )


def test_the_license_the_package_declares_is_there() -> None:
    text = (Path(__file__).resolve().parent.parent / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


async def test_a_file_moved_or_deleted_and_back_is_not_embedded_again(
    vault: Path, service: MemoryService, embedder: FakeEmbedder
) -> None:
    """A vector lives once, in its chunk's row; when the row goes (the file moved, deleted,
    its text changed), the vector goes to the embedding cache, so that text is not embedded
    again."""
    text = "# A\n\n## One\n\nThe first paragraph.\n\n## Two\n\nThe second paragraph.\n"
    write(vault, "memory/notes/a.md", text)
    assert (await service.index()).chunks_embedded == 2
    (vault / "memory/notes/a.md").rename(vault / "memory/notes/b.md")
    report = await service.index()
    assert report.chunks_embedded == 0 and report.chunks_reused == 2
    (vault / "memory/notes/b.md").unlink()
    await service.index()
    write(vault, "memory/notes/c.md", text)
    report = await service.index()
    assert report.chunks_embedded == 0 and report.chunks_reused == 2


async def test_a_heading_only_file_is_found_by_its_heading(
    vault: Path, service: MemoryService
) -> None:
    write(vault, "memory/projects/zephyr.md", "# Project Zephyr\n")
    await service.index()
    found = await service.search("Project Zephyr")
    assert [h.path for h in found.hits][:1] == ["memory/projects/zephyr.md"]
