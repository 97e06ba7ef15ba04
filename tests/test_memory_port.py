"""One contract over every memory adapter (seed 000): markdown on SQLite, markdown on a real
PostgreSQL, and mem0 pointed at a live `memcore serve` on loopback through the official
client (no fakes). The none adapter has its own tests at the end: nothing kept, nothing
written anywhere, every front says so."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from mcp import Client

from memcore.compose import open_service
from memcore.core.errors import InputError, MemcoreError, NotFound, NotSupported
from memcore.core.settings import load_settings
from memcore.memory.adding import NewMemory
from memcore.memory.mem0_remote import Mem0Memory
from memcore.memory.port import Memory
from memcore.vault.memory_format import Scope
from tests.conftest import make_service
from tests.support import FakeEmbedder
from tests.test_cli import cli
from tests.test_http import server


@pytest.fixture(params=["markdown-sqlite", "markdown-postgres", "mem0"])
async def memory(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[Memory]:
    monkeypatch.setenv("MEM0_TELEMETRY", "false")
    (tmp_path / "vault" / "memory").mkdir(parents=True)
    overrides = {}
    if request.param == "markdown-postgres":
        overrides = {"storage.url": request.getfixturevalue("postgres_url"),
                     "storage.namespace": request.getfixturevalue("namespace")}  # fmt: skip
    settings = load_settings(tmp_path / "vault", overrides)
    async with make_service(settings, FakeEmbedder()) as svc:
        if request.param != "mem0":
            yield svc.memories
            return
        async with server(svc, token="port-key") as url:  # the Mem0 server: memcore serve
            remote = Mem0Memory(url, "port-key")
            try:
                yield remote
            finally:
                await remote.aclose()


async def test_add_get_list_count_and_scopes(memory: Memory) -> None:
    (tea,) = await memory.add("Alice likes green tea", user_id="alice", metadata={"k": "v"})
    await memory.add("Bob likes coffee", user_id="bob")
    got = await memory.get(tea.id)
    assert (got.text, got.user_id, dict(got.metadata)) == ("Alice likes green tea", "alice",
                                                            {"k": "v"})  # fmt: skip
    assert [r.id for r in await memory.get_all(user_id="alice")] == [tea.id]
    assert await memory.count(user_id="alice") == 1 and await memory.count(user_id="bob") == 1
    with pytest.raises(NotFound):
        await memory.get("m-0000000000000000")


async def test_search_stays_in_its_scope_and_honours_the_threshold(memory: Memory) -> None:
    (tea,) = await memory.add("Alice likes green tea", user_id="alice")
    await memory.add("Bob likes green tea too", user_id="bob")
    found = await memory.search("green tea", user_id="alice", limit=5)
    assert [r.id for r in found] == [tea.id] and 0 < (found[0].score or 0) <= 1
    assert await memory.search("green tea", user_id="alice", threshold=1.0) == []


async def test_a_search_without_a_threshold_keeps_weak_matches_on_every_adapter(
    memory: Memory,
) -> None:
    """No hidden floor: the mem0 adapter asks for memcore's search.min_score (0), so Mem0's
    own default threshold (0.3) does not drop what the markdown adapter returns."""
    (m,) = await memory.add("Dana rides her bicycle to work", user_id="dana")
    weak = []
    for query in ("her bike", "bicycle maintenance tips", "cycling to the office"):
        found = await memory.search(query, user_id="dana", threshold=0.0)
        if found and 0 < (found[0].score or 0) < 0.3:
            weak.append(query)
            assert [r.id for r in await memory.search(query, user_id="dana")] == [m.id], query
    assert weak, "no query scored under 0.3: the check above never ran"


async def test_update_history_delete_and_delete_all(memory: Memory) -> None:
    (m,) = await memory.add("first", user_id="carol")
    await memory.add("kept", user_id="dan")
    assert (await memory.update(m.id, "second")).text == "second"
    assert [e["event"] for e in await memory.history(m.id)] == ["ADD", "UPDATE"]
    await memory.add("another", user_id="carol")
    await memory.delete(m.id)
    with pytest.raises(NotFound):
        await memory.get(m.id)
    assert await memory.delete_all(user_id="carol") == 1
    assert await memory.count(user_id="carol") == 0 and await memory.count(user_id="dan") == 1


async def test_add_batch_filters_and_entities(memory: Memory) -> None:
    batch = [NewMemory(f"note {n}", Scope(user_id="eve"), metadata={"n": n}) for n in range(3)]
    added = await memory.add_batch(batch)
    assert [r.text for r in added] == ["note 0", "note 1", "note 2"]
    await memory.add("Frank's note", agent_id="frank")
    two = await memory.get_all(user_id="eve", filters={"n": {"gte": 1}})
    assert sorted(r.text for r in two) == ["note 1", "note 2"]
    either = await memory.get_all(filters={"OR": [{"user_id": "eve"}, {"agent_id": "frank"}]})
    assert len(either) == 4
    assert [(e.kind, e.name, e.memories) for e in await memory.entities()] == [
        ("agent", "frank", 1), ("user", "eve", 3)]  # fmt: skip


async def test_what_an_adapter_cannot_do_is_refused_by_name(memory: Memory) -> None:
    (m,) = await memory.add("strength lives here", user_id="gus")
    if memory.kind == "markdown":
        assert (await memory.reinforce(m.id))[0].strength is not None
        return
    with pytest.raises(NotSupported, match=r"memory\.adapter = mem0 cannot reinforce"):
        await memory.reinforce(m.id)
    with pytest.raises(NotSupported, match="under a key"):
        await memory.add("x", user_id="gus", key="k")
    with pytest.raises(NotSupported, match=r"mem0 cannot store a memory under a key"):
        await memory.store("k", "x", user_id="gus")  # one line, not an AttributeError
    with pytest.raises(NotSupported, match=r"write_memory"):
        await memory.write_memory("- a note")
    with pytest.raises(NotSupported, match=r"list memories by tag"):
        await memory.get_memories_by_tag("todo")


# ---- none -----------------------------------------------------------------------------------


async def test_memory_off_keeps_nothing_writes_nothing_and_every_front_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEM0_TELEMETRY", "false")
    vault = tmp_path / "vault"
    (vault / "memory").mkdir(parents=True)
    (vault / "MEMORY.md").write_text("# Engine\n\nDiveAdstra uses DX12.\n")
    before = sorted(p.relative_to(vault) for p in vault.rglob("*"))
    settings = load_settings(vault, {"memory.enabled": False})
    async with open_service(settings, FakeEmbedder()) as svc:
        assert await svc.memories.add("dropped", user_id="u") == []
        # RRClaw's and seed 003's operations too: accepted and dropped, nothing listed
        assert await svc.memories.store("editor", "Vim", user_id="u") is None
        assert await svc.memories.write_memory("- a note #todo\n") is None
        assert await svc.memories.get_memories_by_tag("todo") == []
        # and transcripts: checked as always, then dropped (no memory/runs/, no history)
        talks = svc.conversations
        said = [{"role": "user", "content": "hi"}, {"role": "tool", "content": "42",
                                                     "tool_call_id": "c1"}]  # fmt: skip
        assert await talks.save("s1", said) == 0
        assert await talks.add_message("s1", "user", "more") is None
        assert await talks.add_tool_result("s1", "c2", "done") is None
        assert await talks.load("s1") == [] and await talks.retrieve("s1") == []
        assert await talks.window("s1", 1, 10) == ([], 0) and await talks.reset("s1") == 0
        assert [page async for page in talks.stream("s1")] == []
        with pytest.raises(InputError, match="message 0: role"):
            await talks.save("s1", [{"role": "robot", "content": "x"}])
        result = await svc.search("DX12")
        assert result.hits == () and "memory is disabled" in result.warnings[0]
        assert await svc.context("DX12") == ""
        assert (await svc.status_document())["memory"] == "none"
        async with server(svc) as url, httpx.AsyncClient(base_url=url) as http:
            added = await http.post("/v3/memories/add/", json={"messages": "x", "user_id": "u"})
            assert added.status_code == 200 and added.json()["results"] == []
            found = await http.post("/api/memory/search", json={"query": "DX12"})
            assert found.json()["results"] == [] and found.json()["warnings"]
            put = await http.put("/api/conversations/s2", json={"messages": said})
            assert put.status_code == 200 and put.json()["saved"] == 0
            assert (await http.get("/api/conversations/s2")).json()["messages"] == []
            async with Client(url + "/mcp") as mcp:
                tool = await mcp.call_tool("search", {"query": "DX12"})
                assert tool.structured_content is not None
                assert tool.structured_content["results"] == []
    for args in (["add", "x"], ["search", "DX12"], ["watch"], ["status"]):
        code, out, err = await asyncio.to_thread(cli, "--vault", str(vault), "--memory", "none",
                                                 *args)  # fmt: skip
        assert (code, out.strip(), err) == (
            0,
            "memcore: memory is disabled (memory.adapter = none); nothing to do",
            "",
        )
    assert sorted(p.relative_to(vault) for p in vault.rglob("*")) == before  # nothing written
    (vault / "memcore.toml").write_text("[memory]\nenabled = false\n")  # the vault's own say
    before = sorted(p.relative_to(vault) for p in vault.rglob("*"))
    code, out, err = await asyncio.to_thread(cli, "--vault", str(vault), "add", "x")
    assert code == 0 and out.startswith("memcore: memory is disabled") and err == ""
    assert sorted(p.relative_to(vault) for p in vault.rglob("*")) == before


async def test_every_front_works_on_the_mem0_adapter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A vault whose memories live in a Mem0 server (here a memcore serve): the CLI adds and
    lists there, search finds the vault's notes and the server's memories together, HTTP and
    MCP on the local service reach the same memories, and what Mem0 cannot do is one line."""
    monkeypatch.setenv("MEM0_TELEMETRY", "false")
    monkeypatch.setenv("REMOTE_MEM0_KEY", "remote-key")
    remote_vault, vault = tmp_path / "remote", tmp_path / "vault"
    for v in (remote_vault, vault):
        (v / "memory").mkdir(parents=True)
        (v / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    (vault / "MEMORY.md").write_text("# Engine\n\nDiveAdstra renders with DX12.\n")
    async with (
        open_service(load_settings(remote_vault)) as remote,
        server(remote, token="remote-key") as url,
    ):
        flags = ["--vault", str(vault), "--memory", "mem0"]
        monkeypatch.setenv("MEMCORE_MEMORY_BASE_URL", url)
        monkeypatch.setenv("MEMCORE_MEMORY_API_KEY_ENV", "REMOTE_MEM0_KEY")
        code, out, err = await asyncio.to_thread(
            cli, *flags, "add", "Ivy's renderer is Vulkan", "--user", "ivy", "--json"
        )
        assert code == 0, err
        (added,) = json.loads(out)
        assert (await remote.memories.get(added["id"])).text == "Ivy's renderer is Vulkan"
        assert list((vault / "memory").rglob("*")) == []  # nothing of it is kept locally
        code, out, err = await asyncio.to_thread(cli, *flags, "list", "--user", "ivy", "--json")
        assert [r["id"] for r in json.loads(out)] == [added["id"]]
        code, out, err = await asyncio.to_thread(
            cli, *flags, "search", "renderer DX12 Vulkan", "--json"
        )
        paths = {r["path"] for r in json.loads(out)["results"]}
        assert "MEMORY.md" in paths and f"mem0/{added['id']}" in paths
        code, out, err = await asyncio.to_thread(cli, *flags, "forget", "--below", "0.5")
        assert code == 2 and "memory.adapter = mem0 cannot archive" in err
        local_settings = load_settings(vault, {"memory.adapter": "mem0"})
        async with open_service(local_settings) as local:
            assert local.memories.kind == "mem0"
            async with server(local) as local_url, httpx.AsyncClient(base_url=local_url) as h:
                listed = await h.get("/api/memories", params={"user_id": "ivy"})
                assert [r["id"] for r in listed.json()["results"]] == [added["id"]]
                refused = await h.post(f"/api/memories/{added['id']}/reinforce")
                assert refused.status_code == 400
                async with Client(local_url + "/mcp") as mcp:
                    got = await mcp.call_tool("get", {"memory_id": added["id"]})
                    assert got.structured_content is not None
    (vault / "memcore.toml").write_text('[memory]\nadapter = "mem0"\n')
    code, _, err = await asyncio.to_thread(cli, "--vault", str(vault), "status")
    assert code == 2 and "memory.adapter = 'mem0' sends memory off this machine" in err


async def test_an_unreachable_mem0_server_leaves_the_notes_searchable_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEM0_TELEMETRY", "false")
    monkeypatch.setenv("MEM0_API_KEY", "k")
    vault = tmp_path / "vault"
    (vault / "memory").mkdir(parents=True)
    (vault / "MEMORY.md").write_text("# Engine\n\nDiveAdstra renders with DX12.\n")
    settings = load_settings(vault, {"memory.adapter": "mem0",
                                     "memory.base_url": "http://127.0.0.1:9"})  # fmt: skip
    async with open_service(settings, FakeEmbedder()) as svc:
        result = await svc.search("DX12 renders")
        assert [h.path for h in result.hits] == ["MEMORY.md"]
        assert any("memories from memory.adapter = mem0 left out" in w for w in result.warnings)
        with pytest.raises(MemcoreError, match=r"Mem0 server at http://127\.0\.0\.1:9 failed"):
            await svc.memories.add("x", user_id="u")
