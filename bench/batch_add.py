"""`memcore add --file` of N memories from JSON lines, in a fresh vault: wall time, memories
per second and the CLI process's peak RSS (real text: paragraphs of the eval sets' corpus).

    python bench/batch_add.py [--n 10000] [--users 10] [--embedder static|local]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import questions


def main(args: argparse.Namespace) -> None:
    texts = questions(args.n)
    with tempfile.TemporaryDirectory() as tmp:
        vault = Path(tmp) / "vault"
        memcore = [sys.executable, "-m", "memcore", "--vault", str(vault)]
        subprocess.run([*memcore, "init", str(vault)], check=True, capture_output=True)
        lines = Path(tmp) / "batch.jsonl"
        with lines.open("w", encoding="utf-8") as fh:
            for n in range(args.n):
                text = f"{texts[n % len(texts)]} (note {n})"
                fh.write(json.dumps({"memory": text, "user_id": f"u{n % args.users}"}) + "\n")
        started = time.perf_counter()
        out = subprocess.run(
            [*memcore, "--embedder", args.embedder, "add", "--file", str(lines)],
            check=True, capture_output=True, text=True,
        )  # fmt: skip
        wall = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(out.stdout.strip())
    print(f"{args.n} memories over {args.users} users, embedder {args.embedder}: {wall:.1f} s, "
          f"{args.n / wall:.0f} memories/s, peak RSS {peak:.0f} MB")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=10_000)
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--embedder", default="static", choices=["static", "local"])
    main(parser.parse_args())
