"""Forget many ids in one call (seed 001's Forget(session, ids[])) on every front: Python,
native HTTP, Mem0's batch delete, MCP and the CLI. All of them go or none; a scoped token
forgets only its own; each stays restorable."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memcore.core.errors import NotFound
from memcore.core.models import MemoryRecord
from memcore.service import MemoryService
from tests.test_cli import cli
from tests.test_http import server

ALICE, BOB = "forget-token-alice", "forget-token-bob"


async def seeded(service: MemoryService) -> tuple[list[MemoryRecord], list[MemoryRecord]]:
    alice = [(await service.memories.add(f"Alice fact {n}", user_id="alice"))[0] for n in range(3)]
    bob = [(await service.memories.add(f"Bob fact {n}", user_id="bob"))[0] for n in range(2)]
    return alice, bob


async def present(service: MemoryService, user: str) -> set[str]:
    return {r.id for r in await service.memories.get_all(user_id=user)}


async def test_python_forgets_many_across_files_all_or_none_and_restorably(
    service: MemoryService,
) -> None:
    alice, bob = await seeded(service)
    with pytest.raises(NotFound):  # one unknown id: nothing goes
        await service.memories.delete_many([alice[0].id, "m-0000000000000000", bob[0].id])
    assert len(await present(service, "alice")) == 3 and len(await present(service, "bob")) == 2
    # two files (alice's and bob's), one call; a repeated id counts once
    assert await service.memories.delete_many([alice[0].id, bob[0].id, alice[0].id]) == 2
    assert await present(service, "alice") == {alice[1].id, alice[2].id}
    assert await present(service, "bob") == {bob[1].id}
    back = await service.memories.restore(bob[0].id)  # its fields kept in the DELETE
    assert (back.id, back.text, back.user_id) == (bob[0].id, bob[0].text, "bob")
    assert await service.memories.delete_many([]) == 0


async def test_http_mem0_and_mcp_forget_many_within_the_callers_scope(
    service: MemoryService,
) -> None:
    alice, bob = await seeded(service)
    scoped = {ALICE: {"user_id": "alice"}, BOB: {"user_id": "bob"}}
    async with server(service, "forget-admin", scoped) as url:
        as_alice = {"Authorization": f"Bearer {ALICE}"}
        async with httpx.AsyncClient(base_url=url, headers=as_alice) as http:
            # alice's token naming one of bob's: 404 as if it did not exist, nothing deleted
            crossing = await http.post(
                "/api/memories/delete", json={"memory_ids": [alice[0].id, bob[0].id]}
            )
            assert crossing.status_code == 404
            assert len(await present(service, "alice")) == 3 and bob[0].id in await present(
                service, "bob"
            )
            empty = await http.post("/api/memories/delete", json={"memory_ids": []})
            assert empty.status_code == 400
            gone = await http.post("/api/memories/delete", json={"memory_ids": [alice[0].id]})
            assert gone.status_code == 200 and gone.json() == {"deleted": 1}
            # Mem0's batch delete: all of them or none too
            unknown = {"memory_id": "m-0000000000000000"}
            batch = await http.request(
                "DELETE", "/v1/batch/", json={"memories": [{"memory_id": alice[1].id}, unknown]}
            )
            assert batch.status_code == 404 and alice[1].id in await present(service, "alice")
        as_bob = httpx2.AsyncClient(headers={"Authorization": f"Bearer {BOB}"}, timeout=30)
        async with as_bob, Client(streamable_http_client(url + "/mcp", http_client=as_bob)) as mcp:
            refused = await mcp.call_tool("forget", {"memory_ids": [bob[0].id, alice[2].id]})
            assert refused.is_error and len(await present(service, "bob")) == 2
            done = await mcp.call_tool("forget", {"memory_ids": [bob[0].id, bob[1].id]})
            assert done.content[0].text == "forgot 2 memories"  # type: ignore[union-attr]
    assert await present(service, "bob") == set()
    assert await present(service, "alice") == {alice[1].id, alice[2].id}


async def test_cli_forgets_many_ids(vault: Path) -> None:
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    static_vault = vault
    ids = []
    for n in range(3):
        code, out, err = await asyncio.to_thread(
            cli, "--vault", str(static_vault), "add", f"CLI fact {n}", "--user", "cy"
        )
        assert code == 0, err
        ids.append(out.split()[0])
    code, out, err = await asyncio.to_thread(
        cli, "--vault", str(static_vault), "forget", ids[0], "m-0000000000000000"
    )
    assert code != 0 and "m-0000000000000000" in err and "\n" not in err.strip()
    code, out, err = await asyncio.to_thread(cli, "--vault", str(static_vault), "forget", *ids[:2])
    assert (code, out.strip()) == (0, f"forgot {ids[0]}, {ids[1]}"), err
    code, out, err = await asyncio.to_thread(
        cli, "--vault", str(static_vault), "list", "--user", "cy"
    )
    assert ids[2] in out and ids[0] not in out and ids[1] not in out
