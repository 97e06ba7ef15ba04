"""Memory strength through every caller: the daemon's forget loop, HTTP, the CLI, and many
writers of the review log at once (tasks and a second process)."""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import re
import sys
from pathlib import Path

import httpx

from memcore.core.settings import Settings, StrengthSettings
from memcore.search.recall import REVIEWS_PATH
from memcore.service import MemoryService
from tests.conftest import make_service
from tests.support import FakeEmbedder, error_message, write
from tests.test_cli import cli
from tests.test_http import server
from tests.test_watch import fast, running, until

OLD_DAILY = """---
memcore: memories
category: "daily"
---
# Memories: daily

- The 2020 offsite was in Porto <!-- memcore {"id": "m-00000000000000a1", "created": "2020-01-06T09:00:00+00:00", "updated": "2020-01-06T09:00:00+00:00"} -->
"""  # noqa: E501


async def test_the_daemon_archives_memories_that_faded_below_the_threshold(
    vault: Path, settings: Settings
) -> None:
    write(vault, "memory/daily/2020-01-06.md", OLD_DAILY)
    core = OLD_DAILY.replace('"daily"', '"core"').replace("00a1", "00c0")
    write(vault, "memory/users/ann/core.md", core)
    s = dataclasses.replace(
        fast(settings), strength=StrengthSettings(forget_below=0.5, forget_interval_s=0.2)
    )
    archived = vault / "memory/.archive/daily/2020-01-06.md"
    async with running(s) as (daemon, svc):
        await until(lambda: archived.exists() and "m-00000000000000a1" in archived.read_text())
        await until(lambda: daemon.forgotten == 1)
        kept = await svc.memories.get_all()
    assert "m-00000000000000a1" not in (vault / "memory/daily/2020-01-06.md").read_text()
    assert [r.category for r in kept] == ["core"]  # the core copy never decays


async def test_http_query_vector_reinforce_forget_and_restore(
    vault: Path, service: MemoryService, embedder: FakeEmbedder
) -> None:
    m = service.memories
    for who, text in (("alice", "Alice likes green tea"), ("bob", "Bob likes black coffee")):
        old = OLD_DAILY.replace("The 2020 offsite was in Porto", text)
        old = old.replace("memcore: memories", f'memcore: memories\nuser_id: "{who}"')
        write(vault, f"memory/users/{who}/daily/2020-01-06.md", old.replace("00a1", who[0] * 4))
    await service.index()
    tea, bob = "m-000000000000aaaa", "m-000000000000bbbb"
    vector = [float(x) for x in (await embedder.embed(["green tea"]))[0]]
    scoped = {"alice-token": {"user_id": "alice"}}
    async with server(service, token="root", scoped=scoped) as url:
        root = httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer root"})
        alice = httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer alice-token"})
        async with root, alice:
            ask = {"query": "drink", "query_vector": vector, "reinforce": True}
            found = (await alice.post("/api/memory/search", json=ask)).json()
            assert found["results"][0]["memory_id"] == tea and found["mode"] == "hybrid"
            by_vector = await alice.post("/api/memory/search", json={"query_vector": vector})
            assert by_vector.json()["results"][0]["memory_id"] == tea
            assert by_vector.json()["mode"] == "vector"
            none = await root.post("/api/memory/search", json={"limit": 3})
            assert none.status_code == 400 and "query" in error_message(none)
            bad = await root.post("/api/memory/search", json={"query": "x", "query_vector": [1]})
            assert bad.status_code == 400 and "dimension" in error_message(bad)
            zero = await root.post("/api/memory/search", json={"query": "x", "query_vector": []})
            assert zero.status_code == 400
            again = (await alice.post(f"/api/memories/{tea}/reinforce")).json()
            assert again["strength"]["reviews"] == 3  # creation, the search, this
            # another scope's memory does not exist for this token
            assert (await alice.post(f"/api/memories/{bob}/reinforce")).status_code == 404
            body = {"threshold": 0.5, "dry_run": True}
            listed = (await root.post("/api/memories/forget", json=body)).json()["results"]
            assert [r["id"] for r in listed] == [bob]  # alice's tea was just reinforced
            assert (await alice.post("/api/memories/forget", json=body)).json()["results"] == []
            gone = (await root.post("/api/memories/forget", json={"threshold": 0.5})).json()
            assert [r["id"] for r in gone["results"]] == [bob]
            assert (await alice.post(f"/api/memories/{bob}/restore")).status_code == 404
            assert (await root.post(f"/api/memories/{bob}/restore")).json()["id"] == bob
    assert {r.id for r in await m.get_all()} == {tea, bob}


