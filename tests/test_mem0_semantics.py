"""Mem0's documented semantics, on SQLite and a real PostgreSQL: filters operator by operator
(``keywords``, ``memory_ids``, ``"*"`` meaning non-empty, ``timestamp``, checked dates), filters
of any width, exact paging under OR, ``timestamp`` / ``expiration_date`` / ``immutable`` kept in
the Markdown and honoured after a reindex; and the Mem0 routes' answers (history, users,
memory fields, 501 for platform routes, no notes, no side effects, ignored fields named)."""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from memcore.core.errors import InputError, WriteConflict
from memcore.core.settings import Settings, load_settings
from memcore.service import MemoryService
from tests.conftest import make_service, on_backend
from tests.support import FakeEmbedder, error_message, write
from tests.test_http import server


@pytest.fixture(params=["sqlite", "postgres"])
def settings(request: pytest.FixtureRequest, vault: Path) -> Settings:
    return on_backend(request, vault)


def day(delta: int) -> str:
    return (dt.datetime.now(dt.UTC).date() + dt.timedelta(days=delta)).isoformat()


async def texts(service: MemoryService, flt: dict[str, Any], **kw: Any) -> list[str]:
    rows = await service.memories.get_all(filters=flt, **kw)
    return sorted(r.text for r in rows)


async def test_filters_as_mem0_documents_them(service: MemoryService) -> None:
    m = service.memories
    tea = (await m.add("Alice likes Green tea", user_id="alice", metadata={"tag": ""}))[0]
    await m.add("Alice climbs", user_id="alice", agent_id="coach", metadata={"tag": "x"})
    await m.add("Bob plays chess", user_id="bob", created=1_700_000_000)  # 2023-11-14
    # keywords: the memory's text, case folded with icontains
    assert await texts(service, {"keywords": {"icontains": "green"}}) == ["Alice likes Green tea"]
    assert await texts(service, {"keywords": {"contains": "green"}}) == []
    # "*" is any non-empty value: a memory without an agent, or with an empty tag, is not one
    assert await texts(service, {"agent_id": "*"}) == ["Alice climbs"]
    assert await texts(service, {"tag": "*"}) == ["Alice climbs"]
    assert await texts(service, {"NOT": {"agent_id": "*"}}) == [
        "Alice likes Green tea", "Bob plays chess"]  # fmt: skip
    # memory_ids, as a list or with in
    assert await texts(service, {"memory_ids": [tea.id]}) == ["Alice likes Green tea"]
    assert await texts(service, {"memory_ids": {"in": [tea.id, "m-none"]}}) == [
        "Alice likes Green tea"]  # fmt: skip
    # timestamp is created_at: Unix seconds or ISO; a bare date takes whole days
    assert await texts(service, {"timestamp": {"lt": 1_700_000_001}}) == ["Bob plays chess"]
    assert await texts(service, {"created_at": "2023-11-14"}) == ["Bob plays chess"]
    assert await texts(service, {"created_at": {"ne": "2023-11-14"}}) == [
        "Alice climbs", "Alice likes Green tea"]  # fmt: skip
    assert await texts(service, {"created_at": {"lte": "2023-11-14T22:13:20Z"}}) == [
        "Bob plays chess"]  # fmt: skip
    for bad in ("yesterday", "2023-13-01", True):
        with pytest.raises(InputError, match="is not a date"):
            await m.get_all(filters={"created_at": {"lte": bad}})
    with pytest.raises(InputError, match="keywords: use contains or icontains"):
        await m.get_all(filters={"keywords": "tea"})


async def test_filters_of_any_width_and_exact_counts(service: MemoryService) -> None:
    m = service.memories
    for n in range(30):
        await m.add(f"fact {n}", user_id=f"u{n}", metadata={"n": n})
    wide_or = {"OR": [{"user_id": f"u{n}"} for n in range(5_000)]}
    assert await m.count(filters=wide_or) == 30
    mixed = {"OR": [{"user_id": f"u{n}"} if n % 2 else {"n": n} for n in range(3_000)]}
    assert await m.count(filters=mixed) == 30
    wide_and = {"AND": [{"n": {"ne": -k}} for k in range(1, 800)]}
    assert await m.count(filters=wide_and) == 30
    deep_in = {"n": {"in": list(range(20_000))}}
    assert await m.count(filters=deep_in) == 30
    too_wide = {"OR": [{f"k{n}": n} for n in range(20_000)]}
    with pytest.raises(InputError, match="over 30,000"):
        await m.count(filters=too_wide)


