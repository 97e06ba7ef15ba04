"""What the git hook costs a commit: `git commit` wall time without and with the memcore hook
(every commit marked [Memory]), back to back (the runs of earlier commits compete for the CPU)
and spaced (one commit after the last run finished), and how long until every entry is in
MEMORY.md, once each.

    python bench/hook.py [--commits 20] [--embedder static|local]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


def main(args: argparse.Namespace) -> None:
    who = {f"GIT_{role}_{key}": value for role in ("AUTHOR", "COMMITTER")
           for key, value in (("NAME", "b"), ("EMAIL", "b@x"))}  # fmt: skip
    env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": args.embedder, **who}
    with tempfile.TemporaryDirectory() as tmp:
        repo = Path(tmp)

        def sh(*cmd: str) -> None:
            subprocess.run(cmd, cwd=repo, env=env, check=True, capture_output=True)

        sh("git", "init", "-q")
        (repo / "MEMORY.md").write_text("# Memory\n")
        sh("git", "add", "-A")
        sh("git", "commit", "-q", "-m", "start")

        def commits(tag: str, n: int, pause: float = 0.0) -> list[float]:
            times = []
            for i in range(n):
                time.sleep(pause)
                (repo / "work.txt").write_text(f"{tag} {i}\n")
                sh("git", "add", "work.txt")
                started = time.perf_counter()
                sh("git", "commit", "-q", "-m", f"[Memory] {tag} change {i}\n\nWhy: bench.")
                times.append((time.perf_counter() - started) * 1000)
            return times

        plain = commits("plain", args.commits)
        sh(sys.executable, "-m", "memcore", "--vault", str(repo), "hook", "install")
        spaced = commits("spaced", 5, pause=3.0)
        hooked = commits("hooked", args.commits)
        started = time.perf_counter()
        last = f"hooked change {args.commits - 1}"
        while last not in (repo / "MEMORY.md").read_text() and time.perf_counter() - started < 120:
            time.sleep(0.05)
        landed = time.perf_counter() - started
        log = repo / ".memcore" / "hook.log"
        while time.perf_counter() - started < 120:  # every hook run has finished (and logged)
            if log.exists() and len(log.read_text().splitlines()) >= args.commits + 5:
                break
            time.sleep(0.05)
        time.sleep(1)  # a late duplicate would land now
        entries = (repo / "MEMORY.md").read_text().count("## [")
    print(f"{args.commits} commits each, embedder {args.embedder}")
    print(f"git commit without hook: p50 {statistics.median(plain):.1f} ms, "
          f"p95 {pct(plain, 95):.1f} ms")  # fmt: skip
    print(f"git commit with hook, spaced 3 s: p50 {statistics.median(spaced):.1f} ms, "
          f"max {max(spaced):.1f} ms")  # fmt: skip
    print(f"git commit with hook, back to back: p50 {statistics.median(hooked):.1f} ms, "
          f"p95 {pct(hooked, 95):.1f} ms")  # fmt: skip
    base = statistics.median(plain)
    print(
        f"added by the hook: spaced p50 {statistics.median(spaced) - base:.1f} ms, "
        f"back to back p50 {statistics.median(hooked) - base:.1f} ms"
    )
    print(
        f"{entries} entries for {args.commits + 5} marked commits; the last in MEMORY.md "
        f"{landed:.1f} s after its commit"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commits", type=int, default=20)
    parser.add_argument("--embedder", default="static", choices=["static", "local"])
    main(parser.parse_args())
