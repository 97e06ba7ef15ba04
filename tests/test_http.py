"""The HTTP API on a real loopback server: memcore's routes with httpx, Mem0's with mem0ai."""

from __future__ import annotations

import asyncio
import errno
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from memcore.core.errors import ConfigError, DaemonError
from memcore.core.settings import Settings
from memcore.fronts.daemon import Daemon
from memcore.fronts.daemon_state import vault_lock
from memcore.fronts.http.common import MAX_TRANSCRIPT_BODY
from memcore.fronts.serve import serve
from memcore.service import MemoryService
from tests.conftest import REPO
from tests.support import error_message, free_port, write


async def caught_up(service: MemoryService) -> None:
    while service.readiness.phase != "ready":  # noqa: ASYNC110 - readiness has no event
        await asyncio.sleep(0.01)


@asynccontextmanager
async def server(
    service: MemoryService,
    token: str | None = None,
    scoped: dict[str, dict[str, str]] | None = None,
) -> AsyncIterator[str]:
    port = free_port()
    stop, started = asyncio.Event(), asyncio.Event()
    task = asyncio.create_task(
        serve(service, "127.0.0.1", port, token, stop, started=started, scoped=scoped)
    )
    await asyncio.wait_for(started.wait(), 10)
    await asyncio.wait_for(caught_up(service), 60)  # else a search may say "still starting"
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop.set()
        await asyncio.wait_for(task, 10)


@pytest.fixture(autouse=True)
def no_mem0_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEM0_TELEMETRY", "false")


async def test_native_search_context_status_and_memories(
    vault: Path, service: MemoryService
) -> None:
    write(vault, "MEMORY.md", "# Engine\n\nDiveAdstra uses DX12 by default. #engine\n")
    await service.index()
    async with server(service) as url, httpx.AsyncClient(base_url=url) as http:
        added = (await http.post("/api/memories", json={"content": "Alice likes tea",
                                                        "user_id": "alice"})).json()  # fmt: skip
        mid = added["results"][0]["id"]
        found = (await http.post("/api/memory/search", json={"query": "DX12 default"})).json()
        assert found["results"][0]["path"] == "MEMORY.md" and found["mode"] == "hybrid"
        assert found["results"][0]["memory_id"] is None
        ask = {"query": "tea", "user_id": "alice"}
        mine = (await http.post("/api/memory/search", json=ask)).json()
        assert [r["memory_id"] for r in mine["results"]] == [mid]
        ask = {"query": "DX12", "min_score": 0}
        block = (await http.post("/api/memory/context", json=ask)).json()
        assert block["context"].startswith("## Relevant Memories")
        assert (await http.get("/api/status")).json()["files"] == 2
        schema = (await http.get("/openapi.json")).json()
        assert schema["openapi"] == "3.1.0" and "post" in schema["paths"]["/api/memory/search"]
        assert "put" in schema["paths"]["/v1/memories/{memory_id}/"]
        upd = await http.put(f"/api/memories/{mid}", json={"content": "Alice likes green tea"})
        assert upd.json()["memory"] == "Alice likes green tea"
        hist = (await http.get(f"/api/memories/{mid}/history")).json()["results"]
        assert [e["event"] for e in hist] == ["ADD", "UPDATE"]
        listed = (await http.get("/api/memories", params={"user_id": "alice"})).json()
        assert [r["id"] for r in listed["results"]] == [mid]
        convo = [{"role": "user", "content": "hi"}]
        assert (
            await http.put("/api/conversations/s1", json={"messages": convo})
        ).status_code == 200
        assert (await http.get("/api/conversations/s1")).json()["messages"] == convo
        assert (await http.delete(f"/api/memories/{mid}")).status_code == 200
        assert (await http.get(f"/api/memories/{mid}")).status_code == 404


JSON = {"Content-Type": "application/json"}