async def test_timestamp_expiry_and_immutable_live_in_the_markdown(
    service: MemoryService, settings: Settings, embedder: FakeEmbedder
) -> None:
    m = service.memories
    old = (await m.add("Moved to Berlin", user_id="ann", created="2021-03-04T05:06:07Z"))[0]
    gone = (await m.add("Trip next week", user_id="ann", expiration_date=day(-1)))[0]
    soon = (await m.add("Sale ends soon", user_id="ann", expiration_date=day(0)))[0]
    fixed = (await m.add("Born in 1990", user_id="ann", immutable=True))[0]
    assert old.created == "2021-03-04T05:06:07+00:00"
    assert soon.expiration_date == day(0) and fixed.immutable
    # expired: out of listings, counts and searches; shown when asked
    listed = await m.get_all(user_id="ann")
    assert {r.id for r in listed} == {old.id, soon.id, fixed.id}
    assert await m.count(user_id="ann") == 3
    assert await m.count(user_id="ann", show_expired=True) == 4
    found = await m.search("Trip next week", user_id="ann", limit=5)
    assert gone.id not in {r.id for r in found}
    found = await m.search("Trip next week", user_id="ann", limit=5, show_expired=True)
    assert gone.id in {r.id for r in found}
    # immutable: updates are refused and say why; deleting stays possible
    with pytest.raises(WriteConflict, match="immutable"):
        await m.update(fixed.id, "Born in 1991")
    with pytest.raises(WriteConflict, match="immutable"):
        await m.update(fixed.id, metadata={"x": 1})
    assert (await m.get(fixed.id)).text == "Born in 1990"
    # all of it is in the file, and comes back from it into a new index
    text = (settings.vault / old.path).read_text()
    assert '"expires": "' + day(-1) + '"' in text and '"immutable": true' in text
    assert '"created": "2021-03-04T05:06:07+00:00"' in text
    async with make_service(elsewhere(settings), embedder) as fresh:
        await fresh.index()
        again = {r.id: r for r in await fresh.memories.get_all(user_id="ann", show_expired=True)}
        assert again[fixed.id].immutable and again[gone.id].expiration_date == day(-1)
        assert again[old.id].created == "2021-03-04T05:06:07+00:00"
        assert await fresh.memories.count(user_id="ann") == 3
    # the forget loop's step: expired memories go to the archive; restore brings one back
    archived = await m.archive_expired()
    assert [r.id for r in archived] == [gone.id]
    assert (await m.archived(gone.id)).expiration_date == day(-1)
    back = await m.restore(gone.id)
    assert back.expiration_date is None and await m.count(user_id="ann") == 4


def elsewhere(settings: Settings) -> Settings:
    """The same vault with a new, empty index (another file, or another namespace)."""
    if settings.database_url:
        return load_settings(
            settings.vault,
            {"storage.url": settings.database_url, "storage.namespace": settings.namespace + "-2"},
        )
    return load_settings(settings.vault, {"storage.db": str(settings.vault.parent / "2.db")})


@pytest.fixture
async def served(service: MemoryService) -> Any:
    async with (
        server(service, token="k") as url,
        httpx.AsyncClient(base_url=url, headers={"Authorization": "Token k"}) as http,
    ):
        yield http


