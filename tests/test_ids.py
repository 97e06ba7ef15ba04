"""Any id: user, agent, run and app ids are any text, kept exactly, in folders that two ids
never share (also where the file system ignores case or normalises Unicode)."""

from __future__ import annotations

import asyncio
import unicodedata
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memcore.core.errors import InputError
from memcore.core.ids import MAX_ID, SEGMENT, check_id, folder_name, id_of_folder
from memcore.service import MemoryService
from memcore.vault.chunker import memory_file_of
from memcore.vault.memory_format import Scope, new_memory_file

REAL_IDS = ["auth0|5f3a", "+15551234567", "Alice Smith", "tenant/alice", "_internal"]

ids = st.text(st.characters(blacklist_categories=("Cc", "Cs")), min_size=1, max_size=MAX_ID).filter(
    lambda s: bool(s.strip())
)


def _on_disk(name: str) -> str:
    """The name as a case-insensitive, Unicode-normalising file system compares it."""
    return unicodedata.normalize("NFD", name).casefold()


@given(ids)
@settings(max_examples=400, suppress_health_check=[HealthCheck.too_slow])
def test_a_folder_name_reads_back_as_its_id_and_stays_a_plain_folder(value: str) -> None:
    name = folder_name(value)
    assert id_of_folder(name) == value
    for part in name.split("/"):
        assert part and len(part.encode("utf-8")) <= SEGMENT
        assert not part.startswith(".") and part not in (".", "..")
        assert "\\" not in part and ":" not in part and "\x00" not in part


@given(ids, ids)
@settings(max_examples=400)
def test_two_ids_never_share_a_folder_even_ignoring_case_and_normalisation(a: str, b: str) -> None:
    if a != b:
        assert _on_disk(folder_name(a)) != _on_disk(folder_name(b))


@pytest.mark.parametrize(
    ("value", "folder"),
    [
        ("alice", "alice"),
        ("bob@example.com", "bob@example.com"),
        ("+15551234567", "+15551234567"),
        ("_internal", "_internal"),
        ("Alice Smith", "!alice%20!smith"),
        ("tenant/alice", "tenant%2falice"),
        ("auth0|5f3a", "auth0%7c5f3a"),
        ("张三", "张三"),
        ("..", "%2e%2e"),
        (".hidden", "%2ehidden"),
    ],
)
def test_simple_ids_stay_readable(value: str, folder: str) -> None:
    assert folder_name(value) == folder
    assert id_of_folder(folder) == value


def test_a_long_id_is_cut_into_folders_that_read_back() -> None:
    value = "Ü" * MAX_ID
    name = folder_name(value)
    assert name.count("/") >= 1 and id_of_folder(name) == value
    assert id_of_folder("abc~") is None and id_of_folder("a%zz") is None


@pytest.mark.parametrize("bad", ["", " \t", "a\nb", "a\x00", "x" * (MAX_ID + 1), 5])
def test_what_is_no_id_is_refused_with_one_line(bad: object) -> None:
    with pytest.raises(InputError) as caught:
        check_id(bad, "user_id")
    assert "\n" not in str(caught.value) and "user_id" in str(caught.value)


async def test_ids_real_apps_use_work_and_stay_apart(vault: Path, service: MemoryService) -> None:
    m = service.memories
    for n, uid in enumerate([*REAL_IDS, "alice", "Alice", "tenant", "tenant%2falice"]):
        (added,) = await m.add(f"fact number {n} about travel", user_id=uid)
        assert added.user_id == uid
        assert (vault / added.path).resolve().is_relative_to(vault / "memory/users")
    for n, uid in enumerate([*REAL_IDS, "alice", "Alice", "tenant", "tenant%2falice"]):
        rows = await m.get_all(user_id=uid)
        assert [r.text for r in rows] == [f"fact number {n} about travel"]
        found = await m.search("travel", user_id=uid, limit=20)
        assert {r.user_id for r in found} == {uid} and len(found) == 1
        assert await m.count(user_id=uid) == 1
    users = {e.name for e in await m.entities() if e.kind == "user"}
    assert set(REAL_IDS) | {"alice", "Alice"} <= users
    assert await m.delete_all(user_id="tenant/alice") == 1
    assert await m.count(user_id="tenant") == 1 and await m.count(user_id="alice") == 1
    # reindexing from the Markdown alone gives every id back exactly
    await service.index(full=True)
    assert {r.user_id for r in await m.get_all(limit=100)} == (
        set(REAL_IDS) - {"tenant/alice"} | {"alice", "Alice", "tenant", "tenant%2falice"}
    )


