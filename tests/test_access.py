"""The one authorization rule (memory/access.py), tried as a hostile caller would: every route
of the live server walked with a token held to alice, MCP under that token, idempotency keys of
two callers, and no secret in the status document or a file other users can read."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from starlette.routing import Route

from memcore.core.models import Caller
from memcore.fronts.http.app import build_app
from memcore.service import MemoryService
from tests.support import free_port, wait_ready, write
from tests.test_http import server

SECRET = "BOBSECRET"
TOKENS = {
    "alice-t": {"user_id": "alice"},
    "bot-t": {"agent_id": "helper"},
    "crm-t": {"app_id": "crm"},
}
OWN = {"alice-t": "users/alice/", "bot-t": "/agents/helper/", "crm-t": "apps/crm/"}


def vault_files(vault: Path) -> dict[str, bytes]:
    """Every file of the vault's memory (Markdown, history, reviews): what a write changes."""
    return {
        str(p.relative_to(vault)): p.read_bytes()
        for p in sorted((vault / "memory").rglob("*"))
        if p.is_file()
    }


def attempts(bob_id: str) -> list[dict[str, Any]]:
    """Bodies and query strings aimed at bob: one of them passes each route's validation."""
    msgs = [{"role": "user", "content": "pwned"}]
    return [
        {},
        {"user_id": "bob"},
        {"query": "secret plan"},
        {"query": "secret plan", "user_id": "bob"},
        {"query": "secret plan", "filters": {"user_id": "bob"}},
        {"query": "secret plan", "filters": {"OR": [{"user_id": "bob"}, {"agent_id": "x"}]}},
        {"filters": {"user_id": "bob"}},
        {"filters": {"OR": [{"user_id": "bob"}, {"user_id": "alice"}]}},
        {"content": "pwned", "user_id": "bob"},
        {"content": "pwned", "app_id": "support"},
        {"query": "secret plan", "app_id": "support"},
        {"filters": {"app_id": "support"}},
        {"query": "secret plan", "filters": {"AND": [{"app_id": "support"}]}},
        {"content": "pwned"},
        {"text": "pwned"},
        {"messages": msgs, "user_id": "bob"},
        {"messages": msgs},
        {"memory_id": bob_id, "feedback": "NEGATIVE"},
        {"feedback": "VERY_NEGATIVE"},
        {"memories": [{"memory_id": bob_id, "text": "pwned"}]},
        {"memories": [{"memory_id": bob_id}]},
        {"memory_ids": [bob_id]},
        {"threshold": 0.99, "user_id": "bob"},
        {"threshold": 0.99},
    ]


def routes_of(app: Any) -> list[tuple[str, str]]:
    """Every (method, path) of the app's routes (the /static mount is files; /mcp is walked
    by its own client, below)."""
    return [
        (m, route.path)
        for route in app.routes
        if isinstance(route, Route)
        for m in sorted((route.methods or set()) - {"HEAD"})
    ]


