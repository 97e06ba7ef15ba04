"""A vault's own words for keyword search (seed 000's custom tokenizer): a user dictionary
that keeps a domain term whole, stop words left out of the index and of queries, the chunks
tokenized again once when either changes; BM25's k1 / b where the engine takes them. On
SQLite and PostgreSQL alike."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest

from memcore.compose import build_store
from memcore.core.errors import ConfigError
from memcore.core.own_words import NO_WORDS, Words
from memcore.core.settings import KeywordSettings, Settings, load_settings
from memcore.core.tokenize import warm_segmenter
from memcore.service import MemoryService
from memcore.storage import base
from tests.conftest import make_service, on_backend
from tests.support import FakeEmbedder

PAGES = {
    "memory/platform.md": "# 平台\n\n记忆中台的设计评审在周五。\n",
    "memory/team.md": "# 团队\n\n中台团队讨论了记忆的问题。\n",
    "memory/english.md": "# Notes\n\nThe design review of the ledger service is on Friday.\n",
}


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, vault: Path) -> Settings:
    for rel, text in PAGES.items():
        (vault / rel).write_text(text, encoding="utf-8")
    words = vault / "words"
    words.mkdir()
    (words / "dict.txt").write_text("# our product\n记忆中台 5\n账本服务\n", encoding="utf-8")
    (words / "stop.txt").write_text("评审 review\nthe  # already a stop word\n", encoding="utf-8")
    return on_backend(request, vault)


@asynccontextmanager
async def opened(settings: Settings, **keywords: object) -> AsyncIterator[MemoryService]:
    changed = dataclasses.replace(settings, keywords=KeywordSettings(**keywords))  # type: ignore[arg-type]
    async with make_service(changed, FakeEmbedder()) as svc:
        await svc.index()
        yield svc


async def scores(svc: MemoryService, query: str) -> dict[str, float]:
    found = await svc.search(query, fusion_name="keyword", limit=10)
    return {h.path: h.score for h in found.hits}


async def test_a_dictionary_keeps_a_term_whole_and_ranks_by_it(backend: Settings) -> None:
    async with opened(backend) as plain:
        assert plain.store.retokenized == 0
        before = await scores(plain, "记忆中台")
    # both pages hold 记忆 and 中台: without the dictionary they tie on the words
    assert set(before) == {"memory/platform.md", "memory/team.md"}
    mine = {"dictionary": "words/dict.txt"}
    async with opened(backend, **mine) as own:
        assert own.store.retokenized >= 1  # the platform page holds the term
        after = await scores(own, "记忆中台")
    assert after["memory/platform.md"] > after["memory/team.md"]
    assert after["memory/team.md"] < before["memory/team.md"]  # it lacks the whole term
    async with opened(backend, **mine) as again:  # the same words: nothing to do
        assert again.store.retokenized == 0
    async with opened(backend) as back:  # taken away: tokenized as before, once
        assert back.store.retokenized >= 1
        # (pg_textsearch's corpus statistics still count the rows replaced meanwhile)
        assert await scores(back, "记忆中台") == pytest.approx(before, abs=0.02)


async def test_stop_words_leave_the_index_and_the_query(backend: Settings) -> None:
    async with opened(backend) as plain:
        assert set(await scores(plain, "评审")) == {"memory/platform.md"}
        assert set(await scores(plain, "review")) == {"memory/english.md"}
    async with opened(backend, stop_words="words/stop.txt") as own:
        assert await scores(own, "评审") == {}
        assert await scores(own, "review") == {}
        # the other words of a query still find their pages
        assert set(await scores(own, "design review")) == {"memory/english.md"}
        assert set(await scores(own, "周五 评审")) == {"memory/platform.md"}


@pytest.mark.parametrize(
    ("setting", "content", "said"),
    [
        ("dictionary", None, "keywords.dictionary: cannot read"),
        ("dictionary", b"\xff\xfe\x00bad", "keywords.dictionary: .* is not UTF-8 text"),
        ("stop_words", b"a ~~~ b\n", r"keywords.stop_words: .*:1: '~~~' is not a word"),
    ],
)
def test_a_bad_words_file_is_a_one_line_config_error(
    vault: Path, setting: str, content: bytes | None, said: str
) -> None:
    if content is not None:
        (vault / "words.txt").write_bytes(content)
    settings = load_settings(vault, {f"keywords.{setting}": "words.txt"})
    with pytest.raises(ConfigError, match=said) as caught:
        build_store(settings)
    assert "\n" not in str(caught.value)


def test_k1_and_b_are_checked_and_refused_where_fts5_fixes_them(vault: Path) -> None:
    with pytest.raises(ConfigError, match=r"keywords\.k1: must be between 0 and 3, got 7"):
        load_settings(vault, {"keywords.k1": 7})
    with pytest.raises(ConfigError, match=r"FTS5 ranks with a fixed k1 = 1\.2 and b = 0\.75"):
        build_store(load_settings(vault, {"keywords.b": 0.5}))


async def test_postgres_ranks_with_the_k1_and_b_it_is_given(
    vault: Path, postgres_url: str, namespace: str
) -> None:
    (vault / "memory" / "short.md").write_text("# A\n\nledger\n")
    (vault / "memory" / "long.md").write_text(
        "# B\n\nledger " + " ".join(f"filler{n}" for n in range(60)) + "\n"
    )
    base = load_settings(vault, {"storage.url": postgres_url, "storage.namespace": namespace})
    ranked = {}
    for b in (0.0, 1.0):
        async with opened(base, b=b) as svc:
            found = await scores(svc, "ledger")
            ranked[b] = found
            store = svc.store
            if getattr(store, "bm25", ""):  # pg_textsearch: the index was built with them
                rows = await _index_options(store)
                assert f"b={b}" in rows, rows
    # b = 1 weighs the short page's one word above the long page's; b = 0 ignores length
    assert ranked[1.0]["memory/short.md"] > ranked[1.0]["memory/long.md"]
    assert ranked[0.0]["memory/short.md"] == pytest.approx(ranked[0.0]["memory/long.md"])


async def _index_options(store: object) -> str:
    import psycopg

    async with await psycopg.AsyncConnection.connect(store.url) as conn:  # type: ignore[attr-defined]
        cur = await conn.execute(
            "SELECT reloptions::text FROM pg_class WHERE relname = 'memory_chunks_bm25'"
        )
        row = await cur.fetchone()
    return str(row[0]) if row else ""


async def test_chunks_written_whole_or_appended_get_the_full_text_with_the_vaults_words(
    vault: Path,
) -> None:
    """A batch's pages written whole, then appended to (read by their new lines,
    index/tails.py): every chunk's full text is the vault's own words and stop words applied,
    the same either way."""
    import sqlite3

    from memcore.core.tokenize import fts_text
    from memcore.memory.adding import NewMemory
    from memcore.vault.memory_format import Scope

    words = vault / "words"
    words.mkdir()
    (words / "dict.txt").write_text("记忆中台 5\n", encoding="utf-8")
    (words / "stop.txt").write_text("评审\n", encoding="utf-8")
    own = {"dictionary": "words/dict.txt", "stop_words": "words/stop.txt"}
    users = 12

    def batch(n: int) -> list[NewMemory]:
        return [NewMemory(f"记忆中台的评审 {n}.{k} for user {u}", Scope(user_id=f"u{u}"))
                for u in range(users) for k in range(4)]  # fmt: skip

    async with opened(load_settings(vault), **own) as svc:
        await svc.memories.add_batch(batch(0))  # every page written whole
        await svc.memories.add_batch(batch(1))  # then appended to: 48 chunks
        held = svc.store.words
    with sqlite3.connect(vault / ".memcore" / "index.db") as db:
        rows = db.execute(
            "SELECT heading_path, content, fts_text FROM memory_chunks "
            "WHERE source_file LIKE 'memory/users/%'"
        ).fetchall()
    assert len(rows) == users * 8
    for heading, content, text in rows:
        assert text == fts_text(heading, content, held)
        assert "记忆中台" in text.split() and "评审" not in text.split()


async def test_a_querys_terms_are_cut_once_and_kept_apart_by_the_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A search asks for its query's terms twice; the second ask is not cut again, and terms
    cut with one vault's words never answer for another's."""
    cut: list[str] = []
    real = base.query_terms

    def counted(query: str, own: Words = NO_WORDS) -> list[str]:
        cut.append(query)
        return real(query, own)

    monkeypatch.setattr(base, "query_terms", counted)
    warm_segmenter()  # (a first cut may load it: terms are kept apart by the way they were cut)
    own = Words(entries=(("记忆中台", 5),), stop=frozenset({"评审"}))
    query = "记忆中台的评审在周五 (kept terms)"
    first = await base.search_terms(query, own)
    first.append("changed by its caller")
    again = await base.search_terms(query, own)
    plain = await base.search_terms(query)
    assert cut == [query, query]  # once with the vault's words, once without
    assert "记忆中台" in again and "评审" not in again and "changed by its caller" not in again
    assert "记忆中台" not in plain and "评审" in plain