async def test_notes_in_an_encoded_folder_belong_to_that_scope(
    vault: Path, service: MemoryService
) -> None:
    folder = vault / "memory/users" / folder_name("Alice Smith")
    folder.mkdir(parents=True)
    (folder / "trip.md").write_text("# Trip\n\nAlice Smith flies to Lisbon in May.\n")
    (vault / "memory/users/alice").mkdir(parents=True)
    (vault / "memory/users/alice/trip.md").write_text("# Trip\n\nalice flies to Oslo.\n")
    await service.index()
    found = await service.memories.search("flies", user_id="Alice Smith", limit=10)
    assert len(found) == 1 and "Lisbon" in found[0].text


@given(ids, ids)
@settings(max_examples=300)
def test_a_memory_file_reads_its_scope_back_exactly(user: str, app: str) -> None:
    scope = Scope(user_id=user, app_id=app)
    text = new_memory_file(scope, "core") + "- a memory\n"
    parsed = memory_file_of("memory/x.md", text)
    assert parsed is not None and parsed.scope == scope


# ids that break naive folders, URLs and file systems: case pairs, NFC/NFD pairs, separators,
# percent signs, the encoding's own marks, emoji, right-to-left text, the longest allowed
TRICKY = [
    "Alice", "alice", "ALICE", "caf\u00e9", "cafe\u0301", "a/b", "a%2fb", "a!b", "~x~",
    "..", "x" * MAX_ID, "\U0001f600 smile", "\u05e9\u05dc\u05d5\u05dd", "a b?c=d&e#f",
]  # fmt: skip


async def test_tricky_ids_round_trip_and_stay_apart_on_every_front(
    vault: Path, service: MemoryService
) -> None:
    import httpx
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client
    from mem0 import MemoryClient

    from tests.test_cli import cli
    from tests.test_http import server
    from tests.test_mcp import payload

    for n, uid in enumerate(TRICKY):
        await service.memories.add(f"python fact {n}", user_id=uid)
    async with server(service, token="k") as url:
        headers = {"Authorization": "Bearer k"}
        async with httpx.AsyncClient(base_url=url, headers=headers) as http:
            for n, uid in enumerate(TRICKY):
                made = await http.post("/api/memories", json={"content": f"http fact {n}",
                                                              "user_id": uid})  # fmt: skip
                assert made.status_code == 200 and made.json()["results"][0]["user_id"] == uid
                listed = await http.get("/api/memories", params={"user_id": uid})
                got = sorted(r["memory"] for r in listed.json()["results"])
                assert got == [f"http fact {n}", f"python fact {n}"], uid

        def mem0_session() -> list[list[str]]:
            client = MemoryClient(api_key="k", host=url)
            out = []
            for uid in TRICKY:
                page = client.get_all(filters={"user_id": uid})
                out.append(sorted(r["user_id"] for r in page["results"]))
            client.client.close()
            return out

        assert await asyncio.to_thread(mem0_session) == [[uid, uid] for uid in TRICKY]
        auth = httpx2.AsyncClient(headers=headers, timeout=30)
        async with auth, Client(streamable_http_client(url + "/mcp", http_client=auth)) as mcp:
            for n, uid in enumerate(TRICKY):
                rows = payload(await mcp.call_tool("list", {"user_id": uid}))
                assert sorted(r["memory"] for r in rows) == [f"http fact {n}", f"python fact {n}"]
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    for uid in TRICKY:
        code, out, err = await asyncio.to_thread(cli, "--vault", str(vault), "count", "--user", uid)
        assert code == 0 and out.strip() == "2", (uid, err)