@pytest.mark.timeout(300)  # ~70 routes x 3 tokens x 20 attempts
async def test_every_route_keeps_a_scoped_token_inside_its_scope(
    vault: Path, service: MemoryService
) -> None:
    """Walk the route table (HTTP, Mem0, web pages): with alice's token, a token held to agent
    helper and one held to app crm, no request aimed at bob's memories (in no app, or in app
    support), transcript or entities reads his text or changes a byte of the vault's memory,
    and none answers 5xx. A route added later is walked
    too, so it cannot skip the rule."""
    (bob,) = await service.memories.add(f"{SECRET}: bob's plan", user_id="bob", agent_id="bot")
    await service.memories.add(f"{SECRET}: bob's other plan", user_id="bob")
    await service.memories.add(f"{SECRET}: bob's support plan", user_id="bob", app_id="support")
    await service.memories.add("alice's own plan", user_id="alice")
    await service.conversations.save("bob-run", [{"role": "user", "content": f"{SECRET} chat"}])
    await service.conversations.save("alice-run", [{"role": "user", "content": "hello"}])
    write(vault, "memory/users/bob/notes.md", f"# Plans\n\n{SECRET}: bob's own note\n")
    await service.index()
    app = build_app(service, "admin", scoped=TOKENS, pages=True)
    walked = routes_of(app)
    assert len(walked) > 40  # the whole table: native, Mem0 and the web pages
    params = {"memory_id": bob.id, "kind": "user", "name": "bob", "session_id": "bob-run",
              "rest": "webhooks/projects/default/",
              "path": "memory/users/bob/notes.md"}  # fmt: skip
    through: dict[tuple[str, str], set[int]] = {}
    async with server(service, token="admin", scoped=TOKENS) as url:
        async with httpx.AsyncClient(base_url=url) as http:
            for _ in range(200):  # /ready answers 503 until the catch-up is done
                if (await http.get("/ready")).status_code == 200:
                    break
                await asyncio.sleep(0.05)
        for token in TOKENS:
            headers = {"Authorization": f"Bearer {token}"}
            async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
                for method, path in walked:
                    target = path.replace(":path}", "}").format(**params)
                    if path == "/v2/entities/{kind}/{name:path}/" and token == "bot-t":
                        target = "/v2/entities/agent/bot/"  # bob's agent, another scope
                    for body in attempts(bob.id):
                        before = vault_files(vault)
                        query = {k: v for k, v in body.items() if isinstance(v, str)}
                        query |= {"user": "bob", "q": "secret plan"} if "user_id" in body else {}
                        kw: dict[str, Any] = {"params": query}
                        if method in ("POST", "PUT", "PATCH", "DELETE"):
                            kw["json"] = body
                        if method in ("POST", "PUT", "PATCH"):  # the body says it, once
                            kw["params"] = {}
                        resp = await http.request(method, target, **kw)
                        seen = (token, method, path)
                        # a Mem0 platform feature memcore lacks is 501, saying so
                        platform = (
                            resp.status_code == 501 and "not supported by memcore" in resp.text
                        )
                        assert resp.status_code < 500 or platform, (seen, body, resp.text)
                        assert SECRET not in resp.text, (seen, body, resp.text[:300])
                        changed = {k for k, v in vault_files(vault).items() if before.get(k) != v}
                        # an allowed write lands in the caller's own scope, never elsewhere
                        outside = {k for k in changed if k.endswith(".md") and OWN[token] not in k}
                        assert not outside, (seen, body, outside)
                        through.setdefault((method, path), set()).add(resp.status_code)
    # the walk was not vacuous: every route let some attempt past validation (to be
    # answered, refused by scope, or not found), not only 400s
    stuck = {r: s for r, s in through.items() if s <= {400, 405, 413, 415, 422}}
    assert not stuck, stuck
    assert (await service.memories.get(bob.id)).text == f"{SECRET}: bob's plan"
    assert await service.memories.count(user_id="bob") == 3
    chat = await service.conversations.load("bob-run")
    assert chat == [{"role": "user", "content": f"{SECRET} chat"}]


async def test_a_scoped_token_deleting_another_entity_deletes_only_its_own_share(
    service: MemoryService,
) -> None:
    """What issue 41 found: alice's token deleted bob's memories through
    /v2/entities/agent/bot/, and an agent's token all of a user's."""
    await service.memories.add("bob with bot", user_id="bob", agent_id="bot")
    await service.memories.add("alice with bot", user_id="alice", agent_id="bot")
    await service.memories.add("bob alone", user_id="bob")
    await service.memories.add("bob with helper", user_id="bob", agent_id="helper")
    async with (
        server(service, token="admin", scoped=TOKENS) as url,
        httpx.AsyncClient(base_url=url) as http,
    ):
        if True:  # keeps the calls below at one indentation
            alice = {"Authorization": "Bearer alice-t"}
            gone = await http.delete("/v2/entities/agent/bot/", headers=alice)
            assert gone.status_code == 200 and gone.json()["deleted"] == 1
            refused = await http.delete("/v1/entities/user/bob/", headers=alice)
            assert refused.status_code == 403 and "bound to user_id=alice" in refused.text
            helper = {"Authorization": "Bearer bot-t"}
            gone = await http.delete("/v2/entities/user/bob/", headers=helper)
            assert gone.status_code == 200 and gone.json()["deleted"] == 1
            none_left = await http.delete("/v2/entities/user/bob/", headers=helper)
            # nothing of the caller's share is left: deleted already (Mem0's clients clean up
            # users this way), the same answer whether bob has other memories or not
            assert none_left.status_code == 200 and none_left.json()["deleted"] == 0
    left = sorted(r.text for r in await service.memories.get_all(limit=10))
    assert left == ["bob alone", "bob with bot"]


# What an MCP tool's argument is given, by name, when the walk aims it at bob's memories
BOB_ARGS = {
    "user_id": "bob", "query": "secret plan", "content": "pwned", "key": "k",
    "feedback": "VERY_NEGATIVE", "limit": 5,
}  # fmt: skip


def aimed_at_bob(schema: dict[str, Any], bob_id: str) -> dict[str, Any]:
    """Arguments for a tool from its input schema: its required ones and any that name a
    scope or a memory, pointed at bob's."""
    props = schema.get("properties", {})
    wanted = set(schema.get("required", [])) | (props.keys() & {"user_id", "memory_id"})
    return {
        name: bob_id if name == "memory_id" else BOB_ARGS.get(name, "x")
        for name in wanted
        if name in props
    }


