"""Nodes that replace each other: N `memcore serve` on one vault and one PostgreSQL (pgserver,
the one on PYTHONPATH; static embedder), and the polling watcher's cost.

    python bench/nodes.py [--notes 2000] [--seconds 10] [--failovers 5] [--poll-files 10000]

Prints:
- search throughput through 1, 2 and 3 nodes (HTTP, 16 clients at once spread over the nodes,
  for ``--seconds``): searches/s, p50, p95; and add throughput (600 adds, 48 at once);
- failover, ``--failovers`` times with 3 nodes: kill -9 of the node holding the roles ->
  first search on another node that finds a note written by hand right after the kill;
- polling (SQLite, `memcore watch --poll`, ``--poll-files`` files): CPU a second while idle,
  against native events, and how long a hand edit takes to be searchable.
Everything runs on this machine: the load generator, the nodes and PostgreSQL share its cores.
Numbers only; it never passes or fails on time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import paragraphs, questions
from tests.support import free_port

CLIENTS = 16


def _env(url: str = "", namespace: str = "bench") -> dict[str, str]:
    env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": "static"}
    if url:
        env |= {"MEMCORE_STORAGE_URL": url, "MEMCORE_STORAGE_NAMESPACE": namespace}
    return env


def _seed(vault: Path, notes: int, per_file: int = 20) -> None:
    (vault / "memory" / "notes").mkdir(parents=True, exist_ok=True)
    paras = paragraphs()
    for f in range(0, notes, per_file):
        body = "\n\n".join(f"## Note {n}\n\n{next(paras)}" for n in range(f, f + per_file))
        (vault / "memory" / "notes" / f"n{f:06d}.md").write_text(f"# Notes {f}\n\n{body}\n")


def _up(port: int) -> bool:
    with contextlib.suppress(httpx.HTTPError):
        return httpx.get(f"http://127.0.0.1:{port}/api/status", timeout=2).status_code == 200
    return False


def _wait(predicate: object, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():  # type: ignore[operator]
            return True
        time.sleep(0.05)
    return False


class Nodes:
    def __init__(self, vault: Path, env: dict[str, str], logs: Path) -> None:
        self.vault, self.env, self.logs = vault, env, logs
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def start(self) -> int:
        port = free_port()
        log = (self.logs / f"node{port}.log").open("wb")
        self.procs[port] = subprocess.Popen(
            [sys.executable, "-m", "memcore", "--vault", str(self.vault), "serve",
             "--port", str(port)],
            env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
        if not _wait(lambda: _up(port), 120):
            raise SystemExit(f"node on {port} did not come up; see {self.logs}")
        return port

    def holder(self) -> int:
        """The port of the node holding the roles (asked of any node)."""
        for port in self.procs:
            with contextlib.suppress(httpx.HTTPError, ValueError):
                nodes = httpx.get(f"http://127.0.0.1:{port}/api/status", timeout=5).json()
                pids = {n["pid"] for n in nodes["nodes"] if n["roles"]}
                for p, proc in self.procs.items():
                    if proc.pid in pids:
                        return p
        raise LookupError("no node holds the roles")

    def kill(self, port: int) -> None:
        proc = self.procs.pop(port)
        proc.kill()
        proc.wait()

    def stop(self) -> None:
        for proc in self.procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        self.procs.clear()


async def _search_load(ports: list[int], seconds: float, qs: list[str]) -> list[float]:
    times: list[float] = []
    deadline = time.monotonic() + seconds
    async with httpx.AsyncClient(timeout=60) as client:

        async def one_client(c: int) -> None:
            n = c
            while time.monotonic() < deadline:
                port = ports[n % len(ports)]
                t = time.perf_counter()
                got = await client.post(
                    f"http://127.0.0.1:{port}/api/memory/search",
                    json={"query": qs[n % len(qs)], "limit": 5},
                )
                got.raise_for_status()
                times.append((time.perf_counter() - t) * 1000)
                n += CLIENTS

        await asyncio.gather(*(one_client(c) for c in range(CLIENTS)))
    return times


async def _add_load(ports: list[int], count: int, tag: str) -> float:
    gate = asyncio.Semaphore(48)
    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=120) as client:

        async def add(n: int) -> None:
            async with gate:
                got = await client.post(
                    f"http://127.0.0.1:{ports[n % len(ports)]}/api/memories",
                    json={"content": f"{tag} fact {n}: the otter counted {n} pebbles.",
                          "user_id": f"u{n % 12}"},
                )  # fmt: skip
                got.raise_for_status()

        await asyncio.gather(*(add(n) for n in range(count)))
    return count / (time.perf_counter() - started)


def _pct(times: list[float]) -> str:
    times = sorted(times)
    return f"p50 {statistics.median(times):.1f} ms, p95 {times[int(len(times) * 0.95)]:.1f} ms"


def throughput(nodes: Nodes, args: argparse.Namespace, qs: list[str]) -> None:
    while len(nodes.procs) < 3:
        nodes.start()
        ports = list(nodes.procs)
        time.sleep(3)  # the last round's writes, as the watcher sees them, settle
        asyncio.run(_search_load(ports, 2, qs))  # warm every node
        times = asyncio.run(_search_load(ports, args.seconds, qs))
        adds = asyncio.run(_add_load(ports, 600, f"n{len(ports)}"))
        print(
            f"{len(ports)} node(s): search {len(times) / args.seconds:.0f}/s ({_pct(times)}); "
            f"add {adds:.0f}/s",
            flush=True,
        )


def failover(nodes: Nodes, args: argparse.Namespace, vault: Path) -> None:
    took: list[float] = []
    for n in range(args.failovers):
        victim = nodes.holder()
        nodes.kill(victim)
        killed = time.monotonic()
        (vault / "memory" / f"hand{n}.md").write_text(
            f"# Hand {n}\n\nThe kestrel number zk{n}q hovered over Quarry Hill.\n"
        )
        other = next(iter(nodes.procs))

        def found(other: int = other, n: int = n) -> bool:
            got = httpx.post(
                f"http://127.0.0.1:{other}/api/memory/search",
                json={"query": f"zk{n}q kestrel", "limit": 3}, timeout=10,
            )  # fmt: skip
            return any(h["path"] == f"memory/hand{n}.md" for h in got.json()["results"])

        if not _wait(found, 60):
            raise SystemExit("the hand edit was not found within 60 s of the kill")
        took.append(time.monotonic() - killed)
        nodes.start()  # back to three
    print(
        f"failover (kill -9 of the holder -> hand edit searchable on another node), "
        f"{len(took)} runs: median {statistics.median(took):.2f} s, max {max(took):.2f} s",
        flush=True,
    )


def _cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _watching(vault: Path) -> bool:
    status = vault / ".memcore" / "daemon.json"
    with contextlib.suppress(OSError):
        return '"watching": true' in status.read_text()
    return False


def polling(args: argparse.Namespace, work: Path) -> None:
    vault = work / "pollvault"
    _seed(vault, args.poll_files, per_file=1)
    env = _env()
    subprocess.run(
        [sys.executable, "-m", "memcore", "--vault", str(vault), "index"],
        env=env, check=True, capture_output=True,
    )  # fmt: skip
    for poll in (False, True):
        proc = subprocess.Popen(
            [sys.executable, "-m", "memcore", "--vault", str(vault), "watch",
             *(["--poll"] if poll else [])],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            if not _wait(lambda: _watching(vault), 300):
                raise SystemExit("memcore watch did not start")
            time.sleep(3)
            before, t = _cpu_s(proc.pid), time.monotonic()
            time.sleep(args.seconds)
            idle = (_cpu_s(proc.pid) - before) / (time.monotonic() - t)
            mark = f"pz{int(poll)}w"
            (vault / "memory" / "notes" / "n000000.md").write_text(f"# Edit\n\nThe {mark} wren.\n")
            edited = time.monotonic()

            def found(mark: str = mark) -> bool:
                done = subprocess.run(
                    [sys.executable, "-m", "memcore", "--vault", str(vault), "search", mark,
                     "--json"],
                    env=env, capture_output=True, text=True,
                )  # fmt: skip
                return "n000000.md" in done.stdout

            _wait(found, 60)
            seen = time.monotonic() - edited
            mode = "polling every 2 s" if poll else "native events"
            print(
                f"watch, {args.poll_files} files, {mode}: idle CPU {idle * 100:.1f}% of a core; "
                f"hand edit searchable after {seen:.1f} s (includes a CLI search's start-up)",
                flush=True,
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=60)


def main(args: argparse.Namespace) -> None:
    from tests.pg_server import running_server  # pgserver, as the tests start it

    qs = questions(400)
    with tempfile.TemporaryDirectory(prefix="memcore-nodes-") as tmp:
        work = Path(tmp)
        if args.poll_files:
            polling(args, work)
        with running_server(work / "pg") as (url, versions):
            print(f"{versions}; {args.notes} notes; {CLIENTS} search clients", flush=True)
            vault = work / "vault"
            _seed(vault, args.notes)
            env = _env(url)
            subprocess.run(
                [sys.executable, "-m", "memcore", "--vault", str(vault), "index"],
                env=env, check=True, capture_output=True,
            )  # fmt: skip
            nodes = Nodes(vault, env, work)
            try:
                throughput(nodes, args, qs)
                failover(nodes, args, vault)
            finally:
                nodes.stop()


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--notes", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--failovers", type=int, default=5)
    ap.add_argument("--poll-files", type=int, default=10000, help="0: skip the polling part")
    main(ap.parse_args())