async def test_mem0_answers_have_mem0s_shape(
    service: MemoryService, vault: Path, served: httpx.AsyncClient
) -> None:
    http = served
    write(vault, "memory/users/zoe/notes.md", "# Notes\n\nZoe rides a red bicycle.\n")
    await service.index()
    add = await http.post("/v1/memories/", json={
        "messages": "Zoe rides a bicycle", "user_id": "zoe", "timestamp": 1_600_000_000,
        "expiration_date": day(30), "immutable": True, "version": "v2", "org_id": "o",
    })  # fmt: skip
    assert add.status_code == 200, add.text
    assert add.headers["memcore-ignored"] == "org_id, version"
    made = add.json()["results"][0]
    assert made["created_at"] == "2020-09-13T12:26:40+00:00"
    assert made["expiration_date"] == day(30) and made["immutable"] is True
    assert made["hash"] == hashlib.md5(b"Zoe rides a bicycle").hexdigest()
    refused = await http.put(f"/v1/memories/{made['id']}/", json={"text": "Zoe walks"})
    assert refused.status_code == 409 and "immutable" in error_message(refused)
    bad = await http.post("/v1/memories/", json={"messages": "x", "user_id": "zoe",
                                                  "expiration_date": "next week"})  # fmt: skip
    assert bad.status_code == 400 and "expiration_date" in error_message(bad)
    # search: memories only (the note is not one), unless asked; the default threshold holds
    found = (await http.post("/v2/memories/search/", json={
        "query": "Zoe rides a bicycle", "filters": {"user_id": "zoe"}})).json()  # fmt: skip
    assert [r["id"] for r in found["results"]] == [made["id"]]
    with_notes = (await http.post("/v2/memories/search/", json={
        "query": "Zoe rides a red bicycle", "filters": {"user_id": "zoe"}, "include_notes": True,
    })).json()  # fmt: skip
    assert any(r["id"].startswith("note:") for r in with_notes["results"])
    nothing = (
        await http.post(
            "/v2/memories/search/",
            json={"query": "quantum chromodynamics lattice", "filters": {"user_id": "zoe"}},
        )
    ).json()
    assert nothing["results"] == []
    # a read has no side effect: no review is written
    reviews = vault / "memory" / "reviews.jsonl"
    before = reviews.read_bytes() if reviews.exists() else b""
    assert (await http.get(f"/v1/memories/{made['id']}/")).status_code == 200
    assert (reviews.read_bytes() if reviews.exists() else b"") == before
    # history in Mem0's shape; an unknown id is a 404 here and on every front
    history = (await http.get(f"/v1/memories/{made['id']}/history/")).json()
    assert history[0]["event"] == "ADD" and history[0]["user_id"] == "zoe"
    assert history[0]["categories"] == ["core"] and history[0]["input"] == []
    assert (await http.get("/v1/memories/m-0123456789abcdef/history/")).status_code == 404
    assert (await http.get("/api/memories/m-0123456789abcdef/history")).status_code == 404
    # users() pages; a user with nothing is deleted already
    for n in range(3):
        await http.post("/v1/memories/", json={"messages": f"fact {n}", "user_id": f"p{n}"})
    page = (await http.get("/v1/entities/", params={"page": 2, "page_size": 2})).json()
    assert page["count"] == 4 and len(page["results"]) == 2
    assert page["previous"] == f"{http.base_url}/v1/entities/?page=1&page_size=2"
    assert page["next"] is None
    assert set(page["results"][0]) >= {"owner", "organization", "metadata", "total_memories"}
    gone = await http.delete("/v2/entities/user/nobody/")
    assert gone.status_code == 200 and gone.json()["deleted"] == 0
    # platform-only routes: 501, saying what is missing
    for method, path, what in [
        ("POST", "/v1/exports/", "memory exports"), ("POST", "/v1/summary/", "summaries"),
        ("GET", "/api/v1/webhooks/projects/default/", "webhooks"),
        ("GET", "/api/v1/orgs/organizations/o1/projects/", "organizations and projects"),
        ("GET", "/v2/entities/user/zoe/profile/", "profiles"),
    ]:  # fmt: skip
        answer = await http.request(method, path, json={} if method == "POST" else None)
        assert answer.status_code == 501, (path, answer.text)
        assert error_message(answer).startswith(f"not supported by memcore: {what} ")
    # a path under /api/v1/ that Mem0's platform does not have either is simply not a route
    other = await http.get("/api/v1/memory/search")
    assert other.status_code == 404 and "no route GET /api/v1/memory/search" in other.text