async def test_mcp_tools_under_a_scoped_token_stay_in_its_scope(service: MemoryService) -> None:
    (bob,) = await service.memories.add(f"{SECRET} bob's plan", user_id="bob")
    auth = httpx2.AsyncClient(headers={"Authorization": "Bearer alice-t"}, timeout=30)
    async with (
        server(service, token="admin", scoped=TOKENS) as url,
        auth,
        Client(streamable_http_client(url + "/mcp", http_client=auth)) as client,
    ):
        added = await client.call_tool("add", {"content": "alice's plan"})
        assert not added.is_error and '"user_id":"alice"' in added.content[0].text.replace(" ", "")
        found = await client.call_tool("search", {"query": "plan", "user_id": "bob"})
        assert found.is_error and "bound to user_id=alice" in found.content[0].text
        mine = await client.call_tool("search", {"query": "plan"})
        assert SECRET not in mine.content[0].text and "alice's plan" in mine.content[0].text
        for tool, args in [
            ("get", {"memory_id": bob.id}),
            ("update", {"memory_id": bob.id, "content": "pwned"}),
            ("forget", {"memory_id": bob.id}),
            ("history", {"memory_id": bob.id}),
            ("feedback", {"memory_id": bob.id, "feedback": "VERY_NEGATIVE"}),
            ("list", {"user_id": "bob"}),
            ("forget", {"key": "k", "user_id": "bob"}),
        ]:
            answer = await client.call_tool(tool, args)
            assert answer.is_error and SECRET not in answer.content[0].text, (tool, answer)
        listed = await client.call_tool("entities", {})
        assert "bob" not in listed.content[0].text
        # every tool the server lists (a tool added later too), with arguments aimed at bob
        before = vault_files(service.settings.vault)
        tools = (await client.list_tools()).tools
        assert len(tools) >= 11  # search, context, add, get, list, update, forget, ...
        for tool in tools:
            args = aimed_at_bob(tool.input_schema, bob.id)
            answer = await client.call_tool(tool.name, args)
            text = " ".join(getattr(c, "text", "") for c in answer.content)
            assert SECRET not in text, (tool.name, args, text[:300])
            if args.keys() & {"user_id", "memory_id"}:  # refused: 403 or "no such memory"
                assert answer.is_error, (tool.name, args, text[:300])
        changed = {k for k, v in vault_files(service.settings.vault).items() if before.get(k) != v}
        assert not any("users/bob" in k for k in changed), changed
        unknown = await client.call_tool("search", {"query": "x", "user": "bob"})
        assert unknown.is_error and "unknown argument(s): user" in unknown.content[0].text
        deep: Any = "x"
        for _ in range(40):
            deep = {"k": deep}
        nested = await client.call_tool("add", {"content": "x", "metadata": deep})
        assert nested.is_error and "nested deeper than 32" in nested.content[0].text
    assert (await service.memories.get(bob.id)).text == f"{SECRET} bob's plan"


async def test_idempotency_keys_belong_to_their_caller(service: MemoryService) -> None:
    """alice and bob post with the same key: each gets a memory of their own (the issue saw
    bob answered with alice's); each one's retry returns its own first memory."""
    tokens = {"alice-t": {"user_id": "alice"}, "bob-t": {"user_id": "bob"}}
    async with (
        server(service, token="admin", scoped=tokens) as url,
        httpx.AsyncClient(base_url=url) as http,
    ):
        if True:  # keeps the calls below at one indentation

            async def post(token: str, text: str, path: str = "/api/memories") -> list[str]:
                headers = {"Authorization": f"Bearer {token}", "Idempotency-Key": "order-42"}
                body = {"content": text} if path.startswith("/api") else {"messages": text}
                resp = await http.post(path, json=body, headers=headers)
                assert resp.status_code == 200, resp.text
                return [r["id"] for r in resp.json()["results"]]

            alices = await post("alice-t", "alice ordered tea")
            bobs = await post("bob-t", "bob ordered coffee")
            admins = await post("admin", "the admin's own order")
            assert len({*alices, *bobs, *admins}) == 3
            assert await post("alice-t", "alice ordered tea") == alices
            assert await post("bob-t", "bob ordered coffee", "/v1/memories/") == bobs
            assert await post("admin", "the admin's own order", "/v1/memories/") == admins
            other = await http.post("/api/memories", json={"content": "again"},
                                    headers={"Authorization": "Bearer admin",
                                             "Idempotency-Key": "order-42"})  # fmt: skip
            assert other.status_code == 422, other.text  # the key, with another request
    assert [r.text for r in await service.memories.get_all(user_id="bob")] == ["bob ordered coffee"]
    assert await service.memories.count() == 3


