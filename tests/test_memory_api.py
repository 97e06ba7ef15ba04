"""The memory write API, through the public service only: Markdown first, scoped, safe."""

from __future__ import annotations

import asyncio
import datetime as dt
import itertools
import json
import os
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from memcore.core.errors import InputError, NotFound, VaultError, WriteConflict
from memcore.core.models import IndexReport, MemoryRecord, SearchFilters
from memcore.core.settings import Settings
from memcore.memory import conversations
from memcore.memory.adding import NewMemory
from memcore.memory.conversations import as_messages
from memcore.search.filters import read_filters
from memcore.service import MemoryService
from memcore.vault.memory_format import Scope
from tests.conftest import REPO, backend_env, make_service, on_backend
from tests.support import FakeEmbedder, write


@pytest.fixture(params=["sqlite", "postgres"])
def settings(request: pytest.FixtureRequest, vault: Path) -> Settings:
    """The write-API contract runs on every backend: SQLite, and a real PostgreSQL."""
    return on_backend(request, vault)


def fields(r: MemoryRecord) -> tuple[object, ...]:
    return (r.id, r.text, r.user_id, r.agent_id, r.run_id, r.category, r.key, r.created,
            r.updated, dict(r.metadata), r.path)  # fmt: skip


async def test_an_added_memory_is_markdown_and_searchable_at_once(
    vault: Path, service: MemoryService
) -> None:
    (added,) = await service.memories.add(
        "Alice prefers dark mode in every editor.", user_id="alice", metadata={"src": "chat"}
    )
    assert added.path == "memory/users/alice/core.md" and added.id.startswith("m-")
    text = (vault / added.path).read_text()
    assert "- Alice prefers dark mode in every editor. <!-- memcore {" in text
    assert "memcore: memories" in text and 'user_id: "alice"' in text
    found = await service.memories.search("which editor theme", user_id="alice")
    assert found[0].id == added.id and found[0].metadata == {"src": "chat"}
    assert (await service.memories.get(added.id)).text == added.text


async def test_reindex_from_markdown_recovers_every_memory_and_its_history(
    vault: Path, settings: Settings, embedder: FakeEmbedder
) -> None:
    async with make_service(settings, embedder) as svc:
        await svc.memories.add("one", user_id="u1", category="prefs", key="k1")
        (two,) = await svc.memories.add("two\nsecond line", agent_id="bot", metadata={"n": 2})
        await svc.memories.update(two.id, "two, changed")
        before = sorted(map(fields, await svc.memories.get_all()))
        history = await svc.memories.history(two.id)
    shutil.rmtree(vault / ".memcore")
    async with make_service(settings, embedder) as svc:
        await svc.index()
        assert sorted(map(fields, await svc.memories.get_all())) == before
        assert await svc.memories.history(two.id) == history
        assert [e["event"] for e in history] == ["ADD", "UPDATE"]


async def test_hand_edits_are_updates_deletes_and_adds(vault: Path, service: MemoryService) -> None:
    (a,) = await service.memories.add("the build runs on Jenkins", user_id="alice")
    (b,) = await service.memories.add("lunch is at noon", user_id="alice")
    path = vault / a.path
    text = path.read_text().replace("the build runs on Jenkins", "the build runs on GitHub")
    text = "\n".join(line for line in text.split("\n") if "lunch is at noon" not in line)
    path.write_text(text + "- a note added by hand\n")
    await service.index()
    assert (await service.memories.get(a.id)).text == "the build runs on GitHub"
    with pytest.raises(NotFound):
        await service.memories.get(b.id)
    events = await service.memories.history(a.id)
    assert events[-1]["event"] == "UPDATE" and events[-1]["actor"] == "person"
    assert (await service.memories.history(b.id))[-1]["actor"] == "person"
    hand = next(r for r in await service.memories.get_all(user_id="alice") if "by hand" in r.text)
    # the next API write to the file records the hand-added item's id
    await service.memories.add("another", user_id="alice")
    assert hand.id in path.read_text()
    assert (await service.memories.get(hand.id)).text == "a note added by hand"
    # a memory deleted by hand comes back whole: its DELETE event kept every field
    back = await service.memories.restore(b.id)
    assert (back.text, back.user_id, back.created) == (b.text, "alice", b.created)


async def test_scopes_never_leak_and_shared_notes_join_when_asked(
    vault: Path, service: MemoryService
) -> None:
    write(vault, "MEMORY.md", "# Team\n\nThe team's editor theme is solarized.\n")
    write(vault, "memory/users/alice/notes.md", "# Alice\n\nAlice's editor theme is nord.\n")
    write(vault, "memory/users/bob/notes.md", "# Bob\n\nBob's editor theme is gruvbox.\n")
    write(vault, "memory/agents/bot/notes.md", "# Bot\n\nThe bot's editor theme is zenburn.\n")
    await service.index()
    await service.memories.add("editor theme: dark", user_id="alice")
    await service.memories.add("editor theme: light", user_id="bob")
    await service.memories.add("editor theme: high contrast", user_id="alice", agent_id="bot")
    await service.memories.add("editor theme: sepia", agent_id="bot")

    async def texts(**kw: object) -> set[str]:
        return {r.text for r in await service.memories.search("editor theme", limit=20, **kw)}  # type: ignore[arg-type]

    alice = await texts(user_id="alice")
    assert alice == {"editor theme: dark", "editor theme: high contrast"} | {
        t for t in alice if "nord" in t
    } and any("nord" in t for t in alice)  # her memories and the notes in her folder
    shared = await texts(user_id="alice", include_shared=True)
    assert alice < shared and any("solarized" in t for t in shared)
    assert not any("gruvbox" in t or "zenburn" in t for t in shared)
    assert "editor theme: light" not in shared and "editor theme: sepia" not in shared
    bot = await texts(agent_id="bot")
    assert {"editor theme: high contrast", "editor theme: sepia"} <= bot
    assert any("zenburn" in t for t in bot) and not any("nord" in t for t in bot)
    assert await texts(user_id="alice", agent_id="bot") == {"editor theme: high contrast"}
    assert await texts(user_id="alice", category="core") == {
        "editor theme: dark", "editor theme: high contrast"
    }  # fmt: skip
    assert {r.text for r in await service.memories.get_all(user_id="bob")} == {
        "editor theme: light"
    }


