"""Save-to-searchable latency of `memcore watch`, and the time to absorb a 1,000-file burst.

    python bench/watch.py [--edits 60] [--burst 1000] [--embedder local]

Runs the real CLI daemon on a copy of sample_vault. "Searchable" means the new text is in the
full-text index and its chunk has a vector from the current model (hybrid search finds it).
Prints numbers only.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def searchable(db: Path, token: str) -> bool:
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
            row = conn.execute(
                "SELECT c.embedding IS NOT NULL FROM memory_fts f JOIN memory_chunks c "
                "ON c.id = f.rowid WHERE memory_fts MATCH ? LIMIT 1",
                (f'"{token}"',),
            ).fetchone()
    except sqlite3.Error:
        return False
    return bool(row and row[0])


def count_with_vectors(db: Path, prefix: str) -> int:
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=1) as conn:
        return int(
            conn.execute(
                "SELECT count(DISTINCT source_file) FROM memory_chunks "
                "WHERE source_file LIKE ? AND embedding IS NOT NULL",
                (prefix + "%",),
            ).fetchone()[0]
        )


def wait(pred, timeout: float = 120.0) -> float:  # type: ignore[no-untyped-def]
    start = time.perf_counter()
    while time.perf_counter() - start < timeout:
        if pred():
            return time.perf_counter() - start
        time.sleep(0.005)
    raise TimeoutError("condition not reached")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--edits", type=int, default=60)
    ap.add_argument("--burst", type=int, default=1000)
    ap.add_argument("--embedder", default="local")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="memcore-watch-bench-"))
    vault = work / "vault"
    shutil.copytree(ROOT / "sample_vault", vault, ignore=shutil.ignore_patterns(".memcore"))
    db = vault / ".memcore" / "index.db"
    env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": args.embedder}
    proc = subprocess.Popen(
        [sys.executable, "-m", "memcore", "--vault", str(vault), "watch"],
        env=env, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        status = vault / ".memcore" / "daemon.json"
        wait(lambda: status.exists() and '"watching": true' in status.read_text(), 60)
        files = sorted(p for p in vault.rglob("*.md") if ".memcore" not in p.parts)
        rng = random.Random(1)
        lat: list[float] = []
        for i in range(args.edits):
            target = rng.choice(files)
            token = f"benchtoken{i:04d}x"
            t0 = time.perf_counter()
            with target.open("a", encoding="utf-8") as fh:
                fh.write(f"\n\nEdit {i}: remember {token} for the latency benchmark.\n")
            wait(lambda token=token: searchable(db, token))
            lat.append((time.perf_counter() - t0) * 1000)
            time.sleep(0.05)
        print(f"save-to-searchable over {len(lat)} edits ({args.embedder} embedder):")
        print(
            f"  p50 {statistics.median(lat):.0f} ms  p95 {pct(lat, 95):.0f} ms  "
            f"max {max(lat):.0f} ms  min {min(lat):.0f} ms"
        )
        burst_dir = vault / "memory" / "burst"
        burst_dir.mkdir()
        t0 = time.perf_counter()
        for i in range(args.burst):
            (burst_dir / f"{i:04d}.md").write_text(
                f"# Burst {i}\n\nNote {i} written by a git checkout of another branch.\n",
                encoding="utf-8",
            )
        written = time.perf_counter() - t0
        absorbed = written + wait(
            lambda: count_with_vectors(db, "memory/burst/") == args.burst, 600
        )
        print(
            f"burst of {args.burst} new files: written in {written:.2f} s, all searchable "
            f"{absorbed:.2f} s after the first write ({args.burst / absorbed:.0f} files/s)"
        )
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
