"""One-shot CLI latency: wall time of N cold `memcore search` and `memcore add` runs on the
sample vault (and a Chinese search, which needs jieba's dictionary; an add of the same text
each run, and of a new memory each run, which the model embeds), with no daemon (the
command opens the index and loads the model) and beside a running `memcore watch` (the
command asks the daemon on its Unix socket), next to `python -c pass` in the same run; and
beside the daemon, the reads `list`, `count`, `get`, `history`, `entities` and `status`.

    python bench/cli.py [--runs 20] [--query "render engine"]

Works on a copy of sample_vault in a temporary folder; prints median, p95 and min per case.
memcore's own modules are compiled to bytecode first, as an install does (an editable install
run with PYTHONDONTWRITEBYTECODE=1 would compile every module on every run, ~75 ms).
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def memcore_cmd(vault: Path, *args: str) -> list[str]:
    exe = Path(sys.executable).parent / "memcore"
    base = [str(exe)] if exe.exists() else [sys.executable, "-m", "memcore"]
    return [*base, "--vault", str(vault), *args]


def compile_memcore() -> None:
    """Bytecode for the memcore that ``memcore`` runs (the first one on sys.path)."""
    where = subprocess.run(
        [sys.executable, "-c", "import memcore, os; print(os.path.dirname(memcore.__file__))"],
        check=True, capture_output=True, text=True, cwd=tempfile.gettempdir(),
    ).stdout.strip()  # fmt: skip
    subprocess.run([sys.executable, "-m", "compileall", "-q", where], check=True,
                   capture_output=True)  # fmt: skip


def timed(cmd: list[str], runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        out.append((time.perf_counter() - t0) * 1000)
    return out


def new_adds(vault: Path, runs: int) -> list[float]:
    """`add` of a memory never seen before, each run (the model embeds it), where "add again"
    adds the same text each time (its vector is known after the first)."""
    out = []
    for n in range(runs):
        cmd = memcore_cmd(vault, "add", f"bench note {n}: topic {n * 7919 % 1000}", "--user", "new")
        out += timed(cmd, 1)
    return out


def summary(name: str, ms: list[float]) -> dict[str, object]:
    ordered = sorted(ms)
    return {
        "case": name,
        "runs": len(ms),
        "median_ms": round(statistics.median(ms), 1),
        "p95_ms": round(ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))], 1),
        "min_ms": round(ordered[0], 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--query", default="render engine")
    ap.add_argument("--chinese", default="渲染引擎的默认设置")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    compile_memcore()
    with tempfile.TemporaryDirectory() as tmp:
        vault = Path(tmp) / "vault"
        shutil.copytree(REPO / "sample_vault", vault, ignore=shutil.ignore_patterns(".memcore"))
        subprocess.run(memcore_cmd(vault, "index"), check=True, capture_output=True)
        search = memcore_cmd(vault, "search", args.query)
        add = memcore_cmd(vault, "add", "the bench adds this note", "--user", "bench")
        chinese = memcore_cmd(vault, "search", args.chinese)
        rows = [summary("python -c pass", timed([sys.executable, "-c", "pass"], args.runs))]
        rows.append(summary("search, no daemon", timed(search, args.runs)))
        rows.append(summary("Chinese search, no daemon", timed(chinese, max(args.runs // 4, 3))))
        rows.append(summary("add again, no daemon", timed(add, args.runs)))
        rows.append(summary("add a new memory, no daemon", new_adds(vault, args.runs)))
        subprocess.run(memcore_cmd(vault, "watch", "--detach"), check=True, capture_output=True)
        try:
            rows.append(summary("search beside memcore watch", timed(search, args.runs)))
            rows.append(summary("Chinese search beside watch", timed(chinese, args.runs)))
            rows.append(summary("add beside memcore watch", timed(add, args.runs)))
            listed = subprocess.run(memcore_cmd(vault, "list", "--user", "bench", "--json"),
                                    check=True, capture_output=True, text=True).stdout  # fmt: skip
            mid = json.loads(listed)[0]["id"]
            for name, cmd in [
                ("list", ["list", "--user", "bench"]), ("count", ["count"]),
                ("get", ["get", mid]), ("history", ["history", mid]),
                ("entities", ["entities"]), ("status", ["status"]),
            ]:  # fmt: skip
                rows.append(summary(f"{name} beside memcore watch",
                                    timed(memcore_cmd(vault, *cmd), args.runs)))  # fmt: skip
        finally:
            subprocess.run(memcore_cmd(vault, "stop"), check=True, capture_output=True)
        rows.append(summary("memcore --version", timed(memcore_cmd(vault, "--version"), 10)))
    if args.json:
        print(json.dumps(rows))
        return
    for r in rows:
        print(f"{r['case']:<32} median {r['median_ms']:>7} ms  p95 {r['p95_ms']:>7} ms  "
              f"min {r['min_ms']:>7} ms  ({r['runs']} runs)")  # fmt: skip


if __name__ == "__main__":
    main()