async def test_key_upsert_forget_and_counts(service: MemoryService) -> None:
    first = await service.memories.store("tz", "UTC+8", user_id="alice")
    second = await service.memories.store("tz", "UTC+1", user_id="alice")
    other = await service.memories.store("tz", "UTC-5", user_id="bob")
    assert second.id == first.id and second.text == "UTC+1" and other.id != first.id
    assert await service.memories.count(user_id="alice") == 1
    assert await service.memories.forget("tz", user_id="alice") is True
    assert await service.memories.forget("tz", user_id="alice") is False
    assert await service.memories.count(user_id="bob") == 1
    daily = await service.memories.add("standup moved", user_id="bob", category="daily")
    assert "/daily/" in daily[0].path
    assert await service.memories.categories(user_id="bob") == {"core": 1, "daily": 1}


async def test_a_scopes_keywords_rank_its_own_memories_and_score_on_the_absolute_scale(
    service: MemoryService,
) -> None:
    """A small scope is ranked among its own chunks (on SQLite in a table of their own, one
    hand-off, however big the vault): the memory holding the rarer word first, nothing from
    another scope, and a query sharing one stray word with them scores low."""
    m = service.memories
    for text in ("paint the fence", "zebra stripes on the fence", "the fence is old"):
        await m.add(text, user_id="zoe")
    await m.add("zebra stripes everywhere", user_id="yan")
    await service.index()
    found = await service.searcher.search(
        "zebra fence", 3, read_filters(user_id="zoe"), fusion_name="keyword"
    )
    texts = [h.text for h in found.hits]
    assert texts[0] == "zebra stripes on the fence" and len(texts) == 3
    assert found.hits[0].score == pytest.approx(1.0)  # every word of the query
    assert not any("everywhere" in t for t in texts)
    stray = await service.searcher.search(
        "fence painters guild charter", 3, read_filters(user_id="zoe"), fusion_name="keyword"
    )
    assert stray.hits and stray.hits[0].score < 0.5


async def test_delete_all_needs_a_scope_and_keeps_other_scopes(service: MemoryService) -> None:
    await service.memories.add("a1", user_id="a")
    await service.memories.add("a2", user_id="a", category="work")
    await service.memories.add("b1", user_id="b")
    with pytest.raises(InputError, match="needs user_id"):
        await service.memories.delete_all()
    assert await service.memories.delete_all(user_id="a") == 2
    assert [r.text for r in await service.memories.get_all()] == ["b1"]
    assert await service.memories.reset() == 1 and await service.memories.count() == 0


async def test_metadata_filters_equality_in_and_or(service: MemoryService) -> None:
    for n, (src, prio) in enumerate([("chat", 1), ("mail", 2), ("chat", 3)]):
        await service.memories.add(f"item {n}", user_id="u", metadata={"src": src, "prio": prio})

    async def texts(f: dict[str, object]) -> list[str]:
        return [r.text for r in await service.memories.get_all(user_id="u", filters=f)]

    assert await texts({"src": "chat"}) == ["item 0", "item 2"]
    assert await texts({"prio": {"in": [2, 3]}}) == ["item 1", "item 2"]
    assert await texts({"AND": [{"src": "chat"}, {"prio": {"gte": 2}}]}) == ["item 2"]
    assert await texts({"OR": [{"src": "mail"}, {"prio": 1}]}) == ["item 0", "item 1"]
    with pytest.raises(InputError, match="unsupported"):
        await texts({"src": {"regex": ".*"}})


@pytest.mark.parametrize("name", ["../x", "/", "a/b", "a\x00b", "x" * 200, "", ".hidden"])
async def test_path_like_category_names_are_refused_and_nothing_is_written(
    vault: Path, service: MemoryService, name: str
) -> None:
    with pytest.raises(InputError, match="not a valid name"):
        await service.memories.add("hello", category=name)
    assert list((vault / "memory").rglob("*.md")) == []


@pytest.mark.parametrize(
    ("name", "message"),
    [("", "empty"), ("  ", "empty"), ("a\x00b", "control"), ("x" * 257, "over 256")],
)
async def test_ids_that_are_no_text_are_refused_and_nothing_is_written(
    vault: Path, service: MemoryService, name: str, message: str
) -> None:
    for scope in ("user_id", "agent_id", "run_id", "app_id"):
        with pytest.raises(InputError, match=f"{scope} .*{message}|{scope} is {message}"):
            await service.memories.add("hello", **{scope: name})
    assert list((vault / "memory").rglob("*.md")) == []


@pytest.mark.parametrize(
    ("content", "metadata", "message"),
    [
        ("", None, "empty"),
        ("   \n", None, "empty"),
        ("x" * 1_000_001, None, "over 1,000,000 bytes"),
        ("bad \udcff surrogate", None, "not valid text"),
        ("fine", {"when": object()}, "metadata is not JSON"),
        ("fine", {1: "x"}, "string keys"),
        ("fine", ["not", "a", "dict"], "string keys"),
    ],
)
async def test_bad_input_is_one_clear_error_and_changes_nothing(
    vault: Path, service: MemoryService, content: str, metadata: object, message: str
) -> None:
    with pytest.raises(InputError, match=message):
        await service.memories.add(content, user_id="u", metadata=metadata)  # type: ignore[arg-type]
    assert not (vault / "memory" / "users").exists()
    with pytest.raises(NotFound):
        await service.memories.update("m-0000000000000000", "new text")
    with pytest.raises(NotFound):
        await service.memories.delete("m-0000000000000000")