@pytest.mark.parametrize(
    ("method", "path", "kwargs", "status", "message"),
    [
        ("POST", "/api/memory/search", {"content": b"{not json", "headers": JSON}, 400, "not JSON"),
        ("POST", "/api/memory/search", {"json": {"query": "x", "bogus": 1}}, 400, "unknown field"),
        ("POST", "/api/memory/search", {"json": {"limit": 3}}, 400, "missing field(s): query"),
        ("POST", "/api/memory/search", {"json": {"query": "x", "limit": "3"}}, 400,
         "limit: Input should be a valid integer"),
        # what issue 26 found answered with a 500 or a dropped connection
        ("POST", "/api/memory/search", {"content": b"[" * 100_000 + b"]" * 100_000,
                                        "headers": JSON}, 400, "nested deeper"),
        ("POST", "/api/memory/search", {"content": b'{"query": ' + b"[" * 40 + b"]" * 40 + b"}",
                                        "headers": JSON}, 400, "nested deeper"),
        ("POST", "/api/memory/search", {"content": b'{"query": "x", "threshold": NaN}',
                                        "headers": JSON}, 400, "NaN is not a JSON number"),
        ("POST", "/api/memory/search", {"content": b'{"query": "x \\ud800"}', "headers": JSON},
         400, "lone surrogate"),
        ("POST", "/api/memory/search", {"json": {"query": "x", "limit": 1e30}}, 400,
         "limit: Input should be a valid integer"),
        ("POST", "/api/memory/search", {"json": {"query": "x", "limit": 0}}, 400,
         "limit: Input should be greater than or equal to 1"),
        ("POST", "/api/memory/search", {"json": {"query_vector": [1, 2, 3]}}, 400, "dimension"),
        ("POST", "/api/memory/search", {"json": {"query": "x", "since": "soon"}}, 400,
         "since must be a date"),
        ("POST", "/api/memory/search", {"json": {"query": "x", "since": "2024-05-31",
                                                 "until": "2024-01-01"}}, 400, "after"),
        ("GET", "/api/memories?offset=1e30", {}, 400, "offset: Input should be a valid integer"),
        ("GET", "/api/memories?offset=100000000000000000000000", {}, 400, "offset"),
        ("GET", "/api/memories?limit=-1", {}, 400, "limit"),
        ("GET", "/api/conversations/s1?limit=99999999999999999999999", {}, 400, "limit"),
        ("POST", "/v3/memories/search/", {"json": {"query": "x", "filters": {"AND": 5}}}, 400,
         "filters.AND must be a list"),
        ("POST", "/v3/memories/search/", {"json": {"query": "x", "filters": {"OR": [
            {"user_id": {"regex": "a.*"}}]}}}, 400, "filter user_id: unsupported 'regex'"),
        ("POST", "/v3/memories/search/", {"json": {"query": "x", "filters": {"topic": {}}}},
         400, "filter topic has no operator"),
        ("POST", "/v3/memories/", {"json": {"page": 1e30}}, 400, "page"),
        ("POST", "/v3/memories/?page=100000000000000000000", {"json": {}}, 400, "page"),
        ("POST", "/v3/memories/add/", {"content": b'{"messages": "a \\udfff b", "user_id": "u"}',
                                       "headers": JSON}, 400, "lone surrogate"),
        ("DELETE", "/api/memory/search", {}, 405, "does not take DELETE"),
        ("POST", "/api/memories", {"json": {"content": "x", "user_id": "a\x01"}}, 400,
         "holds a control character"),
        ("POST", "/api/memories", {"json": {"content": "x", "category": "../etc"}}, 400,
         "not a valid name"),
        ("POST", "/api/memories", {"json": {"content": ""}}, 400, "empty"),
        ("POST", "/api/memories", {"content": b"{" + b" " * 2_100_000 + b"}", "headers": JSON},
         413, "over"),
        ("GET", "/api/memories/..%2F..%2Fetc", {}, 404, "no route"),
        ("GET", "/api/memories/m-..", {}, 404, "no memory"),
        ("GET", "/nowhere", {}, 404, "no route"),
    ],
)  # fmt: skip
async def test_bad_requests_are_one_line_4xx_and_change_nothing(
    vault: Path,
    service: MemoryService,
    method: str,
    path: str,
    kwargs: dict[str, object],
    status: int,
    message: str,
) -> None:
    async with server(service) as url, httpx.AsyncClient(base_url=url) as http:
        resp = await http.request(method, path, **kwargs)  # type: ignore[arg-type]
        assert resp.status_code == status, resp.text
        assert message in error_message(resp) and "\n" not in error_message(resp)
        fts = await http.post("/api/memory/search", json={"query": 'AND( "x* NEAR'})
        assert fts.status_code == 200  # and the server keeps serving
    assert await service.memories.count() == 0


