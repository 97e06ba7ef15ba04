"""Seed 003's write_memory (Markdown appended to a vault file, indexed before it returns) on
native HTTP, MCP and the CLI, beside Python; a token held to a scope may not write the
vault's files."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memcore.core.errors import Forbidden
from memcore.core.models import Caller
from memcore.service import MemoryService
from tests.test_cli import cli
from tests.test_http import server

ADMIN, ALICE = "notes-admin", "notes-alice"


async def test_http_and_mcp_write_a_note_that_search_finds_and_a_scoped_token_may_not(
    vault: Path, service: MemoryService
) -> None:
    async with server(service, ADMIN, {ALICE: {"user_id": "alice"}}) as url:
        admin = {"Authorization": f"Bearer {ADMIN}"}
        async with httpx.AsyncClient(base_url=url, headers=admin) as http:
            note = "## Deploys\n\nWe deploy blue-green on Fridays. #ops"
            wrote = await http.post(
                "/api/notes", json={"content": note, "file": "memory/notes/ops.md"}
            )
            assert wrote.status_code == 200 and wrote.json() == {"path": "memory/notes/ops.md"}
            assert note in (vault / "memory/notes/ops.md").read_text()
            found = await http.post("/api/memory/search", json={"query": "blue-green deploys"})
            assert found.json()["results"][0]["path"] == "memory/notes/ops.md"
            # MEMORY.md by default; the text is appended, never replacing what was there
            first = await http.post("/api/notes", json={"content": "- first note"})
            second = await http.post("/api/notes", json={"content": "- second note"})
            assert first.json()["path"] == second.json()["path"] == "MEMORY.md"
            text = (vault / "MEMORY.md").read_text()
            assert text.index("- first note") < text.index("- second note")
            long = "memory/" + "n" * 300 + ".md"  # over a file name's 255 bytes
            for bad in [{"content": "x", "file": "../outside.md"},
                        {"content": "x", "file": "notes.txt"},
                        {"content": "x", "file": "memory//twice.md"},  # not the index's name
                        {"content": "x", "file": "memory/nul\u0000.md"},
                        {"content": "x", "file": long},
                        {"content": "   "}, {"content": "x", "extra": 1}]:  # fmt: skip
                answer = await http.post("/api/notes", json=bad)
                assert answer.status_code == 400, (bad, answer.text)
            before = (vault / "MEMORY.md").read_text()
            scoped = await http.post(
                "/api/notes",
                json={"content": "- alice was here"},
                headers={"Authorization": f"Bearer {ALICE}"},
            )
            assert scoped.status_code == 403 and "held to a scope" in scoped.text
            assert (vault / "MEMORY.md").read_text() == before
        auth = httpx2.AsyncClient(headers=admin, timeout=30)
        async with auth, Client(streamable_http_client(url + "/mcp", http_client=auth)) as mcp:
            said = await mcp.call_tool(
                "write_memory", {"content": "- the agent's note", "file": "memory/agent.md"}
            )
            assert said.content[0].text == "wrote to memory/agent.md"  # type: ignore[union-attr]
    assert "- the agent's note" in (vault / "memory/agent.md").read_text()


async def test_cli_write_appends_markdown_from_an_argument_or_stdin(vault: Path) -> None:
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    code, out, err = await asyncio.to_thread(
        cli, "--vault", str(vault), "write", "## Tea\n\nOolong at four.", "--file", "memory/tea.md"
    )
    assert (code, out.strip()) == (0, "wrote to memory/tea.md"), err
    assert "Oolong at four." in (vault / "memory/tea.md").read_text()
    code, out, err = await asyncio.to_thread(cli, "--vault", str(vault), "search", "oolong")
    assert code == 0 and "memory/tea.md" in out
    code, out, err = await asyncio.to_thread(cli, "--vault", str(vault), "write", " ")
    assert code == 2 and "blank" in err
    code, out, err = await asyncio.to_thread(
        cli, "--vault", str(vault), "write", "x", "--file", "../out.md"
    )
    assert code != 0 and "not a vault path" in err and not (vault.parent / "out.md").exists()


async def test_a_scoped_caller_stores_by_key_and_lists_by_tag_inside_its_scope(
    service: MemoryService,
) -> None:
    alice = service.memories_for(Caller.of_token("t-alice", {"user_id": "alice"}))
    stored = await alice.store("editor", "Vim, with #tools of her own")
    assert stored is not None and stored.user_id == "alice" and stored.key == "editor"
    with pytest.raises(Forbidden):
        await alice.store("editor", "Emacs", user_id="bob")
    await service.memories.add("Bob's #tools are a hammer", user_id="bob")
    assert [r.id for r in await alice.get_memories_by_tag("tools")] == [stored.id]
    with pytest.raises(Forbidden):
        await alice.write_memory("- a note for everyone")