async def test_an_id_with_a_slash_reaches_its_own_routes(service: MemoryService) -> None:
    """Ids in a path (Mem0's entity routes, transcripts) may hold '/': the official client
    sends it %2F-escaped, the route takes the rest of the path."""
    from mem0 import MemoryClient

    from tests.test_http import server

    await service.memories.add("one", user_id="tenant/alice")
    await service.memories.add("two", user_id="tenant")
    await service.conversations.save("team/run 1", [{"role": "user", "content": "hi"}])
    async with server(service, token="k") as url:

        def session() -> dict[str, object]:
            client = MemoryClient(api_key="k", host=url)
            client.delete_users(user_id="tenant/alice")
            left = client.get_all(filters={"user_id": "*"})
            client.client.close()
            return left

        left = await asyncio.to_thread(session)
        import httpx

        async with httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer k"}) as h:
            chat = await h.get("/api/conversations/team%2Frun%201")
    assert [r["user_id"] for r in left["results"]] == ["tenant"]  # type: ignore[index]
    assert chat.status_code == 200 and chat.json()["messages"][0]["content"] == "hi"


async def test_a_vault_from_before_encoded_folders_keeps_working(
    vault: Path, service: MemoryService
) -> None:
    """memory/users/Alice/ (the folder an id had before ids were encoded): its memories,
    keys and notes still belong to user Alice; new memories go to the encoded folder."""
    old = vault / "memory/users/Alice"
    old.mkdir(parents=True)
    (old / "core.md").write_text(
        '---\nmemcore: memories\nuser_id: "Alice"\ncategory: "core"\n---\n\n'
        '- UTC+1 <!-- memcore {"id": "m-00000000000000a1", "key": "tz", "created": '
        '"2025-01-01T00:00:00+00:00", "updated": "2025-01-01T00:00:00+00:00"} -->\n'
    )
    (old / "trip.md").write_text("# Trip\n\nAlice flies to Lisbon in May.\n")
    await service.index()
    m = service.memories
    (kept,) = await m.add("UTC+2", user_id="Alice", key="tz")
    assert kept.id == "m-00000000000000a1" and kept.path == "memory/users/Alice/core.md"
    (new,) = await m.add("likes tea", user_id="Alice")
    assert new.path == "memory/users/!alice/core.md"
    assert await m.count(user_id="Alice") == 2
    found = await m.search("Lisbon", user_id="Alice", limit=10)
    assert "note:memory/users/Alice/trip.md#L1-3" in {r.id for r in found}
    assert await m.search("Lisbon", user_id="alice", limit=10) == []


def test_new_memory_ids_are_distinct_across_threads_and_a_fork() -> None:
    """New ids come from a pool of the OS's random bytes (vault/memory_format.py): distinct
    across threads drawing at once, and a forked child does not repeat its parent's pool."""
    import os
    import re
    from concurrent.futures import ThreadPoolExecutor

    from memcore.vault.memory_format import new_id

    with ThreadPoolExecutor(4) as pool:
        drawn = [i for ids in pool.map(lambda _: [new_id() for _ in range(2000)], range(4))
                 for i in ids]  # fmt: skip
    assert len(set(drawn)) == len(drawn) == 8000
    assert all(re.fullmatch(r"m-[0-9a-f]{16}", i) for i in drawn)
    new_id()  # the pool holds bytes now: a child must not draw the same ones
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next ids, to the parent
        os.write(write, " ".join(new_id() for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as fh:
        child = fh.read().split()
    mine = [new_id() for _ in range(50)]
    assert len(child) == 50 and not set(child) & set(mine)
