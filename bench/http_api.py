"""HTTP API speed: warm search over HTTP, then a bounded mixed load, against `memcore serve`.

    python bench/http_api.py                      # sample_vault (a copy), 50 clients for 30 s
    python bench/http_api.py --clients 12 --seconds 60   # the load issue 26 sets targets for
    python bench/http_api.py --size 10000         # a 10k-chunk vault of real text (built once)

The server runs in its own process (`memcore serve --no-watch`); this process is the clients.
Prints search p50/p95 (query embedding included), the load run's requests, errors and
p50/p95/p99 per kind, the same by thirds of the run with the server's CPU per request (the
load's memory file grows the whole time: a cost that grows with it shows as a slide), whether
every added memory is found afterwards, the CPU the server and the clients used during the
load (of 100% per core), and the server's peak RSS.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # (named http_api.py: a
# script called http.py would hide the standard library's http package from httpx)

from bench.corpus import build_vault, questions

REPO = Path(__file__).resolve().parent.parent


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))] if xs else float("nan")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_serve(vault: Path, env: dict[str, str]) -> tuple[subprocess.Popen[bytes], str]:
    """`memcore serve --no-watch` on the vault in its own process, once it answers /ready:
    the process and its URL."""
    port = free_port()
    cli = [sys.executable, "-m", "memcore", "--vault", str(vault)]
    server = subprocess.Popen([*cli, "serve", "--no-watch", "--port", str(port)], env=env)
    url = f"http://127.0.0.1:{port}"
    wait_ready(url)
    return server, url


def wait_ready(url: str, seconds: float = 30.0) -> None:
    """Until the server at ``url`` answers /ready (or ``seconds`` have passed)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/ready").status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)


def cpu_seconds(pid: int) -> float:
    """User + system CPU a process has used so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def rss_mb(pid: int) -> float:
    """The process's resident memory now."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def load(url: str, clients: int, seconds: float, qs: list[str], server: int) -> None:
    lat: dict[str, list[float]] = {"search": [], "add": []}
    ended: list[tuple[float, str, float]] = []  # (seconds into the run, kind, ms)
    errors: list[str] = []
    added: list[str] = []
    start = time.monotonic()
    deadline = start + seconds
    rng = random.Random(0)
    cpu = [cpu_seconds(server)]  # the server's, at each third of the run

    async def sample() -> None:
        for third in (1, 2, 3):
            await asyncio.sleep(max(0.0, start + third * seconds / 3 - time.monotonic()))
            cpu.append(cpu_seconds(server))

    async def client(n: int, http: httpx.AsyncClient) -> None:
        i = 0
        while time.monotonic() < deadline:
            i += 1
            kind = "add" if rng.random() < 0.1 else "search"
            started = time.perf_counter()
            try:
                if kind == "add":
                    text = f"load note {n}-{i}: {rng.choice(qs)}"
                    r = await http.post("/api/memories", json={"content": text, "user_id": "load"})
                    if r.status_code == 200:
                        added.append(r.json()["results"][0]["id"])
                else:
                    r = await http.post("/api/memory/search", json={"query": rng.choice(qs)})
                if r.status_code != 200:
                    errors.append(f"{kind} {r.status_code} {r.text[:80]}")
            except httpx.HTTPError as exc:
                errors.append(f"{kind} {type(exc).__name__}")
            lat[kind].append((time.perf_counter() - started) * 1000)
            ended.append((time.monotonic() - start, kind, lat[kind][-1]))

    limits = httpx.Limits(max_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as http:
        await asyncio.gather(sample(), *(client(n, http) for n in range(clients)))
        listed = await http.get("/api/memories", params={"user_id": "load", "limit": "10000"})
        found = {r["id"] for r in listed.json()["results"]}
    total = len(lat["search"]) + len(lat["add"])
    print(f"load: {clients} clients for {seconds:.0f} s: {total} requests "
          f"({total / seconds:.0f}/s), {len(errors)} errors")  # fmt: skip
    for kind, xs in lat.items():
        print(f"  {kind}: {len(xs)} requests, p50 {statistics.median(xs) if xs else 0:.1f} ms, "
              f"p95 {pct(xs, 95):.1f} ms, p99 {pct(xs, 99):.1f} ms")  # fmt: skip
    by_thirds(ended, cpu, seconds)
    print(f"  added memories found afterwards: {len(set(added) & found)} of {len(added)}")
    for e in errors[:5]:
        print("  error:", e)


def by_thirds(ended: list[tuple[float, str, float]], cpu: list[float], seconds: float) -> None:
    """p99 per kind and the server's CPU per request, in each third of the run."""
    thirds: list[list[tuple[str, float]]] = [[], [], []]
    for at, kind, ms in ended:
        thirds[min(2, int(3 * at / seconds))].append((kind, ms))
    for kind in ("search", "add"):
        p99s = " / ".join(f"{pct([ms for k, ms in t if k == kind], 99):.1f}" for t in thirds)
        print(f"  {kind} p99 by thirds of the run: {p99s} ms")
    spent = [b - a for a, b in itertools.pairwise(cpu)]
    per = [f"{1000 * s / max(1, len(t)):.2f}" for s, t in zip(spent, thirds, strict=True)]
    print(f"  server CPU per request by thirds: {' / '.join(per)} ms")


async def warm(url: str, qs: list[str]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        await http.post("/api/memory/search", json={"query": "warm up"})
        times = []
        for q in qs:
            started = time.perf_counter()
            r = await http.post("/api/memory/search", json={"query": q})
            r.raise_for_status()
            times.append((time.perf_counter() - started) * 1000)
        chunks = (await http.get("/api/status")).json()["chunks"]
    print(f"warm HTTP search over {chunks} chunks ({len(qs)} queries, embedding included): "
          f"p50 {statistics.median(times):.1f} ms, p95 {pct(times, 95):.1f} ms")  # fmt: skip


def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        if args.size:
            vault = args.workdir / f"http-vault-{args.size}"
            if not vault.exists():
                build_vault(vault, args.size)
        else:
            vault = Path(tmp) / "vault"
            shutil.copytree(REPO / "sample_vault", vault, ignore=shutil.ignore_patterns(".memcore"))
        env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": args.embedder}
        cli = [sys.executable, "-m", "memcore", "--vault", str(vault)]
        subprocess.run([*cli, "index"], env=env, check=True, capture_output=True)
        server, url = start_serve(vault, env)
        try:
            qs = questions(200)
            asyncio.run(warm(url, qs))
            served, ours, started = cpu_seconds(server.pid), time.process_time(), time.monotonic()
            asyncio.run(load(url, args.clients, args.seconds, qs, server.pid))
            wall = time.monotonic() - started
            server_cpu = 100 * (cpu_seconds(server.pid) - served) / wall
            clients_cpu = 100 * (time.process_time() - ours) / wall
            # is the machine saturated (2 cores = 200%), or is the latency waiting?
            print(f"CPU during the load: server {server_cpu:.0f}%, clients {clients_cpu:.0f}%")
            print(f"server peak RSS {peak_rss_mb(server.pid):.0f} MB")
        finally:
            server.terminate()
            server.wait(30)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=0, help="chunks (0 = sample_vault)")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--embedder", default="local", choices=["local", "static"])
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/memcore-bench"))
    main(parser.parse_args())