async def test_paging_is_exact_under_or_filters(served: httpx.AsyncClient) -> None:
    http = served
    for n in range(7):
        await http.post("/v1/memories/", json={"messages": f"note {n}", "user_id": f"w{n % 3}"})
    either = {"OR": [{"user_id": "w0"}, {"user_id": "w1"}]}  # 3 + 2 = 5 of 7
    seen: list[str] = []
    page, pages = 1, []
    while page:
        got = (await http.post(f"/v3/memories/?page={page}&page_size=2",
                               json={"filters": either})).json()  # fmt: skip
        pages.append(got)
        seen += [r["id"] for r in got["results"]]
        page = page + 1 if got["next"] else 0
    assert [p["count"] for p in pages] == [5, 5, 5] and len(set(seen)) == 5
    assert pages[-1]["next"] is None and pages[0]["previous"] is None
    # GET /v1/memories/ with what old clients send: org_id, project_id, page_size
    old = await http.get("/v1/memories/", params={
        "user_id": "w0", "org_id": "memcore", "project_id": "default", "page": 1,
        "page_size": 2})  # fmt: skip
    assert old.status_code == 200 and old.json()["count"] == 3
    assert old.headers["memcore-ignored"] == "org_id, project_id"
    # the same names inside filters change nothing either, and the header says so
    inside = await http.post(
        "/v3/memories/",
        json={"filters": {"AND": [{"user_id": "w0"}, {"org_id": "o"}, {"project_id": "p"}]}},
    )
    assert inside.json()["count"] == 3
    assert inside.headers["memcore-ignored"] == "filters.org_id, filters.project_id"
    searched = await http.post("/v2/memories/search/", json={
        "query": "anything", "filters": {"user_id": "w0", "org_id": "o"}})  # fmt: skip
    assert searched.headers["memcore-ignored"] == "filters.org_id"
    # a bare user_id also finds the user's agent memories here, and the answer says so
    await http.post("/v1/memories/", json={"messages": "with coach", "user_id": "w0",
                                           "agent_id": "coach"})  # fmt: skip
    listed = (await http.post("/v3/memories/", json={"filters": {"user_id": "w0"}})).json()
    assert listed["count"] == 4 and "agent_id" in listed["warnings"][0]
    only = (await http.post("/v3/memories/", json={"filters": {"AND": [
        {"user_id": "w0"}, {"NOT": {"agent_id": "*"}}]}})).json()  # fmt: skip
    assert only["count"] == 3 and "warnings" not in only
    huge = {"OR": [{"user_id": f"w{n}"} for n in range(3_000)]}
    wide = await http.post("/v3/memories/", json={"filters": huge})
    assert wide.status_code == 200 and wide.json()["count"] == 8
    assert json.loads(wide.text)["results"]


