"""Mem0's app_id is a scope like user, agent and run: two apps sharing one server never see
each other's memories, on every front (Python, CLI, native HTTP, Mem0 REST with the official
client, MCP with the SDK client) and under a token bound to one app."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memcore.service import MemoryService
from tests.test_cli import cli
from tests.test_http import server
from tests.test_mcp import payload


@pytest.fixture(autouse=True)
def no_mem0_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEM0_TELEMETRY", "false")


async def two_apps(service: MemoryService) -> None:
    m = service.memories
    await m.add("alice books flights in the CRM", user_id="alice", app_id="crm")
    await m.add("alice files tickets in support", user_id="alice", app_id="support")
    await m.add("alice's own flight note", user_id="alice")


async def test_python_apps_are_scopes_in_the_vault_layout_and_every_read(
    vault: Path, service: MemoryService
) -> None:
    await two_apps(service)
    m = service.memories
    crm = await m.get_all(user_id="alice", app_id="crm")
    assert [r.text for r in crm] == ["alice books flights in the CRM"]
    assert crm[0].app_id == "crm" and crm[0].path == "memory/apps/crm/users/alice/core.md"
    assert 'app_id: "crm"' in (vault / crm[0].path).read_text()
    found = await m.search("flights", app_id="support", limit=10)
    assert [r.text for r in found] == ["alice files tickets in support"]
    assert await m.count(app_id="crm") == 1 and await m.count(user_id="alice") == 3
    # Mem0's filter form: an app_id condition is honoured, never dropped
    assert [r.text for r in await m.get_all(filters={"app_id": "crm"})] == [crm[0].text]
    both = await m.get_all(filters={"AND": [{"user_id": "alice"}, {"app_id": "other"}]})
    assert both == []
    kinds = {(e.kind, e.name, e.memories) for e in await m.entities()}
    assert {("app", "crm", 1), ("app", "support", 1), ("user", "alice", 3)} <= kinds
    assert await m.delete_entity("app", "crm") == 1
    assert await m.count(user_id="alice") == 2
    assert await m.count(app_id="support") == 1
    # notes written by hand in an app's folder belong to that app alone
    (vault / "memory/apps/support/runbook.md").write_text("# Runbook\n\nRestart the queue.\n")
    await service.index()
    runbook = "note:memory/apps/support/runbook.md#L1-3"
    assert runbook not in {r.id for r in await m.search("restart queue", app_id="crm")}
    assert runbook in {r.id for r in await m.search("restart queue", app_id="support")}


def test_cli_add_list_count_and_search_by_app(vault: Path) -> None:
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    at = ["--vault", str(vault)]
    for app_id in ("crm", "support"):
        code, out, err = cli(*at, "add", f"the {app_id} team meets on Mondays", "--user",
                             "alice", "--app", app_id)  # fmt: skip
        assert code == 0, err
        assert f"app={app_id}" in out
    code, out, _ = cli(*at, "list", "--app", "crm", "--json")
    assert [r["memory"] for r in json.loads(out)] == ["the crm team meets on Mondays"]
    assert cli(*at, "count", "--app", "support")[1].strip() == "1"
    code, out, _ = cli(*at, "search", "team meets", "--app", "support", "--json")
    texts = [r["text"] for r in json.loads(out)["results"]]
    assert texts == ["the support team meets on Mondays"]


async def test_native_http_and_mem0_client_keep_two_apps_apart(service: MemoryService) -> None:
    from mem0 import MemoryClient

    async with server(service, token="k") as url:
        headers = {"Authorization": "Bearer k"}
        async with httpx.AsyncClient(base_url=url, headers=headers) as http:
            made = await http.post(
                "/api/memories",
                json={"content": "crm: renewals due in May", "user_id": "alice", "app_id": "crm"},
            )
            assert made.status_code == 200, made.text
            assert made.json()["results"][0]["app_id"] == "crm"
            listed = await http.get("/api/memories", params={"app_id": "support"})
            assert listed.json()["results"] == []

        def session() -> dict[str, Any]:
            client = MemoryClient(api_key="k", host=url)
            out: dict[str, Any] = {}
            client.add("support: the printer is broken", user_id="alice", app_id="support")
            out["support"] = client.get_all(
                filters={"AND": [{"user_id": "alice"}, {"app_id": "support"}]}
            )
            out["other"] = client.get_all(
                filters={"AND": [{"user_id": "alice"}, {"app_id": "other"}]}
            )
            out["crm_search"] = client.search("renewals due", filters={"app_id": "crm"})
            out["users"] = client.users()
            client.delete_users(app_id="support")
            out["left"] = client.get_all(filters={"user_id": "alice"})
            client.client.close()
            return out

        out = await asyncio.to_thread(session)
    assert [r["memory"] for r in out["support"]["results"]] == ["support: the printer is broken"]
    assert out["support"]["results"][0]["app_id"] == "support"
    assert out["other"]["results"] == []
    assert {r["app_id"] for r in out["crm_search"]["results"]} == {"crm"}
    apps = {e["name"] for e in out["users"]["results"] if e["type"] == "app"}
    assert apps == {"crm", "support"}
    assert [r["memory"] for r in out["left"]["results"]] == ["crm: renewals due in May"]


async def test_mcp_tools_and_an_app_bound_token_stay_in_their_app(
    vault: Path, service: MemoryService
) -> None:
    await two_apps(service)
    scoped = {"crm-t": {"app_id": "crm"}}
    auth = httpx2.AsyncClient(headers={"Authorization": "Bearer admin"}, timeout=30)
    async with (
        server(service, token="admin", scoped=scoped) as url,
        auth,
        Client(streamable_http_client(url + "/mcp", http_client=auth)) as client,
    ):
        rows = payload(await client.call_tool("list", {"user_id": "alice", "app_id": "support"}))
        assert [r["memory"] for r in rows] == ["alice files tickets in support"]
        added = payload(await client.call_tool("add", {"content": "crm via mcp",
                                                       "app_id": "crm"}))  # fmt: skip
        assert added[0]["app_id"] == "crm"
        async with httpx.AsyncClient(
            base_url=url, headers={"Authorization": "Bearer crm-t"}
        ) as http:
            seen = await http.post("/api/memory/search", json={"query": "alice tickets flights"})
            paths = {r["path"] for r in seen.json()["results"]}
            assert paths and all(p.startswith("memory/apps/crm/") for p in paths)
            other = await http.get("/api/memories", params={"app_id": "support"})
            assert other.status_code == 403 and "app_id=crm" in other.text
            mine = await http.post("/api/memories", json={"content": "bound add"})
            assert mine.json()["results"][0]["path"].startswith("memory/apps/crm/")
    assert await service.memories.count(app_id="support") == 1