async def test_concurrent_api_writes_and_hand_edits_lose_nothing(
    vault: Path, service: MemoryService
) -> None:
    (seed,) = await service.memories.add("seed", user_id="team")
    path = vault / seed.path
    stop = threading.Event()
    hand_written: list[str] = []

    def person() -> None:  # an editor saving the file again and again, atomically
        n = 0
        while not stop.is_set():
            text = path.read_text()
            line = f"hand note {n}"
            tmp = path.with_name(".edit.tmp")
            tmp.write_text(text + f"- {line}\n")
            os.replace(tmp, path)
            hand_written.append(line)
            n += 1
            stop.wait(0.02)  # a person saving fifty times a second

    editor = threading.Thread(target=person)
    editor.start()
    try:
        results = await asyncio.gather(
            *(service.memories.add(f"api note {i}", user_id="team") for i in range(40))
        )
    finally:
        stop.set()
        editor.join()
    await service.index()
    final = path.read_text()
    assert all(f"- api note {i} <!--" in final for i in range(40))
    assert all(line in final for line in hand_written)
    stored = {r.text for r in await service.memories.get_all(user_id="team", limit=1000)}
    assert {f"api note {i}" for i in range(40)} <= stored
    assert set(hand_written) <= stored
    assert len({r[0].id for r in results}) == 40


SECOND_PROCESS = """
import asyncio, sys
from memcore.embedders.base import EmbeddingRunner
from memcore.service import MemoryService
from memcore.core.settings import load_settings
from memcore.compose import build_store
from tests.support import FakeEmbedder

async def main() -> None:
    settings = load_settings(sys.argv[1])  # MEMCORE_STORAGE_* name a PostgreSQL index
    async with MemoryService(settings, build_store(settings),
                             EmbeddingRunner(FakeEmbedder())) as svc:
        for i in range(int(sys.argv[2])):
            await svc.memories.add(f"from the other process {i}", user_id="team")

asyncio.run(main())
"""