async def test_an_update_sets_and_takes_away_an_expiry(served: httpx.AsyncClient) -> None:
    http = served
    add = await http.post("/v1/memories/", json={"messages": "Desk 4B", "user_id": "kim"})
    mid = add.json()["results"][0]["id"]

    async def listed() -> int:
        got = await http.post("/v3/memories/", json={"filters": {"user_id": "kim"}})
        return int(got.json()["count"])

    put = await http.put(f"/v1/memories/{mid}/", json={"expiration_date": day(-2)})
    assert put.status_code == 200 and put.json()["expiration_date"] == day(-2)
    assert await listed() == 0
    shown = await http.post("/v3/memories/", json={"filters": {"user_id": "kim"},
                                                   "show_expired": True})  # fmt: skip
    assert shown.json()["count"] == 1
    put = await http.put(f"/v1/memories/{mid}/", json={"expiration_date": None})
    assert put.status_code == 200 and put.json()["expiration_date"] is None
    assert await listed() == 1
    stamped = await http.put(f"/v1/memories/{mid}/", json={"timestamp": "2020-01-02"})
    assert stamped.json()["created_at"] == "2020-01-02T00:00:00+00:00"


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)  # the CLI opens the vault's index
async def test_every_front_takes_expiry_immutable_and_timestamp(
    service: MemoryService, vault: Path
) -> None:
    """Native HTTP, the CLI, MCP and the Python API: one contract (the CLI in this process,
    on the same vault)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from tests.test_cli import cli
    from tests.test_mcp import payload

    async with server(service, token="t") as url:
        headers = {"Authorization": "Bearer t"}
        async with httpx.AsyncClient(base_url=url, headers=headers) as http:
            made = await http.post("/api/memories", json={
                "content": "Parking pass 12", "user_id": "lee", "expiration_date": day(-1),
                "timestamp": "2022-02-02T02:02:02Z"})  # fmt: skip
            assert made.status_code == 200, made.text
            row = made.json()["results"][0]
            assert row["expiration_date"] == day(-1)
            assert row["created_at"] == "2022-02-02T02:02:02+00:00"
            fixed = await http.post("/api/memories", json={
                "content": "Blood type O", "user_id": "lee", "immutable": True})  # fmt: skip
            refused = await http.put(f"/api/memories/{fixed.json()['results'][0]['id']}",
                                     json={"content": "Blood type A"})  # fmt: skip
            assert refused.status_code == 409 and "immutable" in error_message(refused)
            listed = await http.get("/api/memories", params={"user_id": "lee"})
            assert [r["memory"] for r in listed.json()["results"]] == ["Blood type O"]
            shown = await http.get("/api/memories", params={"user_id": "lee",
                                                            "show_expired": "true"})  # fmt: skip
            assert len(shown.json()["results"]) == 2
            found = await http.post("/api/memory/search", json={"query": "Parking pass 12",
                                                                 "user_id": "lee"})  # fmt: skip
            assert [r["text"] for r in found.json()["results"]] == ["Blood type O"]
        auth = httpx2.AsyncClient(headers=headers, timeout=30)
        async with auth, Client(streamable_http_client(url + "/mcp", http_client=auth)) as mcp:
            added = payload(
                await mcp.call_tool(
                    "add",
                    {"content": "Gate code 4411", "user_id": "lee", "expiration_date": day(-3)},
                )
            )
            assert added[0]["expiration_date"] == day(-3)
            rows = payload(await mcp.call_tool("list", {"user_id": "lee"}))
            assert "Gate code 4411" not in json.dumps(rows)
            rows = payload(await mcp.call_tool("list", {"user_id": "lee", "show_expired": True}))
            assert "Gate code 4411" in json.dumps(rows)
    code, out, err = await asyncio.to_thread(
        cli, "--vault", str(vault), "add", "Locker 9", "--user", "lee", "--expires", day(-1),
        "--timestamp", "1600000000", "--immutable", "--json",
    )  # fmt: skip
    assert code == 0, err
    (row,) = json.loads(out)
    assert row["immutable"] and row["created_at"] == "2020-09-13T12:26:40+00:00"
    code, out, _ = await asyncio.to_thread(cli, "--vault", str(vault), "count", "--user", "lee")
    assert out.split()[0] == "1"
    code, out, _ = await asyncio.to_thread(
        cli, "--vault", str(vault), "count", "--user", "lee", "--show-expired"
    )
    assert out.split()[0] == "4"
    code, _, err = await asyncio.to_thread(
        cli, "--vault", str(vault), "add", "x", "--user", "lee", "--expires", "soon"
    )
    assert code != 0 and "expiration_date must be a date" in err


async def test_a_search_past_expired_memories_still_fills_its_limit(
    service: MemoryService,
) -> None:
    m = service.memories
    for n in range(4):
        await m.add(f"apple pie recipe {n}", user_id="cook", expiration_date=day(-1))
    kept = {(await m.add(f"apple pie note {n}", user_id="cook"))[0].id for n in range(3)}
    found = await m.search("apple pie recipe", user_id="cook", limit=3, threshold=0)
    assert {r.id for r in found} == kept
    hits = await service.search("apple pie recipe", limit=3)  # the native/CLI path
    assert {h.id for h in hits.hits} == kept
    every = await m.search("apple pie recipe", user_id="cook", limit=7, show_expired=True)
    assert len(every) == 7


@pytest.mark.parametrize("settings", ["sqlite"], indirect=True)
async def test_the_seed_decisions_hold(service: MemoryService, served: httpx.AsyncClient) -> None:
    """A default add is core and never forgotten; memcore's search gives 5 by default and
    Mem0's 10."""
    m = service.memories
    kept = (await m.add("Alice is allergic to peanuts", user_id="amy"))[0]
    assert kept.category == "core"
    far = dt.datetime.now(dt.UTC) + dt.timedelta(days=3650)
    assert await m.forget_below(0.99, user_id="amy", now=far) == []
    for n in range(12):
        await m.add(f"Amy note {n} about peanuts", user_id="amy")
    assert len(await m.search("peanuts", user_id="amy", threshold=0)) == 5
    mem0 = await served.post("/v3/memories/search/", json={
        "query": "peanuts", "filters": {"user_id": "amy"}, "threshold": 0})  # fmt: skip
    assert len(mem0.json()["results"]) == 10


async def test_the_history_of_an_archived_memory_is_still_answered(
    service: MemoryService, served: httpx.AsyncClient
) -> None:
    gone = (await service.memories.add("Old badge", user_id="ned", expiration_date=day(-1)))[0]
    assert [r.id for r in await service.memories.archive_expired()] == [gone.id]
    history = await served.get(f"/v1/memories/{gone.id}/history/")
    assert history.status_code == 200, history.text
    assert [e["event"] for e in history.json()] == ["ADD", "ARCHIVE"]
