"""Memory for a fleet: N memories over U users through `memcore add --file` (static embedder),
then scoped and unscoped search, then `memcore watch` over those files. Real text from
../shared/eval (questions, each made unique by its number).

    python bench/fleet.py [--memories 1000000] [--users 10000] [--queries 200] [--pg]
    python bench/fleet.py --users 10000 --reuse    # search the last run's vault again

Prints, for SQLite (or PostgreSQL with --pg, on a pgserver it starts; the one on PYTHONPATH,
and MEMCORE_STORAGE_KEYWORD_INDEX=builtin keeps pg_textsearch out where it is installed):
- the batch: wall time, memories/s, the CLI's peak RSS, index size (and per memory);
- search with the result cache off, in a fresh process as a restarted daemon would: time to
  open the index and answer a first search, then p50/p95 of ``--queries`` searches scoped
  to a random user, and of the same questions unscoped;
- `memcore watch`: start-up to ready with nothing changed, and catch-up to ready after 100
  memory files were changed by hand while it was down.
Numbers only; it never passes or fails on time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import questions

# runs a command and prints on the last lines of stderr its phases (JSON: a batch ends by
# exec'ing `memcore prepare-search`, the graph's build, in the same pid; each phase's seconds
# and peak RSS in KB, sampled every 0.2 s from /proc) and its peak RSS (KB)
MEASURED = """
import json, resource, subprocess, sys, time
started = time.perf_counter()
proc = subprocess.Popen(sys.argv[1:])
phases = {}
while proc.poll() is None:
    try:
        with open(f"/proc/{proc.pid}/cmdline", "rb") as fh:
            words = fh.read().split(b"\\0")
        with open(f"/proc/{proc.pid}/status") as fh:
            rss = next(int(line.split()[1]) for line in fh if line.startswith("VmRSS"))
    except (OSError, StopIteration, ValueError):  # gone meanwhile, or no /proc
        rss, words = 0, []
    if words:
        name = "graph" if b"prepare-search" in words else "load"
        phase = phases.setdefault(name, {"from": time.perf_counter() - started, "peak": 0})
        phase["peak"] = max(phase["peak"], rss)
    time.sleep(0.2)
ended = time.perf_counter() - started
for name, phase in phases.items():
    later = [p["from"] for p in phases.values() if p["from"] > phase["from"]]
    phase["s"] = (min(later) if later else ended) - phase["from"]
print(json.dumps(phases), file=sys.stderr)
print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, file=sys.stderr)
sys.exit(proc.returncode)
"""

SEARCH = """
import asyncio, json, random, statistics, sys, time
from pathlib import Path
from memcore import load_settings, open_service

async def main(vault, users, qs):
    started = time.perf_counter()
    async with open_service(load_settings(Path(vault))) as svc:
        await svc.warm()
        await svc.memories.search(qs[0], user_id="u0", limit=5)
        first = time.perf_counter() - started
        rnd = random.Random(7)
        out = {"first_search_s": first}
        for label in ("scoped", "unscoped"):
            times = []
            for q in qs[1:]:
                scope = {"user_id": f"u{rnd.randrange(users)}"} if label == "scoped" else {}
                t = time.perf_counter()
                await svc.memories.search(q, limit=5, **scope)
                times.append((time.perf_counter() - t) * 1000)
            times.sort()
            out[label] = (statistics.median(times), times[int(len(times) * 0.95)])
    print(json.dumps(out))