async def test_two_processes_adding_to_one_file_lose_nothing(
    vault: Path, settings: Settings, service: MemoryService
) -> None:
    await service.memories.add("first", user_id="team")
    env = {**os.environ, "PYTHONPATH": str(REPO), **backend_env(settings)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SECOND_PROCESS, str(vault), "25", env=env, cwd=REPO,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    for i in range(25):
        await service.memories.add(f"from this process {i}", user_id="team")
    _, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()[-3000:]
    await service.index()
    texts = {r.text for r in await service.memories.get_all(user_id="team", limit=1000)}
    assert {f"from the other process {i}" for i in range(25)} <= texts
    assert {f"from this process {i}" for i in range(25)} <= texts


def md_files(vault: Path) -> list[Path]:
    return sorted(vault.rglob("*.md"))


@pytest.mark.parametrize("removal", ["archive", "delete"])
async def test_a_memory_another_caller_removes_mid_add_stays_removed(
    vault: Path,
    settings: Settings,
    embedder: FakeEmbedder,
    service: MemoryService,
    monkeypatch: pytest.MonkeyPatch,
    removal: str,
) -> None:
    """Between an add's write and its read-back, another caller sees the new memory and
    archives or deletes it. The add still returns it, and must not mistake the removal for an
    editor dropping its line: writing it again would resurrect it (beside its archived copy)."""
    indexer = service.memories.writer.indexer
    index = indexer.index
    async with make_service(settings, embedder) as other:

        async def index_once_the_other_caller_removed_it(
            *args: object, **kw: object
        ) -> IndexReport:
            monkeypatch.setattr(indexer, "index", index)
            await other.index()
            (new,) = await other.memories.get_all(user_id="team")
            if removal == "archive":
                await other.memories.archive.archive([new])
            else:
                await other.memories.delete(new.id)
            return await index(*args, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(indexer, "index", index_once_the_other_caller_removed_it)
        (added,) = await service.memories.add("here for a moment", user_id="team")
    assert (added.text, added.user_id, added.path) == (
        "here for a moment", "team", "memory/users/team/core.md"
    )  # fmt: skip
    copies = [p.relative_to(vault).as_posix() for p in md_files(vault) if added.id in p.read_text()]
    assert copies == (["memory/.archive/users/team/core.md"] if removal == "archive" else [])
    assert await service.memories.get_all(user_id="team") == []


async def test_conversations_save_load_items_and_reset(vault: Path, service: MemoryService) -> None:
    convo = service.conversations
    messages = [
        {"role": "system", "content": "You are a build assistant."},
        {"role": "user", "content": "Why did the nightly build fail?"},
        {"role": "assistant", "content": "Checking the CI log.", "name": "helper"},
        {"role": "tool", "content": "error: DX12 shader cache missing", "tool_call_id": "c1"},
        {"role": "assistant", "content": "The shader cache was missing."},
    ]
    await convo.save("s-1", messages)
    assert await convo.load("s-1") == messages
    assert await convo.load("s-1", limit=2) == messages[-2:]
    assert (vault / "memory" / "runs" / "s-1" / "conversation.md").is_file()
    # saving again replaces, in one write
    await convo.save("s-1", messages[:2])
    assert await convo.load("s-1") == messages[:2]
    await convo.add_message("s-1", "assistant", "Looking now.")
    await convo.add_tool_result("s-1", "c2", "cache rebuilt", name="rebuild")
    items = await convo.retrieve("s-1")
    assert [i.metadata["kind"] for i in items] == ["message"] * 3 + ["tool_result"]
    assert as_messages(items[-1:]) == [
        {"role": "tool", "content": "cache rebuilt", "tool_call_id": "c2", "name": "rebuild"}
    ]
    # turns are searchable, and only within their session when scoped to it
    await convo.save("s-2", [{"role": "user", "content": "nightly build question elsewhere"}])
    found = await service.memories.search("nightly build", run_id="s-1")
    assert found and {r.run_id for r in found} == {"s-1"}
    assert await convo.reset("s-1") == 4 and await convo.retrieve("s-1") == []
    assert len(await convo.retrieve("s-2")) == 1
    with pytest.raises(InputError, match="tool_call_id"):
        await convo.save("s-3", [{"role": "tool", "content": "x"}])
    with pytest.raises(InputError, match="run_id is empty"):
        await convo.load(" ")
    assert await convo.load("../s") == []  # any text is a session id; its folder stays inside
    await convo.add_message("../s", "user", "hi")
    assert [m["content"] for m in await convo.load("../s")] == ["hi"]
    assert (vault / "memory/runs/%2e.%2fs/conversation.md").is_file()


async def test_an_append_to_the_text_memcore_wrote_last_parses_no_item_yet_misses_none(
    vault: Path, service: MemoryService
) -> None:
    """Appending to a page this process wrote last parses none of its items (most of a large
    batch's page writes went to that); a person's item added in between is still recorded,
    and a memory whose id the page already holds is not written twice."""
    from memcore.vault import memory_format

    first = [NewMemory(f"fact {n} of eve", Scope(user_id="eve")) for n in range(40)]
    await service.memories.add_batch(first)
    placed = memory_format._placed.cache_info()
    await service.memories.add_batch([NewMemory("fact 40 of eve", Scope(user_id="eve"))])
    after = memory_format._placed.cache_info()
    # one item placed: the new one, by the index reading the appended lines
    assert (after.hits + after.misses) - (placed.hits + placed.misses) == 1
    path = vault / "memory/users/eve/core.md"
    path.write_text(path.read_text() + "- a fact eve added by hand\n")
    await service.index()
    hand = next(r for r in await service.memories.get_all(user_id="eve") if "by hand" in r.text)
    assert hand.id not in path.read_text()  # derived from its text: not written yet
    # the same memory again, under the id it has (an import of an export): no second copy
    again = NewMemory(hand.text, Scope(user_id="eve"), id=hand.id)
    await service.memories.add_batch([again, NewMemory("fact 41 of eve", Scope(user_id="eve"))])
    text = path.read_text()
    assert text.count("a fact eve added by hand") == 1 and hand.id in text  # now recorded
    assert len(await service.memories.get_all(user_id="eve")) == 43


async def test_batches_tags_and_write_memory(vault: Path, service: MemoryService) -> None:
    batch = [NewMemory(f"batch fact {i} #ops", Scope(user_id=f"u{i % 2}")) for i in range(6)]
    records = await service.memories.add_batch(batch)
    assert [r.text for r in records] == [m.content for m in batch]
    assert {r.path for r in records} == {"memory/users/u0/core.md", "memory/users/u1/core.md"}
    assert len(await service.memories.get_memories_by_tag("OPS")) == 6
    write(vault, "MEMORY.md", "# Memory\n\nFirst line.\n")
    await service.index()
    assert await service.memories.write_memory("## [2026-11-23] Shipped v2\n\nAll green.") == (
        "MEMORY.md"
    )
    assert (vault / "MEMORY.md").read_text() == (
        "# Memory\n\nFirst line.\n\n## [2026-11-23] Shipped v2\n\nAll green.\n"
    )
    hits = await service.search("shipped v2 all green")
    assert hits.hits[0].path == "MEMORY.md"
    with pytest.raises(InputError, match="not a vault path"):
        await service.memories.write_memory("x", "../outside.md")
    with pytest.raises(InputError, match="not a memory file"):
        await service.memories.write_memory("x", "notes.txt")


async def test_concurrent_adds_to_one_file_share_writes_and_keys_stay_unique(
    vault: Path, service: MemoryService
) -> None:
    results = await asyncio.gather(
        *(service.memories.add(f"grouped {i}", user_id="g") for i in range(30)),
        *(service.memories.store("mood", f"mood {i}", user_id="g") for i in range(5)),
    )
    texts = [r.text for r in await service.memories.get_all(user_id="g", limit=100)]
    assert sorted(t for t in texts if t.startswith("grouped")) == sorted(
        f"grouped {i}" for i in range(30)
    )
    moods = [t for t in texts if t.startswith("mood")]
    assert len(moods) == 1  # one memory per key, whichever write came last
    assert len({r.id for r in results[30:]}) == 1
    assert (vault / "memory" / "users" / "g" / "core.md").read_text().count("- grouped") == 30


async def test_a_write_keeps_the_files_permissions(vault: Path, service: MemoryService) -> None:
    (first,) = await service.memories.add("private", user_id="p")
    path = vault / first.path
    path.chmod(0o600)
    await service.memories.add("still private", user_id="p")
    assert path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("to", ["memory/archive-2024/alice.md", "memory/zz/alice.md"])
async def test_moving_a_memory_file_keeps_every_id_and_its_history(
    vault: Path, settings: Settings, embedder: FakeEmbedder, to: str
) -> None:
    """Moved by hand to a path before or after its old one (indexed in either order): every
    id still resolves, to the new file, and a full reindex keeps them."""
    async with make_service(settings, embedder) as svc:
        a, b = await svc.memories.add_batch(
            [NewMemory("likes tea", Scope("alice")), NewMemory("works nights", Scope("alice"))]
        )
        await svc.memories.update(a.id, "likes green tea")
        (vault / to).parent.mkdir(parents=True, exist_ok=True)
        (vault / a.path).rename(vault / to)
        await svc.index()
        for full in (False, True):
            await svc.index(full=full)
            got = {r.id: r for r in await svc.memories.get_all(user_id="alice")}
            assert set(got) == {a.id, b.id} and {r.path for r in got.values()} == {to}
            assert got[a.id].text == "likes green tea"
        assert [e["event"] for e in await svc.memories.history(a.id)] == ["ADD", "UPDATE"]
        assert (await svc.status()).duplicate_memories == {}


async def test_a_copied_memory_file_lives_in_the_smallest_path_and_is_reported(
    vault: Path, settings: Settings, embedder: FakeEmbedder
) -> None:
    async with make_service(settings, embedder) as svc:
        (m,) = await svc.memories.add("likes tea", user_id="alice")
        original = m.path
        for copy in ("memory/zz-copy.md", "memory/aa-copy.md"):
            shutil.copyfile(vault / original, vault / copy)
        await svc.index()
        assert (await svc.memories.get(m.id)).path == "memory/aa-copy.md"
        assert (await svc.status()).duplicate_memories == {m.id: ["memory/users/alice/core.md",
                                                               "memory/zz-copy.md"]}  # fmt: skip
        assert len(await svc.memories.get_all(user_id="alice")) == 1
        (vault / "memory/aa-copy.md").unlink()
        await svc.index()
        assert (await svc.memories.get(m.id)).path == original  # the next smallest takes over
        (vault / original).unlink()
        (vault / "memory/zz-copy.md").unlink()
        await svc.index()
        with pytest.raises(NotFound):  # no id the Markdown does not hold
            await svc.memories.get(m.id)
        assert (await svc.status()).duplicate_memories == {}


async def test_a_stale_buffer_saved_over_a_write_is_logged_and_restorable(
    vault: Path, settings: Settings, embedder: FakeEmbedder
) -> None:
    """An editor opened the file before memcore added to it and saves its old buffer after:
    the dropped memories are in the history as a person's DELETE, with their fields, and
    `restore` brings each back with its id."""
    async with make_service(settings, embedder) as svc:
        (kept,) = await svc.memories.add("kept", user_id="alice")
        path = vault / kept.path
        stale = path.read_bytes()  # the editor's buffer
        added = [
            (await svc.memories.add(f"note {n}", user_id="alice", metadata={"n": n}))[0]
            for n in range(3)
        ]
        path.write_bytes(stale)  # the editor saves
        await svc.index()  # as the watcher does
        for m in added:
            with pytest.raises(NotFound):
                await svc.memories.get(m.id)
            last = (await svc.memories.history(m.id))[-1]
            assert (last["event"], last["actor"], last["old_memory"]) == (
                "DELETE",
                "person",
                m.text,
            )
        for m in added:
            back = await svc.memories.restore(m.id)
            assert (back.id, back.text, dict(back.metadata)) == (m.id, m.text, dict(m.metadata))
        assert len(await svc.memories.get_all(user_id="alice")) == 4
        assert (await svc.memories.history(added[0].id))[-1]["event"] == "RESTORE"


async def test_a_hand_edit_carried_along_by_an_api_write_is_logged_as_the_persons(
    vault: Path, settings: Settings, embedder: FakeEmbedder
) -> None:
    """A person edits a memory and, before any watcher has indexed the file, an API write to
    the same file indexes it: the edit is in the history as theirs, once."""
    async with make_service(settings, embedder) as svc:
        (m,) = await svc.memories.add("the build runs on Jenkins", user_id="alice")
        path = vault / m.path
        path.write_text(path.read_text().replace("on Jenkins", "on GitHub"))
        await svc.memories.add("lunch is at noon", user_id="alice")
        events = await svc.memories.history(m.id)
        assert [(e["event"], e["actor"]) for e in events] == [("ADD", "api"), ("UPDATE", "person")]
        assert events[-1]["new_memory"] == "the build runs on GitHub"
        await svc.index()  # a watcher indexing the file later logs nothing twice
        assert len(await svc.memories.history(m.id)) == 2


async def test_a_transcript_in_openais_full_message_shape_loads_back_exactly(
    vault: Path, settings: Settings, embedder: FakeEmbedder
) -> None:
    """Tool calls with no content, content as parts, tool results, names, unknown keys: load
    returns exactly what was saved, on every backend and after a full reindex; the stored
    text has no role prefix and reads like the conversation."""
    call = {"id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}  # fmt: skip
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"},
                                     {"type": "image_url", "image_url": {"url": "data:,"}}]},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18C, rain"},
        {"role": "assistant", "content": "18C and rain.", "refusal": None},
        {"role": "user", "name": "alice", "content": "assistant: not a prefix <!-- x -->"},
    ]  # fmt: skip
    async with make_service(settings, embedder) as svc:
        await svc.conversations.save("s-full", messages)
        assert await svc.conversations.load("s-full") == messages
        texts = [r.text for r in await svc.conversations.retrieve("s-full")]
        assert texts[2] == 'called get_weather({"city": "Paris"})'
        assert texts[1] == "Weather in Paris?" and texts[3] == "18C, rain"
        await svc.index(full=True)
        assert await svc.conversations.load("s-full") == messages
        found = await svc.memories.search("weather Paris", run_id="s-full")
        assert found
        # Mem0-style add of the same messages: one memory per message with text, as written
        added = await svc.memories.add(messages, user_id="alice")
        assert [r.text for r in added] == [
            "You are terse.", "Weather in Paris?", "18C and rain.",
            "assistant: not a prefix <!-- x -->",
        ]  # fmt: skip
    for bad, why in [
        ({"role": "assistant", "content": None}, "no text and no tool calls"),
        ({"role": "assistant", "content": None, "tool_calls": [{"id": "x"}]}, "function.name"),
        ({"role": "user", "content": 5}, "content must be"),
        ({"role": "robot", "content": "hi"}, "role must be"),
    ]:
        async with make_service(settings, embedder) as svc:
            with pytest.raises(InputError, match=why):
                await svc.conversations.save("s-bad", [bad])