def test_caller_identity_is_a_digest_never_the_token() -> None:
    caller = Caller.of_token("s3cret-token", {"user_id": "alice"})
    assert "s3cret" not in caller.identity and caller.bound == {"user_id": "alice"}
    assert caller.identity == "token:" + hashlib.sha256(b"s3cret-token").hexdigest()[:16]
    assert Caller.of_token("other").identity != caller.identity


def test_no_secret_in_the_status_document_or_a_readable_state_file(
    vault: Path, tmp_path: Path
) -> None:
    """A password in a MEMCORE_* variable and the scoped tokens (read from a file and from the
    environment, not the command line) show nowhere: not in daemon.json (0600, in a 0700
    folder), not in /api/status, to a scoped token or to the full one."""
    write(vault, "MEMORY.md", "# M\n\nDiveAdstra uses DX12.\n")
    tokens = tmp_path / "tokens"
    tokens.write_text("# alice's agent\nalice-file-t=user_id:alice\n\n")
    port = free_port()
    env = {
        **os.environ, "MEMCORE_EMBEDDER_PROVIDER": "static", "MEMCORE_TOKEN": "admin-t",
        "MEMCORE_OLLAMA_HOST": "http://me:hunter2@127.0.0.1:9",
        "MEMCORE_SCOPED_TOKENS": "bob-env-t=user_id:bob",
    }  # fmt: skip
    cmd = [sys.executable, "-m", "memcore", "--vault", str(vault), "serve", "--port", str(port),
           "--scoped-token-file", str(tokens)]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        assert wait_ready(f"http://127.0.0.1:{port}")
        state = vault / ".memcore"
        assert stat.S_IMODE(state.stat().st_mode) == 0o700
        status_file = state / "daemon.json"
        for _ in range(100):
            if status_file.exists():
                break
            asyncio.run(asyncio.sleep(0.05))
        assert stat.S_IMODE(status_file.stat().st_mode) == 0o600
        for name in ("daemon.json", "index.db", "daemon.lock"):
            assert stat.S_IMODE((state / name).stat().st_mode) & 0o077 == 0, name
        published = status_file.read_text()
        for secret in ("hunter2", "admin-t", "alice-file-t", "bob-env-t"):
            assert secret not in published
        for token in ("admin-t", "alice-file-t", "bob-env-t"):
            got = httpx.get(
                f"http://127.0.0.1:{port}/api/status",
                headers={"Authorization": f"Bearer {token}"},
            )
            assert got.status_code == 200, got.text
            for secret in ("hunter2", "admin-t", "alice-file-t", "bob-env-t"):
                assert secret not in got.text
        mine = httpx.post(
            f"http://127.0.0.1:{port}/api/memories",
            json={"content": "from the file's token"},
            headers={"Authorization": "Bearer alice-file-t"},
        )
        assert mine.json()["results"][0]["user_id"] == "alice"
        assert json.loads(published)["config"]["digest"]
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
    assert "--scoped-token is visible" not in err  # none was given on the command line


def test_a_scoped_token_on_the_command_line_is_warned_of(vault: Path) -> None:
    port = free_port()
    env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": "static"}
    cmd = [sys.executable, "-m", "memcore", "--vault", str(vault), "serve", "--port", str(port),
           "--scoped-token", "t=user_id:alice", "--scoped-token", "bad"]  # fmt: skip
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2
    assert "warning: --scoped-token is visible to every user" in done.stderr
    assert "got a spec without '='" in done.stderr and "bad" not in done.stderr.split("got")[-1]


@pytest.mark.parametrize("token", ["alice-t", "bot-t"])
async def test_web_pages_under_a_scoped_token_refuse_other_scopes_in_words(
    service: MemoryService, token: str
) -> None:
    """Issue 41 saw a 500 with a traceback for /?q=x&user=bob and /conversations/%2e%2e."""
    await service.memories.add(f"{SECRET} plan", user_id="bob")
    async with server(service, token="admin", scoped=TOKENS) as url:
        headers = {"Authorization": f"Bearer {token}"}
        async with httpx.AsyncClient(base_url=url, headers=headers) as http:
            resp = await http.get("/", params={"q": "plan", "user": "bob"})
            if token == "alice-t":
                assert resp.status_code == 403 and "bound to user_id=alice" in resp.text
            else:  # helper's token reads bob's memories with helper only: none
                assert resp.status_code == 200 and SECRET not in resp.text
            for path in ("/conversations/%2e%2e", "/conversations/..%2fx", "/conversations/r"):
                resp = await http.get(path)
                assert resp.status_code in (403, 404) and "Traceback" not in resp.text