async def test_reviews_from_many_tasks_and_a_second_process_are_all_counted(
    vault: Path, settings: Settings, embedder: FakeEmbedder
) -> None:
    async with make_service(settings, embedder) as svc:
        (mem,) = await svc.memories.add("The VPN endpoint is vpn2", category="ops")
        other = (
            "import asyncio, sys\n"
            "from memcore.search.recall import ReviewLog\n"
            "from pathlib import Path\n"
            "async def main():\n"
            "    log = ReviewLog(Path(sys.argv[1]))\n"
            "    for _ in range(100):\n"
            "        await log.append([sys.argv[2]])\n"
            "asyncio.run(main())\n"
        )
        proc = await asyncio.create_subprocess_exec(sys.executable, "-c", other, str(vault), mem.id)

        async def use(n: int) -> None:
            for _ in range(25):
                if n % 2:
                    await svc.memories.reinforce(mem.id)
                else:
                    await svc.memories.get(mem.id)
                await svc.memories.get_all()  # reads the log while others append

        await asyncio.gather(*(use(n) for n in range(8)))
        assert await proc.wait() == 0
        (after,) = await svc.memories.get_all()
    lines = (vault / REVIEWS_PATH).read_text().splitlines()
    assert len(lines) == 300 and all(json.loads(x)["id"] == mem.id for x in lines)
    assert after.strength is not None and after.strength.reviews == 301


def test_cli_lists_strength_and_forgets_below_with_dry_run_and_restore(vault: Path) -> None:
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    write(vault, "memory/daily/2020-01-06.md", OLD_DAILY)
    code, out, err = cli("--vault", str(vault), "index")
    assert code == 0, err
    code, out, _ = cli("--vault", str(vault), "list")
    assert "m-00000000000000a1  [daily] R=0." in out
    code, out, err = cli("--vault", str(vault), "forget", "--below", "0.5", "--dry-run")
    assert code == 0 and "m-00000000000000a1" in out and "would archive 1" in err
    assert "m-00000000000000a1" in (vault / "memory/daily/2020-01-06.md").read_text()
    code, out, err = cli("--vault", str(vault), "forget", "--below", "0.5", "--json")
    assert code == 0 and json.loads(out)[0]["strength"]["tier"] == "decaying"
    assert cli("--vault", str(vault), "list")[1] == ""
    code, out, _ = cli("--vault", str(vault), "restore", "m-00000000000000a1")
    assert code == 0 and "The 2020 offsite was in Porto" in out
    code, _, err = cli("--vault", str(vault), "restore", "m-00000000000000a1")
    assert code == 1 and "no archived or deleted memory" in err and err.count("\n") == 1
    code, _, err = cli("--vault", str(vault), "forget", "m-1", "--below", "0.5")
    assert code == 2 and "not both" in err


async def test_forgetting_and_restoring_while_others_add_loses_nothing(
    vault: Path, settings: Settings, embedder: FakeEmbedder
) -> None:
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    later = dt.datetime.now(dt.UTC) + dt.timedelta(days=365)
    async with make_service(settings, embedder) as svc:
        m = svc.memories
        added: list[str] = []
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c",
            "import sys\nfrom memcore.cli import main\n"
            "for i in range(8):\n"
            "    try:\n"
            "        main(['--vault', sys.argv[1], 'add', f'other process note {i}',"
            " '--category', 'daily'])\n"
            "    except SystemExit as e:\n"
            "        assert not e.code, e.code\n",
            str(vault), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip

        async def adder(n: int) -> None:
            for i in range(8):
                (r,) = await m.add(f"task {n} note {i}", category="daily")
                added.append(r.id)

        async def forgetter() -> None:
            for _ in range(6):
                for r in await m.forget_below(0.9, now=later):
                    if r.id.endswith(("0", "4", "8", "c")):
                        await m.restore(r.id)
                await asyncio.sleep(0.01)

        await asyncio.gather(*(adder(n) for n in range(4)), forgetter())
        out, err = await proc.communicate()
        assert proc.returncode == 0, err.decode()
        added += [line.split()[0] for line in out.decode().splitlines() if line.startswith("m-")]
        await m.forget_below(0.9, now=later)
    archived = {
        i
        for p in (vault / "memory/.archive").rglob("*.md")
        for i in re.findall(r'"id": "(m-[0-9a-f]+)"', p.read_text())
    }
    daily = {
        i
        for p in (vault / "memory/daily").rglob("*.md")
        for i in re.findall(r'"id": "(m-[0-9a-f]+)"', p.read_text())
    }
    assert len(added) == len(set(added)) == 40
    assert daily.isdisjoint(archived)  # never in both places
    assert set(added) == daily | archived  # and never in none
