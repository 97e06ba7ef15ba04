"""One read contract on every front: the same (query, filters, limit) gives the same ids, in
the same order, with the same scores through the Python API, the CLI, native HTTP, Mem0 REST
(the official ``mem0ai`` client) and MCP (the ``mcp`` SDK client), against one vault.

Also: a search's first k results are the first k of any longer search, with the same scores,
and every score is in [0, 1]."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memcore.compose import open_service
from memcore.core.settings import load_settings
from memcore.service import MemoryService
from tests.conftest import REPO
from tests.support import write
from tests.test_cli import cli
from tests.test_http import server
from tests.test_mcp import payload

# (query, filters, limit); filters use the names every front shares
CASES: list[tuple[str, dict[str, Any], int]] = [
    ("render engine", {}, 5),
    ("render engine", {}, 1),
    ("DX12 renderer decision", {}, 10),
    ("editor theme", {"user_id": "alice"}, 10),
    ("editor theme", {"user_id": "bob"}, 10),
    ("editor theme", {"user_id": "alice", "include_shared": True}, 10),
    ("editor theme", {"agent_id": "bot"}, 10),
    ("editor theme", {"user_id": "alice", "agent_id": "bot"}, 5),
    ("editor theme", {"user_id": "alice", "category": "prefs"}, 5),
    ("what does alice like to drink", {"user_id": "alice"}, 3),
    ("travel seat preference", {"user_id": "alice", "metadata": {"topic": "travel"}}, 5),
    ("travel seat preference", {"metadata": {"topic": "travel"}}, 5),
    ("deploy schedule", {"run_id": "sprint-7"}, 5),
    ("deploy schedule", {"run_id": "sprint-7", "include_shared": True}, 5),
    ("performance review", {"tag": "performance"}, 5),
    ("performance review", {"path": "memory/"}, 5),
    ("release", {"since": "2024-06-01"}, 5),
    ("release", {"until": "2024-05-31"}, 5),
    ("release", {"since": "2024-05-01", "until": "2024-06-30"}, 3),
    ("graphics API", {"threshold": 0.3}, 10),
    ("graphics API", {"threshold": 0.99}, 10),
    ("zxqv plorf wimble", {}, 5),
    ("team lunch", {"user_id": "carol"}, 5),
    ("", {"tag": "diveadstra"}, 10),
]
SCOPE = ("user_id", "agent_id", "run_id")


@pytest.fixture
async def parity_vault(tmp_path: Path) -> AsyncIterator[tuple[Path, MemoryService]]:
    vault = tmp_path / "vault"
    shutil.copytree(REPO / "sample_vault", vault, ignore=shutil.ignore_patterns(".memcore"))
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    write(vault, "memory/users/alice/notes.md", "# Alice\n\nAlice's editor theme is nord.\n")
    write(vault, "memory/users/bob/notes.md", "# Bob\n\nBob's editor theme is gruvbox.\n")
    write(vault, "memory/agents/bot/notes.md", "# Bot\n\nThe bot's editor theme is zenburn.\n")
    write(vault, "memory/runs/sprint-7/plan.md", "# Sprint 7\n\nWe deploy on Thursdays.\n")
    settings = load_settings(vault)
    async with open_service(settings) as svc:
        await svc.index()
        m = svc.memories
        await m.add("editor theme: dark", user_id="alice", category="prefs")
        await m.add("editor theme: light", user_id="bob", category="prefs")
        await m.add("editor theme: high contrast", user_id="alice", agent_id="bot")
        await m.add("editor theme: sepia", agent_id="bot")
        await m.add("Alice drinks green tea every morning", user_id="alice")
        await m.add("Alice prefers window seats", user_id="alice", metadata={"topic": "travel"})
        await m.add("Bob prefers aisle seats", user_id="bob", metadata={"topic": "travel"})
        await m.add("Deploys are frozen during the demo", run_id="sprint-7")
        await m.add("The office deploy schedule is weekly")
        yield vault, svc


def python_kwargs(filters: dict[str, Any], limit: int) -> dict[str, Any]:
    out = {k: v for k, v in filters.items() if k not in ("metadata", "threshold")}
    if "metadata" in filters:
        out["filters"] = filters["metadata"]
    return {**out, "limit": limit, "threshold": filters.get("threshold")}


def cli_args(query: str, filters: dict[str, Any], limit: int) -> list[str]:
    flags = {"user_id": "--user", "agent_id": "--agent", "run_id": "--run",
             "category": "--category", "tag": "--tag", "path": "--path", "since": "--since",
             "until": "--until", "threshold": "--min-score"}  # fmt: skip
    args = ["search", query, "--json", "-n", str(limit)]
    for key, value in filters.items():
        if key == "include_shared":
            args.append("--include-shared")
        elif key == "metadata":
            args += [a for k, v in value.items() for a in ("--meta", f"{k}={v}")]
        else:
            args += [flags[key], str(value)]
    return args


def native_body(query: str, filters: dict[str, Any], limit: int) -> dict[str, Any]:
    body = {k: v for k, v in filters.items() if k not in ("metadata",)}
    if "metadata" in filters:
        body["filters"] = filters["metadata"]
    return {"query": query, "limit": limit, **body}


def mem0_kwargs(filters: dict[str, Any], limit: int) -> dict[str, Any]:
    f = {k: v for k, v in filters.items() if k not in ("metadata", "threshold")}
    f.update(filters.get("metadata", {}))
    # notes too, and no floor unless the case sets one: what the other fronts answer
    out: dict[str, Any] = {"top_k": limit, "filters": f or None, "include_notes": True}
    out["threshold"] = filters.get("threshold", 0.0)
    return out


def ranking(rows: list[dict[str, Any]]) -> list[tuple[str, float]]:
    return [(str(r["id"]), float(r["score"])) for r in rows]


async def test_every_front_answers_the_same(
    parity_vault: tuple[Path, MemoryService], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEM0_TELEMETRY", "false")  # read when mem0 is first imported
    from mem0 import MemoryClient

    vault, svc = parity_vault
    answers: dict[str, list[list[tuple[str, float]]]] = {}
    answers["python"] = [
        ranking([r.to_dict() for r in await svc.memories.search(q, **python_kwargs(f, n))])
        for q, f, n in CASES
    ]
    cli_rows = []
    for q, f, n in CASES:
        code, out, err = await asyncio.to_thread(cli, "--vault", str(vault), *cli_args(q, f, n))
        assert code == 0, (q, f, err)
        cli_rows.append(ranking(json.loads(out)["results"]))
    answers["cli"] = cli_rows
    auth = httpx2.AsyncClient(headers={"Authorization": "Bearer t"}, timeout=30)
    async with (
        server(svc, token="t") as url,
        httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer t"}) as http,
        auth,
        Client(streamable_http_client(url + "/mcp", http_client=auth)) as mcp,
    ):
        native = []
        for q, f, n in CASES:
            resp = await http.post("/api/memory/search", json=native_body(q, f, n))
            assert resp.status_code == 200, resp.text
            native.append(ranking(resp.json()["results"]))
        answers["native"] = native

        def mem0_all() -> list[list[tuple[str, float]]]:
            client = MemoryClient(api_key="t", host=url)
            try:
                return [
                    ranking(client.search(q, **mem0_kwargs(f, n))["results"])
                    for q, f, n in CASES
                    if q  # Mem0's client refuses an empty query
                ]
            finally:
                client.client.close()

        answers["mem0"] = await asyncio.to_thread(mem0_all)
        tools = []
        for q, f, n in CASES:
            args = python_kwargs(f, n)
            args = {k: v for k, v in args.items() if v is not None}
            found = payload(await mcp.call_tool("search", {"query": q, **args}))
            tools.append(ranking(found["results"]))
        answers["mcp"] = tools
    expected = answers["python"]
    for front, got in answers.items():
        want = [e for (q, _, _), e in zip(CASES, expected, strict=True) if q or front != "mem0"]
        assert got == want, front
    # the table means something: scopes hold, thresholds cut, the tag lists, nonsense is weak
    by_case = dict(zip(range(len(CASES)), expected, strict=True))
    records = {r.id: r for r in await svc.memories.get_all(limit=1000)}
    for n, (_, f, _) in enumerate(CASES):
        for mid, score in by_case[n]:
            assert 0.0 <= score <= 1.0
            record = records.get(mid)
            if f.get("user_id") and not f.get("include_shared"):
                if record is not None:
                    assert record.user_id == f["user_id"], (n, mid)
                else:
                    assert mid.startswith(f"note:memory/users/{f['user_id']}/"), (n, mid)
            if "threshold" in f:
                assert score >= f["threshold"]
    assert by_case[4] and all("alice" not in mid for mid, _ in by_case[4])
    assert by_case[20] == [] and by_case[19]
    assert by_case[22] == []  # carol has nothing
    assert by_case[23] and all(score == 1.0 for _, score in by_case[23])


async def test_first_results_are_the_same_at_every_limit(
    parity_vault: tuple[Path, MemoryService],
) -> None:
    """Limit-invariant ranking: at limit k the first k of limit K, with identical scores."""
    _, svc = parity_vault
    queries = ["render engine", "editor theme", "deploy schedule", "performance review",
               "release notes", "what does alice like", "graphics API", "DX12 default",
               "window seats", "crash fix", "team", "sprint plan"]  # fmt: skip
    for q in queries:
        full = (await svc.search(q, limit=10)).hits
        for k in (1, 3):
            assert (await svc.search(q, limit=k)).hits == full[:k], (q, k)
        # past the candidate pool the first results stay the same too
        deep = (await svc.search(q, limit=1000)).hits
        assert deep[:10] == full and all(a.score >= b.score for a, b in itertools.pairwise(deep))
        assert all(0 <= h.score <= 1 for h in deep)
    # a pool smaller than the limit: the pool's results first, then deeper ones
    small = dataclasses.replace(
        svc.settings, search=dataclasses.replace(svc.settings.search, candidates=4)
    )
    async with open_service(small) as shallow:
        for q in queries:
            pooled = (await shallow.search(q, limit=4)).hits
            longer = (await shallow.search(q, limit=12)).hits
            assert longer[:4] == pooled and (await shallow.search(q, limit=8)).hits == longer[:8]
            assert all(a.score >= b.score for a, b in itertools.pairwise(longer))


async def test_context_is_empty_for_nonsense_and_scoped(
    parity_vault: tuple[Path, MemoryService],
) -> None:
    vault, svc = parity_vault
    assert await svc.context("zxqv plorf wimble") == ""
    run = lambda *a: asyncio.to_thread(cli, "--vault", str(vault), *a)  # noqa: E731
    code, out, err = await run("context", "zxqv plorf wimble")
    assert code == 0 and out == "" and "no memories relevant enough" in err
    code, out, _ = await run("context", "editor theme", "--user", "bob", "--min-score", "0")
    assert code == 0 and "light" in out and "gruvbox" in out
    assert "dark" not in out and "nord" not in out and "solarized" not in out
    await svc.conversations.save("s-1", [{"role": "user", "content": "hello"}] * 3)
    code, out, _ = await run("count", "--user", "alice", "--json")
    assert code == 0 and json.loads(out) == {"count": 4, "user_id": "alice"}
    code, out, _ = await run("count", "--json")
    assert code == 0 and json.loads(out) == {"count": 9}  # turns are not memories
    code, out, _ = await run("count", "--category", "conversation", "--json")
    assert json.loads(out)["count"] == 3


async def test_entities_and_feedback_on_every_front(
    parity_vault: tuple[Path, MemoryService], monkeypatch: pytest.MonkeyPatch
) -> None:
    """users() and feedback() exist on all five fronts: the same entities everywhere, and a
    rating on any front is one more FSRS review of the memory, seen by every other."""
    monkeypatch.setenv("MEM0_TELEMETRY", "false")
    from mem0 import MemoryClient

    vault, svc = parity_vault
    m = svc.memories
    target = (await m.get_all(user_id="alice", category="prefs"))[0].id
    python = sorted((e.kind, e.name, e.memories) for e in await m.entities())
    assert ("user", "alice", 4) in python and ("agent", "bot", 2) in python
    seen: dict[str, list[tuple[str, str, int]]] = {}
    code, out, err = await asyncio.to_thread(cli, "--vault", str(vault), "entities", "--json")
    assert code == 0, err
    seen["cli"] = sorted((e["type"], e["name"], e["total_memories"]) for e in json.loads(out))
    code, out, err = await asyncio.to_thread(
        cli, "--vault", str(vault), "feedback", target, "positive", "--json"
    )
    assert code == 0, err
    reviews = [json.loads(out)[0]["strength"]["reviews"]]
    auth = httpx2.AsyncClient(headers={"Authorization": "Bearer t"}, timeout=30)
    async with (
        server(svc, token="t") as url,
        httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer t"}) as http,
        auth,
        Client(streamable_http_client(url + "/mcp", http_client=auth)) as mcp,
    ):
        rows = (await http.get("/api/entities")).json()["results"]
        seen["native"] = sorted((e["type"], e["name"], e["total_memories"]) for e in rows)
        rated = await http.post(f"/api/memories/{target}/feedback", json={"feedback": "NEGATIVE"})
        reviews.append(rated.json()["strength"]["reviews"])
        rows = payload(await mcp.call_tool("entities", {}))
        seen["mcp"] = sorted((e["type"], e["name"], e["total_memories"]) for e in rows)
        rated = payload(await mcp.call_tool("feedback", {"memory_id": target,
                                                         "feedback": "POSITIVE"}))  # fmt: skip
        reviews.append(rated["strength"]["reviews"])

        def mem0() -> tuple[list[tuple[str, str, int]], int]:
            client = MemoryClient(api_key="t", host=url)
            try:
                rows = client.users()["results"]
                rated = client.feedback(target, "POSITIVE")
                return sorted((e["type"], e["name"], e["total_memories"]) for e in rows), int(
                    rated["strength"]["reviews"]
                )
            finally:
                client.client.close()

        seen["mem0"], last = await asyncio.to_thread(mem0)
        reviews.append(last)
    assert all(found == python for found in seen.values()), seen
    assert reviews == [2, 3, 4, 5]  # each front's rating is one more review of the one memory
    bad = await asyncio.to_thread(cli, "--vault", str(vault), "feedback", target, "meh")
    assert bad[0] == 2