async def test_a_whole_transcript_may_be_larger_than_other_bodies_up_to_its_own_limit(
    vault: Path, service: MemoryService
) -> None:
    """PUT /api/conversations takes a transcript past the 2 MB limit of other bodies (5,000
    tool-calling turns, ~2.5 MB) and answers 413 past its own 64 MB, streamed or declared."""
    call = {"id": "c", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    talk = [
        {"role": "user", "content": f"question {n}: " + "why " * 200}
        if n % 2 else {"role": "assistant", "content": None, "tool_calls": [call]}
        for n in range(5000)
    ]  # fmt: skip
    body = json.dumps({"messages": talk}).encode()
    assert 2_000_000 < len(body) < MAX_TRANSCRIPT_BODY
    async with server(service) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
        saved = await http.put("/api/conversations/big", content=body, headers=JSON)
        assert saved.status_code == 200, saved.text
        assert saved.json() == {"saved": 5000}
        back = await http.get("/api/conversations/big", params={"limit": 2})
        assert back.json()["messages"] == talk[-2:]
        # all of it, streamed a page file at a time; and in pages, following next to the end
        whole = await http.get("/api/conversations/big")
        assert whole.status_code == 200 and whole.json() == {"messages": talk}
        seen, link = [], "/api/conversations/big?page=1&page_size=1500"
        while link:
            got = (await http.get(link)).json()
            assert got["count"] == 5000
            seen += got["messages"]
            link = got["next"]
        assert seen == talk  # each message once, in order, across the 1,000-turn page files
        assert (await http.get(link or "/api/conversations/big?page=5&page_size=1500")).json()[
            "messages"] == []  # fmt: skip
        both = await http.get("/api/conversations/big", params={"page": 1, "limit": 2})
        assert both.status_code == 400 and "not both" in error_message(both)
        # declared too large: refused before a byte of the body is read
        host, port = url.removeprefix("http://").split(":")
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(
            f"PUT /api/conversations/big2 HTTP/1.1\r\nHost: {host}\r\n"
            f"Content-Type: application/json\r\n"
            f"Content-Length: {MAX_TRANSCRIPT_BODY + 1}\r\n\r\n".encode()
        )
        answer = (await reader.read(4096)).decode()
        writer.close()
        assert answer.startswith("HTTP/1.1 413") and "64,000,000" in answer

        async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted as it comes
            yield b'{"messages": ['
            for _ in range(MAX_TRANSCRIPT_BODY // 1_000_000 + 1):
                yield b" " * 1_000_000

        streamed = await http.put("/api/conversations/big3", content=chunks(), headers=JSON)
        assert streamed.status_code == 413 and "over" in error_message(streamed)
        other = await http.post("/api/memories", content=body, headers=JSON)
        assert other.status_code == 413  # the other routes keep their 2 MB
    assert not (vault / "memory/runs/big2").exists() and not (vault / "memory/runs/big3").exists()


async def test_tokens_off_loopback_and_wrong_tokens(service: MemoryService) -> None:
    with pytest.raises(ConfigError, match="needs a token"):
        await serve(service, "0.0.0.0", free_port(), None, asyncio.Event())
    async with server(service, token="s3cret") as url, httpx.AsyncClient(base_url=url) as http:
        assert (await http.get("/api/status")).status_code == 401
        wrong = await http.get("/api/status", headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401 and wrong.json()["error"] == {
            "code": "unauthorized",
            "message": "missing or wrong token",
        }
        ok = await http.get("/api/status", headers={"Authorization": "Bearer s3cret"})
        assert ok.status_code == 200


async def test_the_official_mem0_client_works_against_memcore(service: MemoryService) -> None:
    from mem0 import MemoryClient

    async with server(service, token="m0-key") as url:

        def session() -> dict[str, object]:
            client = MemoryClient(api_key="m0-key", host=url)
            out: dict[str, object] = {}
            out["add"] = client.add([{"role": "user", "content": "I love hiking in the Alps"}],
                                    user_id="alice", metadata={"topic": "sport"})  # fmt: skip
            client.add("I prefer window seats", user_id="alice", metadata={"topic": "travel"})
            client.add("Bob plays chess", user_id="bob")
            out["search"] = client.search("hiking", filters={"user_id": "alice"})
            out["meta"] = client.get_all(filters={"AND": [{"user_id": "alice"},
                                                          {"topic": "travel"}]})  # fmt: skip
            out["all"] = client.get_all(filters={"user_id": "alice"})
            first = out["add"]["results"][0]["id"]  # type: ignore[index]
            out["get"] = client.get(first)
            client.update(first, text="I love hiking in the Dolomites")
            out["history"] = client.history(first)
            client.batch_update([{"memory_id": first, "text": "I love hiking anywhere"}])
            out["after"] = client.get(first)
            client.delete(first)
            out["bob_left"] = client.get_all(filters={"user_id": "bob"})
            client.delete_all(user_id="alice")
            out["alice_left"] = client.get_all(filters={"user_id": "alice"})
            client.client.close()
            return out

        out = await asyncio.to_thread(session)
    results = out["search"]["results"]  # type: ignore[index]
    assert results[0]["memory"] == "I love hiking in the Alps"
    assert {r["user_id"] for r in results} == {"alice"}  # type: ignore[union-attr]
    assert [r["memory"] for r in out["meta"]["results"]] == ["I prefer window seats"]  # type: ignore[index]
    assert out["all"]["count"] == 2  # type: ignore[index]
    assert out["get"]["memory"] == "I love hiking in the Alps"  # type: ignore[index]
    assert [e["event"] for e in out["history"]] == ["ADD", "UPDATE"]  # type: ignore[attr-defined]
    assert out["after"]["memory"] == "I love hiking anywhere"  # type: ignore[index]
    assert out["alice_left"]["results"] == []  # type: ignore[index]
    assert [r["memory"] for r in out["bob_left"]["results"]] == ["Bob plays chess"]  # type: ignore[index]


CLIENT_PROCESS = """
import sys, httpx
url, n = sys.argv[1], int(sys.argv[2])
with httpx.Client(base_url=url, timeout=30) as http:
    for i in range(n):
        r = http.post("/api/memories", json={"content": f"remote note {i}", "user_id": "team"})
        r.raise_for_status()
        http.post("/api/memory/search", json={"query": "remote note"}).raise_for_status()
"""


async def test_many_clients_and_a_second_process_at_once(service: MemoryService) -> None:
    async with server(service) as url, httpx.AsyncClient(base_url=url, timeout=30) as http:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CLIENT_PROCESS, url, "20", cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)}, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip

        async def client(n: int) -> None:
            for i in range(10):
                if i % 5 == 0:
                    note = {"content": f"local {n}.{i}", "user_id": "team"}
                    r = await http.post("/api/memories", json=note)
                else:
                    r = await http.post("/api/memory/search", json={"query": f"local {n}"})
                assert r.status_code == 200, r.text

        await asyncio.gather(*(client(n) for n in range(10)))
        _, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()[-500:]
        listed = await http.get("/api/memories", params={"user_id": "team", "limit": "500"})
        texts = {r["memory"] for r in listed.json()["results"]}
    assert {f"remote note {i}" for i in range(20)} <= texts
    assert {f"local {n}.{i}" for n in range(10) for i in (0, 5)} <= texts


async def test_cli_search_and_context_can_ask_a_running_server(
    vault: Path, service: MemoryService
) -> None:
    write(vault, "MEMORY.md", "# Engine\n\nDiveAdstra uses DX12 by default.\n")
    await service.index()
    async with server(service, token="t0k") as url:
        base = [sys.executable, "-m", "memcore", "--vault", str(vault)]

        async def run(*args: str) -> tuple[int, str, str]:
            proc = await asyncio.create_subprocess_exec(
                *base, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE
            )
            out, err = await proc.communicate()
            return proc.returncode or 0, out.decode(), err.decode()

        code, out, err = await run("search", "DX12", "--remote", url, "--token", "t0k", "--json")
        assert code == 0, err
        assert '"path": "MEMORY.md"' in out
        code, out, _ = await run("context", "DX12", "--remote", url, "--token", "t0k")
        assert out.startswith("## Relevant Memories")
        code, _, err = await run("search", "DX12", "--remote", url, "--token", "wrong")
        assert code == 2 and "missing or wrong token" in err and err.count("\n") == 1


async def test_a_scope_bound_token_never_sees_other_scopes(service: MemoryService) -> None:
    from mem0 import MemoryClient

    (bobs,) = await service.memories.add("Bob's secret plan", user_id="bob")
    await service.memories.add("a shared team note")
    tokens = {"alice-t": {"user_id": "alice"}}
    async with server(service, token="admin", scoped=tokens) as url:
        alice = httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer alice-t"})
        async with alice:
            added = await alice.post("/api/memories", json={"content": "Alice's plan"})
            assert added.json()["results"][0]["user_id"] == "alice"  # filled in
            asked = await alice.post("/api/memories", json={"content": "x", "user_id": "bob"})
            assert asked.status_code == 403 and "bound to user_id=alice" in error_message(asked)
            found = await alice.post("/api/memory/search", json={"query": "secret plan"})
            texts = [r["text"] for r in found.json()["results"]]
            assert "Alice's plan" in texts and "Bob's secret plan" not in texts
            assert (await alice.get(f"/api/memories/{bobs.id}")).status_code == 404
            assert (await alice.delete(f"/api/memories/{bobs.id}")).status_code == 404
            assert (await alice.get(f"/api/memories/{bobs.id}/history")).status_code == 404
            listed = (await alice.get("/api/memories")).json()["results"]
            assert [r["memory"] for r in listed] == ["Alice's plan"]

        def as_mem0() -> tuple[object, object]:
            client = MemoryClient(api_key="alice-t", host=url)
            out = client.search("plan", filters={"user_id": "*"})
            everything = client.get_all()
            client.delete_all()  # only alice's
            client.client.close()
            return out, everything

        out, everything = await asyncio.to_thread(as_mem0)
    assert {r["memory"] for r in out["results"]} == {"Alice's plan"}  # type: ignore[index]
    assert [r["memory"] for r in everything["results"]] == ["Alice's plan"]  # type: ignore[index]
    assert (await service.memories.get(bobs.id)).text == "Bob's secret plan"
    assert await service.memories.count(user_id="alice") == 0


async def test_serve_beside_a_running_watcher_says_to_use_no_watch(
    settings: Settings, service: MemoryService
) -> None:
    with vault_lock(settings.state_dir, settings.vault):
        stop = asyncio.Event()
        daemon = Daemon(settings, service, stop)
        with pytest.raises(DaemonError, match=r"already watching .*--no-watch"):
            await serve(service, "127.0.0.1", free_port(), None, stop, daemon)


async def test_an_idempotency_key_makes_a_retried_add_apply_once_on_both_apis(
    service: MemoryService,
) -> None:
    """A client whose connection dropped after the server wrote sends the add again with the
    same Idempotency-Key header: it gets the first answer and nothing is added twice."""
    async with server(service) as url, httpx.AsyncClient(base_url=url) as http:
        native = [
            await http.post(
                "/api/memories",
                json={"content": "Alice prefers dark mode", "user_id": "alice"},
                headers={"Idempotency-Key": "native-1"},
            )
            for _ in range(3)
        ]
        mem0 = [
            await http.post(
                "/v3/memories/add/",
                json={"messages": [{"role": "user", "content": "Bob likes tea"}], "user_id": "bob"},
                headers={"Idempotency-Key": "mem0-1"},
            )
            for _ in range(3)
        ]
    for answers in (native, mem0):
        assert all(r.status_code == 200 for r in answers), [r.text for r in answers]
        ids = [[m["id"] for m in r.json()["results"]] for r in answers]
        assert ids[0] and ids.count(ids[0]) == 3
    assert await service.memories.count(user_id="alice") == 1
    assert await service.memories.count(user_id="bob") == 1


async def test_a_reused_idempotency_key_with_another_request_is_a_422_on_every_route(
    service: MemoryService,
) -> None:
    """The same key with other content, another user or other metadata is another request:
    422 that says so, nothing written, the first memory untouched (IETF Idempotency-Key
    draft). The same request again still answers the first call's memories."""
    routes = {
        "native": ("/api/memories", lambda text, user, meta: {
            "content": text, "user_id": user, "metadata": meta}),
        "mem0": ("/v1/memories/", lambda text, user, meta: {
            "messages": [{"role": "user", "content": text}], "user_id": user, "metadata": meta}),
    }  # fmt: skip
    async with server(service) as url, httpx.AsyncClient(base_url=url) as http:
        for name, (path, body) in routes.items():
            key = {"Idempotency-Key": f"reused-{name}"}
            first = await http.post(path, json=body("Cara sings", "cara", {"a": 1}), headers=key)
            assert first.status_code == 200, first.text
            others = [body("Cara dances", "cara", {"a": 1}), body("Cara sings", "dan", {"a": 1}),
                      body("Cara sings", "cara", {"a": 2})]  # fmt: skip
            for other in others:
                got = await http.post(path, json=other, headers=key)
                assert got.status_code == 422, got.text
                assert (
                    "idempotency key was used with another request"
                    in got.json()["error"]["message"]
                )
            again = await http.post(path, json=body("Cara sings", "cara", {"a": 1}), headers=key)
            assert again.json()["results"][0]["id"] == first.json()["results"][0]["id"]
    kept = await service.memories.get_all(user_id="cara")
    assert [m.text for m in kept] == ["Cara sings"] * 2
    assert await service.memories.count(user_id="dan") == 0


@pytest.mark.parametrize(
    ("headers", "status", "message"),
    [
        ({"Host": "evil.example"}, 421, "does not answer for host 'evil.example'"),
        ({"Host": "evil.example:8765"}, 421, "does not answer for host"),
        ({"Host": "127.0.0.1:evil.example"}, 421, "does not answer for host"),
        ({"Host": "[::1]:evil"}, 421, "does not answer for host"),
        ({"Origin": "http://evil.example", **JSON}, 403, "cross-site request"),
        ({"Origin": "null", **JSON}, 403, "cross-site request"),
        ({"Content-Type": "text/plain"}, 415, "must be JSON"),
        ({"Content-Type": "application/x-www-form-urlencoded"}, 415, "must be JSON"),
    ],
)  # fmt: skip
async def test_loopback_is_not_trust_rebinding_and_cross_site_writes_are_refused(
    service: MemoryService, headers: dict[str, str], status: int, message: str
) -> None:
    """A web page the user visits can reach 127.0.0.1: by rebinding its own name to it (the
    Host header gives it away), or by a cross-site form or text/plain POST (a browser sends
    Origin, and cannot send JSON without asking first). Refused, and nothing is written."""
    body = b'{"content": "planted by a web page"}'
    async with server(service) as url, httpx.AsyncClient(base_url=url) as http:
        resp = await http.post("/api/memories", content=body, headers=headers)
        assert resp.status_code == status, resp.text
        assert message in error_message(resp) and "\n" not in error_message(resp)
        same_origin = {"Origin": url, **JSON}
        ok = await http.post("/api/memories", content=body, headers=same_origin)
        assert ok.status_code == 200, ok.text  # the server's own page may write
        assert (await http.get("/health", headers={"Host": "localhost:1"})).status_code == 200
    assert [r.text for r in await service.memories.get_all()] == ["planted by a web page"]


async def test_a_scoped_token_reaches_only_its_own_sessions_transcript(
    service: MemoryService,
) -> None:
    """An agent's or a user's token used to read, overwrite and delete any conversation."""
    await service.conversations.save("s-1", [{"role": "user", "content": "first session"}])
    await service.conversations.save("s-2", [{"role": "user", "content": "second session"}])
    tokens = {"agent-t": {"agent_id": "bot"}, "alice-t": {"user_id": "alice"},
              "run-t": {"run_id": "s-1"}}  # fmt: skip
    async with (
        server(service, token="admin", scoped=tokens) as url,
        httpx.AsyncClient(base_url=url) as http,
    ):

        async def call(token: str, method: str, session: str) -> httpx.Response:
            body = {"messages": [{"role": "user", "content": "overwritten"}]}
            return await http.request(
                method, f"/api/conversations/{session}",
                json=body if method == "PUT" else None,
                headers={"Authorization": f"Bearer {token}"},
            )  # fmt: skip

        for token in ("agent-t", "alice-t"):
            for method in ("GET", "PUT", "DELETE"):
                resp = await call(token, method, "s-1")
                assert resp.status_code == 403, (token, method, resp.text)
                assert "cannot reach session s-1" in error_message(resp)
        assert (await call("run-t", "GET", "s-2")).status_code == 403
        own = await call("run-t", "GET", "s-1")
        assert own.status_code == 200 and own.json()["messages"][0]["content"] == "first session"
        assert (await call("admin", "GET", "s-2")).status_code == 200
    assert (await service.conversations.load("s-1"))[0]["content"] == "first session"
    assert (await service.conversations.load("s-2"))[0]["content"] == "second session"


def test_the_socket_client_reads_whole_and_chunked_http_answers() -> None:
    from memcore.core.errors import MemcoreError
    from memcore.fronts.unix_http import _response

    whole = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\ncontent-type: application/json\r\n\r\n{}"
    assert _response(whole, "s") == (200, "OK", b"{}")
    chunked = (b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n"
               b"4\r\n{\"a\"\r\n3;x=1\r\n: 1\r\n1\r\n}\r\n0\r\n\r\n")  # fmt: skip
    assert _response(chunked, "s") == (404, "Not Found", b'{"a": 1}')
    with pytest.raises(MemcoreError, match="not HTTP"):
        _response(b"garbage", "s")


async def test_a_chunked_text_plain_write_is_refused_like_any_other(
    service: MemoryService,
) -> None:
    """Issue 41: with no Content-Length (chunked), the 415 check was skipped."""

    async def chunks() -> AsyncIterator[bytes]:
        yield b'{"content": "planted'
        yield b' by a chunked body"}'

    async with server(service) as url, httpx.AsyncClient(base_url=url) as http:
        plain = {"Content-Type": "text/plain"}
        resp = await http.post("/api/memories", content=chunks(), headers=plain)
        assert resp.status_code == 415 and "must be JSON" in error_message(resp)
        resp = await http.post("/api/memories", content=chunks(), headers=JSON)
        assert resp.status_code == 200, resp.text
    assert [r.text for r in await service.memories.get_all()] == ["planted by a chunked body"]


@pytest.mark.parametrize(
    "body",
    [b'{"content": "a", "content": "b"}', b'{"content": "a", "metadata": {"k": 1, "k": 2}}'],
)
async def test_a_body_with_a_key_twice_is_refused(service: MemoryService, body: bytes) -> None:
    async with server(service) as url, httpx.AsyncClient(base_url=url) as http:
        for path in ("/api/memories", "/v1/memories/"):
            resp = await http.post(path, content=body, headers=JSON)
            assert resp.status_code == 400 and "appears twice" in error_message(resp)
    assert await service.memories.count() == 0


@pytest.mark.parametrize(
    ("code", "status", "cause"),
    [(errno.ENOSPC, 507, "the disk is full"), (errno.EMFILE, 503, "no file handles left")],
)
async def test_a_full_disk_or_no_file_handles_is_said_so_and_reads_go_on(
    service: MemoryService, monkeypatch: pytest.MonkeyPatch, code: int, status: int, cause: str
) -> None:
    """Issue 41: ENOSPC and EMFILE were answered 409 "conflict". Now 507 and 503 naming the
    cause; nothing is written, and reads keep working meanwhile."""
    from memcore.vault import safe_file

    (kept,) = await service.memories.add("kept", user_id="alice")

    def exhausted(fd: int) -> None:
        raise OSError(code, os.strerror(code))

    async with server(service) as url, httpx.AsyncClient(base_url=url) as http:
        monkeypatch.setattr(safe_file.os, "fsync", exhausted)
        resp = await http.post("/api/memories", json={"content": "refused", "user_id": "alice"})
        assert resp.status_code == status and cause in error_message(resp), resp.text
        assert (await http.get(f"/api/memories/{kept.id}")).status_code == 200
        found = await http.post("/api/memory/search", json={"query": "kept"})
        assert found.status_code == 200
        monkeypatch.undo()
    assert [r.text for r in await service.memories.get_all()] == ["kept"]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"", "missing field(s): messages"),
        (b"{}", "missing field(s): messages"),
        (b"[]", "must be a JSON object"),
        (b'{"messages": [], "x": 1}', "the key 'x' is an unknown field"),
        (b'{"chat": []}', "unknown field(s): chat"),
        (b'{"messages": [], "messages": []}', "appears twice"),
        (b'{"messages": {"role": "user"}}', "expected a list for messages"),
        (b'{"messages": [{"role": "bot", "content": "x"}]}', "messages.0.role"),
        (b'{"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": 5}]}',
         "messages.1.content"),
        (b'{"messages": [{"role": "user", "role": "user"}]}', "appears twice"),
        (b'{"messages": [{"role": "user", "content": "x"}] extra', "expected '}'"),
        (b'{"messages": [{"role": "user", "content": "x"}]} {}', "extra data"),
        (b'{"messages": [{"role": "user", "content": "x"} {"role": "user"}]}', "',' or ']'"),
        (b'{"messages": [{"role": "user", "content": "\xff"}]}', "not UTF-8"),
        (b'{"messages": [{"role": "user", "content": "\\ud800"}]}', "lone surrogate"),
        (b'{"messages": [{"role": "user", "content": NaN}]}', "NaN is not a JSON number"),
        (b'{"messages": [{"role": "user", "m": ' + b"[" * 40 + b"]" * 40 + b"}]}",
         "nested deeper than 32"),
    ],
)  # fmt: skip
async def test_a_transcript_body_is_read_a_message_at_a_time_and_refused_in_one_line(
    service: MemoryService, body: bytes, message: str
) -> None:
    """The transcript PUT streams its body to a file and parses it a message at a time (a 37
    MB body must not hold the event loop): what it refuses, it refuses as the whole-body
    parser does, in one line naming the place, and writes nothing."""
    async with server(service) as url, httpx.AsyncClient(base_url=url) as http:
        resp = await http.put("/api/conversations/s1", content=body, headers=JSON)
        assert resp.status_code == 400, resp.text
        assert message in error_message(resp) and "\n" not in error_message(resp)
        assert (await http.get("/api/conversations/s1")).json()["messages"] == []


async def test_a_transcript_comes_back_exactly_as_it_was_put(service: MemoryService) -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        {"role": "system", "content": "Be terse. \u2028 ünïcödé"},
        {"role": "user", "content": [{"type": "text", "text": "hi"}], "name": "ana"},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "content": "42", "tool_call_id": "c1", "extra": {"k": [1, 2.5]}},
    ] * 400  # past the size a save indexes in the background
    body = json.dumps({"messages": messages}, indent=1).encode()  # white space between values
    async with server(service) as url, httpx.AsyncClient(base_url=url, timeout=60) as http:
        put = await http.put("/api/conversations/s1", content=body, headers=JSON)
        assert put.status_code == 200 and put.json() == {"saved": 1600}
        assert (await http.get("/api/conversations/s1")).json()["messages"] == messages