asyncio.run(main(sys.argv[1], int(sys.argv[2]), json.loads(sys.stdin.read())))
"""


def measured(cmd: list[str], **kw: object) -> tuple[float, float, str, str]:
    """(wall seconds, peak RSS MB, stdout, its phases in words) of a command."""
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", MEASURED, *cmd], capture_output=True, text=True, **kw
    )  # type: ignore[call-overload]
    wall = time.perf_counter() - started
    if done.returncode:
        raise SystemExit(f"{' '.join(cmd[:6])} failed: {done.stderr.strip()[-2000:]}")
    *_, phases, peak_kb = done.stderr.strip().splitlines()
    said = [f"{name} {p['s']:.0f} s, peak {p['peak'] / 1024:.0f} MB"  # sampled: a floor
            for name, p in json.loads(phases).items()]  # fmt: skip
    return wall, int(peak_kb) / 1024, done.stdout, "; ".join(said)


def tree_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def index_size(vault: Path, db: str | None) -> int:
    if db is None:
        return tree_size(vault / ".memcore")
    import psycopg

    with psycopg.connect(db) as conn:
        row = conn.execute("SELECT pg_database_size(current_database())").fetchone()
    return int(row[0]) if row else 0


def wait_ready(memcore: list[str], env: dict[str, str], seconds: float = 3600) -> float:
    """Seconds until the running daemon reports it has caught up."""
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        out = subprocess.run([*memcore, "status", "--json"], capture_output=True, text=True,
                             env=env)  # fmt: skip
        info = json.loads(out.stdout) if out.returncode == 0 else {}
        if info.get("daemon") and (info.get("readiness") or {}).get("phase") == "ready":
            return time.perf_counter() - started
        time.sleep(0.2)
    raise SystemExit("the watcher never became ready")


def watch_once(memcore: list[str], env: dict[str, str]) -> float:
    proc = subprocess.Popen([*memcore, "watch"], env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        return wait_ready(memcore, env)
    finally:
        subprocess.run([*memcore, "stop"], env=env, capture_output=True)
        proc.wait(timeout=120)


def build(
    args: argparse.Namespace,
    work: Path,
    vault: Path,
    db: str | None,
    memcore: list[str],
    env: dict[str, str],
) -> None:
    """The vault: N memories over U users through one timed `add --file`."""
    texts = questions(50_000)
    subprocess.run([*memcore, "init", str(vault)], check=True, capture_output=True, env=env)
    lines = work / "batch.jsonl"
    with lines.open("w", encoding="utf-8") as fh:
        for n in range(args.memories):
            text = f"{texts[n % len(texts)]} (memory {n})"
            fh.write(json.dumps({"memory": text, "user_id": f"u{n % args.users}"}) + "\n")
    wall, peak, _, phases = measured([*memcore, "add", "--file", str(lines)], env=env)
    size = index_size(vault, db)
    backend = "PostgreSQL" if db else "SQLite"
    print(
        f"{backend}: {args.memories:,} memories over {args.users:,} users, add --file: "
        f"{wall:.0f} s, {args.memories / wall:,.0f} memories/s, peak RSS {peak:.0f} MB "
        f"({phases})"
    )
    print(
        f"index {size / 1e6:,.0f} MB ({size / args.memories / 1024:.1f} KB a memory); "
        f"Markdown {tree_size(vault / 'memory') / 1e6:,.0f} MB"
    )


def main(args: argparse.Namespace) -> None:
    work = Path(args.workdir)
    if not args.reuse:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
    elif not (work / "vault").is_dir():
        raise SystemExit(f"--reuse: no vault in {work}; run without it first")
    with contextlib.ExitStack() as stack:
        db = None
        if args.pg:
            from tests.pg_server import running_server  # pgserver, as the tests start it

            db, versions = stack.enter_context(running_server(work / "pg"))
            print(f"PostgreSQL: {versions}")
        vault = work / "vault"
        memcore = [sys.executable, "-m", "memcore", "--vault", str(vault), "--embedder", "static"]
        if db:
            memcore += ["--db", db]
        env = {**os.environ, "MEMCORE_SEARCH_CACHE_SIZE": "0"}
        if not args.reuse:
            build(args, work, vault, db, memcore, env)
        qs = questions(args.queries + 1 + 500)[500:]
        found = subprocess.run([sys.executable, "-c", SEARCH, str(vault), str(args.users)],
                               input=json.dumps(qs), capture_output=True, text=True, env={
                                   **env, "PYTHONPATH": str(Path(__file__).parent.parent),
                                   **({"MEMCORE_DB": db} if db else {}),
                                   "MEMCORE_EMBEDDER": "static"}, check=True)  # fmt: skip
        s = json.loads(found.stdout.strip().splitlines()[-1])
        status = subprocess.run([*memcore, "status", "--json"], capture_output=True, text=True,
                                env=env, check=True)  # fmt: skip
        print(f"engine: {json.loads(status.stdout).get('engine')}")
        print(
            f"open + first search {s['first_search_s']:.1f} s; search (cache off, "
            f"{args.queries} questions): scoped to a user p50 {s['scoped'][0]:.1f} ms, p95 "
            f"{s['scoped'][1]:.1f} ms; unscoped p50 {s['unscoped'][0]:.1f} ms, p95 "
            f"{s['unscoped'][1]:.1f} ms"
        )
        start = watch_once(memcore, env)
        for n in range(100):  # a person edits 100 users' files while the watcher is down
            page = vault / "memory/users" / f"u{n}" / "core.md"
            with page.open("a", encoding="utf-8") as fh:
                fh.write(f"- a note added by hand to u{n}\n")
        catch_up = watch_once(memcore, env)
        print(
            f"watch: start-up to ready {start:.1f} s; after 100 files changed while it was "
            f"down, catch-up to ready {catch_up:.1f} s"
        )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memories", type=int, default=1_000_000)
    ap.add_argument("--users", type=int, default=10_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--pg", action="store_true", help="PostgreSQL (pgserver) instead of SQLite")
    ap.add_argument("--workdir", default=str(Path(tempfile.gettempdir()) / "memcore-fleet"))
    ap.add_argument(
        "--reuse", action="store_true", help="search (and watch) the vault --workdir holds"
    )
    main(ap.parse_args())