async def test_a_transcript_is_paged_and_saving_it_again_changes_only_what_changed(
    vault: Path, service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pages of PAGE_TURNS turns; a turn already in its place keeps its id and logs nothing;
    a changed turn is an UPDATE in place; a shorter transcript deletes the rest."""
    monkeypatch.setattr(conversations, "PAGE_TURNS", 3)
    convo = service.conversations
    talk = [{"role": "user" if n % 2 else "assistant", "content": f"turn {n}"} for n in range(8)]
    assert await convo.save("s-p", talk) == 8
    folder = vault / "memory/runs/s-p"
    assert sorted(p.name for p in folder.iterdir()) == [
        "conversation.md", "conversation.p0002.md", "conversation.p0003.md"
    ]  # fmt: skip
    assert [len(await convo._read_page(rel)) for _, rel in await convo._pages("s-p")] == [3, 3, 2]
    assert await convo.load("s-p") == talk and await convo.load("s-p", limit=4) == talk[-4:]
    before = [r.id for r in await convo.retrieve("s-p")]
    page1 = (folder / "conversation.md").read_bytes()
    # one more turn: the last page takes it, nothing else is written or logged
    talk.append({"role": "user", "content": "turn 8"})
    await convo.save("s-p", talk)
    items = await convo.retrieve("s-p")
    assert [r.id for r in items[:8]] == before and (
        folder / "conversation.md"
    ).read_bytes() == page1
    assert [e["event"] for e in await service.memories.history(before[0])] == ["ADD"]
    # a changed turn is updated in place; the search finds its new text
    talk[1] = {"role": "user", "content": "turn 1, asked again about the DX12 shader cache"}
    await convo.save("s-p", talk)
    assert [r.id for r in await convo.retrieve("s-p")] == [r.id for r in items]
    assert [e["event"] for e in await service.memories.history(before[1])] == ["ADD", "UPDATE"]
    found = await service.memories.search("shader cache", run_id="s-p")
    assert found[0].id == before[1]
    # a shorter transcript: the turns past it go (pages emptied), with their history
    await convo.save("s-p", talk[:4])
    assert await convo.load("s-p") == talk[:4]
    assert await service.memories.count(run_id="s-p", category="conversation") == 4
    assert [e["event"] for e in await service.memories.history(before[7])] == ["ADD", "DELETE"]
    # an appended turn goes to the last page while it has room, then to a new one
    await convo.add_message("s-p", "assistant", "turn 4")
    await convo.add_message("s-p", "assistant", "turn 5")
    await convo.add_tool_result("s-p", "c1", "turn 6")
    assert [len(await convo._read_page(rel)) for _, rel in await convo._pages("s-p")] == [3, 3, 1]
    await convo.add_message("s-p", "user", "turn 7")
    assert [m["content"] for m in await convo.load("s-p")] == [
        "turn 0", talk[1]["content"], "turn 2", "turn 3", "turn 4", "turn 5", "turn 6", "turn 7"
    ]  # fmt: skip


async def test_a_transcript_saved_anew_is_logged_once_by_the_api_not_again_as_edits(
    vault: Path, service: MemoryService
) -> None:
    """6,000 turns saved, then saved again with every turn changed: 6,000 ADDs and 6,000
    UPDATEs by the API, and the indexer logs none of them a second time as a person's."""
    convo = service.conversations
    await convo.save("s-log", [{"role": "user", "content": f"turn {i} v1"} for i in range(6000)])
    await service.writer.indexed()
    await convo.save("s-log", [{"role": "user", "content": f"turn {i} v2"} for i in range(6000)])
    await service.writer.indexed()
    lines = (vault / "memory/history.jsonl").read_text().splitlines()
    events = [json.loads(line) for line in lines]
    assert len(events) == 12_000 and {e["actor"] for e in events} == {"api"}


async def test_a_session_folder_linked_out_of_the_vault_is_neither_read_nor_written(
    vault: Path, tmp_path: Path, service: MemoryService
) -> None:
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "conversation.md").write_text(
        "---\nmemcore: memories\nrun_id: s-out\ncategory: conversation\n---\n"
        "- secret from outside\n"
    )
    (vault / "memory/runs").mkdir(parents=True)
    (vault / "memory/runs/s-out").symlink_to(outside)
    assert await service.conversations.load("s-out") == []
    with pytest.raises(VaultError, match="leads out of the vault"):
        await service.conversations.save("s-out", [{"role": "user", "content": "hi"}])
    assert "hi" not in (outside / "conversation.md").read_text()


async def test_a_large_save_returns_once_written_and_is_indexed_in_the_background(
    vault: Path, settings: Settings, embedder: FakeEmbedder, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past SYNC_TURNS changed turns, save returns when the Markdown and history are
    written: load is exact at once, a search says the turns are still being indexed, and
    then finds them; closing the service leaves them in the index."""
    monkeypatch.setattr(conversations, "SYNC_TURNS", 5)
    talk = [{"role": "user", "content": f"question {n} about the render farm"} for n in range(12)]
    talk[7]["content"] = "where do the nightly DX12 crash dumps go"
    async with make_service(settings, embedder) as svc:
        await svc.conversations.save("s-big", talk)
        assert await svc.conversations.load("s-big") == talk  # read from the Markdown
        result = await svc.search("crash dumps", filters=SearchFilters(run_id="s-big"))
        assert any("still being indexed" in w for w in result.warnings), result.warnings
        await svc.writer.indexed()
        after = await svc.search("crash dumps", filters=SearchFilters(run_id="s-big"))
        assert not any("still being indexed" in w for w in after.warnings)
        assert after.hits[0].text == talk[7]["content"]
        await svc.conversations.save("s-big2", talk)  # closed right after: still indexed
    async with make_service(settings, embedder) as svc:
        assert await svc.memories.count(run_id="s-big2", category="conversation") == 12
        report = await svc.index()
        assert not report.indexed  # nothing was left for a later run to take in


async def test_entities_count_each_user_agent_and_run_and_go_with_their_memories(
    service: MemoryService,
) -> None:
    m = service.memories
    await m.add("Alice hikes", user_id="alice")
    await m.add("Alice climbs", user_id="alice", agent_id="coach", run_id="s1")
    await m.add("Bob plays chess", user_id="bob", agent_id="coach")
    found = [(e.kind, e.name, e.memories) for e in await m.entities()]
    assert found == [("agent", "coach", 2), ("run", "s1", 1), ("user", "alice", 2),
                     ("user", "bob", 1)]  # fmt: skip
    assert all(e.created and e.updated for e in await m.entities())
    assert await m.delete_entity("agent", "coach") == 2
    assert [(e.kind, e.name) for e in await m.entities()] == [("user", "alice")]
    with pytest.raises(NotFound, match="no memories of user 'bob'"):
        await m.delete_entity("user", "bob")
    with pytest.raises(InputError, match="user, agent, run or app"):
        await m.delete_entity("org", "x")


async def test_filters_or_not_ranges_and_text_operators_on_every_backend(
    service: MemoryService,
) -> None:
    """Mem0's filter grammar, evaluated in SQL: the same answers on SQLite and PostgreSQL."""
    m = service.memories
    await m.add("Alice hikes", user_id="alice", metadata={"topic": "Sport", "level": 3})
    await m.add("Alice reads", user_id="alice", agent_id="coach", metadata={"topic": "books"})
    await m.add("Bob plays chess", user_id="bob", metadata={"topic": "games", "level": 5})
    await m.add("Shared note", category="prefs")

    async def texts(flt: dict[str, object]) -> list[str]:
        return sorted(r.text for r in await m.get_all(filters=flt))

    today = dt.date.today()
    tomorrow = (today + dt.timedelta(days=1)).isoformat()
    assert await texts({"OR": [{"user_id": "alice"}, {"user_id": "bob"}]}) == [
        "Alice hikes", "Alice reads", "Bob plays chess"]  # fmt: skip
    assert await texts({"AND": [{"user_id": "alice"}, {"NOT": {"agent_id": "coach"}}]}) == [
        "Alice hikes"]  # fmt: skip
    assert await texts({"user_id": {"in": ["bob", "carol"]}}) == ["Bob plays chess"]
    assert await texts({"user_id": "*"}) == ["Alice hikes", "Alice reads", "Bob plays chess"]
    assert await texts({"agent_id": "*", "user_id": {"nin": ["bob"]}}) == ["Alice reads"]
    assert (
        len(await texts({"created_at": {"gte": today.isoformat(), "lte": today.isoformat()}})) == 4
    )
    assert await texts({"created_at": {"gt": today.isoformat()}}) == []
    assert await texts({"updated_at": {"lt": tomorrow}, "categories": {"in": ["prefs"]}}) == [
        "Shared note"]  # fmt: skip
    assert await texts({"topic": {"icontains": "SPO"}}) == ["Alice hikes"]
    assert await texts({"topic": {"contains": "SPO"}}) == []
    assert await texts({"level": {"gte": 3}, "NOT": [{"topic": "games"}]}) == ["Alice hikes"]
    assert await texts({"metadata": {"topic": "books"}}) == ["Alice reads"]
    assert await texts({"level": "*"}) == ["Alice hikes", "Bob plays chess"]
    assert await texts({"topic": {"contains": "100%_"}}) == []  # LIKE wildcards are text here
    found = await m.search("hikes chess", filters={"OR": [{"user_id": "bob"},
                                                          {"topic": "Sport"}]})  # fmt: skip
    assert {r.text for r in found} == {"Alice hikes", "Bob plays chess"}
    for bad, says in [
        ({"user_id": {"regex": "a"}}, "unsupported 'regex'"),
        ({"topic": {}}, "has no operator"),
        ({"OR": []}, "OR needs a non-empty list"),
        ({"created_at": {"gte": "2024-13-45"}}, "is not a date"),
    ]:
        with pytest.raises(InputError, match=says):
            await m.get_all(filters=bad)


async def test_an_add_that_waits_for_its_file_is_embedded_meanwhile_and_only_once(
    vault: Path, settings: Settings
) -> None:
    """An add that has to wait for the round in progress on its file has its memory embedded
    meanwhile (embed_ahead), before its Markdown is written; one that goes at once is
    embedded by its index run. Either way one model call for the text, and it is found."""
    seen: list[tuple[str, bool]] = []  # (text embedded, was it in the Markdown already)

    class Watching(FakeEmbedder):
        async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
            core = vault / "memory/users/alice/core.md"
            held = core.read_text() if core.exists() else ""
            seen.extend((t, t.split("\n")[-1] in held) for t in texts)
            return await super().embed(texts)

    async with make_service(settings, Watching()) as svc:
        first = svc.memories.add("the deploy runs on Fridays", user_id="alice")
        second = svc.memories.add("the standup is at nine", user_id="alice")
        (a,), (b,) = await asyncio.gather(first, second)
        assert sorted(seen) == [
            ("core memories\nthe deploy runs on Fridays", True),  # went at once
            ("core memories\nthe standup is at nine", False),  # waited: embedded meanwhile
        ]
        found = await svc.memories.search("when is the deploy", user_id="alice")
        assert found[0].id == a.id and b.id != a.id


async def test_adds_to_a_big_memory_file_build_on_the_version_written_last(
    vault: Path, service: MemoryService, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An add to a file of many memories looks up and compares only what it adds: it builds
    on the version of the file this process wrote last, which the index holds. A hand edit
    (a version nobody wrote here) is still logged as the person's; a rebuild from the
    Markdown finds the index as the adds left it."""
    for i in range(20):
        await service.memories.add(f"fact number {i}", user_id="bob")
    async with service.store.snapshot() as r:
        reader = type(r)
    whole_file_reads: list[str] = []
    for name in ("memory_texts", "embedded_hashes"):
        method = getattr(reader, name)

        async def counted(
            self: object, *args: object, _m: object = method, _n: str = name
        ) -> object:
            whole_file_reads.append(_n)
            return await _m(self, *args)  # type: ignore[operator]

        monkeypatch.setattr(reader, name, counted)
    added = [
        (await service.memories.add(f"fact number {i}", user_id="bob"))[0] for i in range(20, 25)
    ]
    assert whole_file_reads == []
    path = vault / added[0].path
    path.write_text(path.read_text().replace("fact number 3", "fact number three"))
    await service.index()
    changed = next(r for r in await service.memories.get_all(user_id="bob") if "three" in r.text)
    assert (await service.memories.history(changed.id))[-1]["actor"] == "person"
    (last,) = await service.memories.add("fact number 25", user_id="bob")
    rel = last.path

    async def stored() -> tuple[object, ...]:
        async with service.store.snapshot() as r:
            (f,) = await r.stored_files([rel])
        rows = [(c.index, c.start_line, c.end_line, c.text, c.content_hash, c.date,
                 dict(c.metadata)) for c in f.chunks]  # fmt: skip
        return f.state.content_hash, rows, f.models

    before = await stored()
    assert len(before[1]) == 26 and all(before[2])
    await service.index(full=True)
    assert await stored() == before
    texts = [r.text for r in await service.memories.get_all(user_id="bob", limit=100)]
    assert sorted(texts) == sorted(
        [f"fact number {i}" for i in range(26) if i != 3] + ["fact number three"]
    )


async def misread(
    svc: MemoryService, records: Sequence[MemoryRecord]
) -> list[tuple[str, list[str]]]:
    """The memories added through the API whose history says ADD twice in a row (no DELETE
    between) or starts with anyone's ADD but the API's (a watcher that read the file first)."""
    wrong = []
    for r in records:
        events = await svc.memories.history(r.id)
        seen = [f"{e['event']} by {e['actor']}" for e in events]
        if seen[0] != "ADD by api" or any(
            a["event"] == b["event"] == "ADD" for a, b in itertools.pairwise(events)
        ):
            wrong.append((r.id, seen))
    return wrong


@pytest.mark.timeout(300)
async def test_an_editor_saving_stale_buffers_while_four_agents_add_loses_nothing_silently(
    vault: Path, settings: Settings, embedder: FakeEmbedder
) -> None:
    """Issue 41's race: an editor keeps saving a buffer it read a moment ago (temp file, then
    rename over the memory file, as editors save) while four writers add to that file and a
    watcher indexes it. Every acknowledged memory is afterwards either in the index or in the
    history as a person's DELETE with its fields, and restorable: none is lost silently (the
    indexer's retry of a file that changed under it logged nothing, and a memory dropped a
    second time was taken for the first drop's DELETE). On PostgreSQL it takes ~1 minute:
    there each add under this race grows slower with its file (issue 42's paged memory files
    are the cure)."""
    import os
    import threading

    wanted = 1050  # issue 41: >= 1,000 acknowledged
    async with make_service(settings, embedder) as svc:
        (first,) = await svc.memories.add("seed", user_id="alice")
        path, rel = vault / first.path, first.path
        done = threading.Event()
        saves = 0

        def editor() -> None:
            nonlocal saves
            while not done.is_set():
                buffer = path.read_bytes()
                time.sleep(0.01)  # the person types; agents write meanwhile
                tmp = path.with_name(f".{path.name}.swp")
                tmp.write_bytes(buffer)
                os.replace(tmp, path)
                saves += 1
                time.sleep(0.01)  # ~50 saves a second: far past any person, still a race

        async def watcher() -> None:
            while not done.is_set():
                await svc.index([rel])
                await asyncio.sleep(0.001)

        acknowledged: list[MemoryRecord] = []

        refused = 0

        async def agent(n: int) -> None:
            nonlocal refused
            for i in range(600):  # until enough are acknowledged, whatever refusals cost
                if len(acknowledged) >= wanted:
                    break
                try:
                    (r,) = await svc.memories.add(f"agent {n} note {i}", user_id="alice")
                except WriteConflict:  # refused out loud, after 20 tries: not acknowledged
                    refused += 1
                    continue
                acknowledged.append(r)

        person = threading.Thread(target=editor)
        person.start()
        watching = asyncio.create_task(watcher())
        try:
            await asyncio.gather(*(agent(n) for n in range(4)))
        finally:
            done.set()
            person.join()
            await watching
        await svc.index([rel])
        present = {r.id for r in await svc.memories.get_all(user_id="alice", limit=10_000)}
        dropped = [r for r in acknowledged if r.id not in present]
        silent = []
        for r in dropped:
            last = (await svc.memories.history(r.id))[-1]
            if (last["event"], last["actor"]) != ("DELETE", "person") or not last.get("memory"):
                silent.append((r.id, last))
        assert len(acknowledged) >= wanted and saves > 20 and refused < len(acknowledged)
        assert silent == [], f"{len(silent)} of {len(acknowledged)} lost silently"
        wrong = await misread(svc, acknowledged)  # one put back after a stale save (#54)
        assert wrong == [], f"{len(wrong)} memories with a wrong history: {wrong[:3]}"
        for r in dropped[:20]:  # and a dropped one comes back whole
            back = await svc.memories.restore(r.id)
            assert (back.id, back.text) == (r.id, r.text)


async def test_entities_count_memories_as_count_does_not_transcript_turns(
    service: MemoryService,
) -> None:
    await service.memories.add("Sprint goal: ship the exporter", run_id="sprint-7")
    await service.conversations.save("sprint-7", [
        {"role": "user", "content": f"turn {n}"} for n in range(4)])  # fmt: skip
    await service.conversations.save("chat-only", [{"role": "user", "content": "hello"}])
    found = {(e.kind, e.name): e.memories for e in await service.memories.entities()}
    assert found[("run", "sprint-7")] == await service.memories.count(run_id="sprint-7") == 1
    assert found[("run", "chat-only")] == 0  # listed (its transcript), with no memories
