"""Write API speed (seed 003's acceptance): N `add` calls, each searchable when it returns,
then searches, then one `add_batch` of N. Real paragraphs from ../shared/eval as content.

    python bench/write.py [--n 1000] [--embedder local|static] [--users 1]

Prints add->searchable p50/p95, search p50/p95, the batch's wall time and peak RSS. With
--users U the adds rotate over U user scopes (U files); 1 puts every memory in one file, the
worst case for a write (the whole file is re-read and re-indexed).
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import paragraphs, questions
from memcore.compose import open_service
from memcore.core.settings import load_settings
from memcore.memory.writer import NewMemory
from memcore.vault.memory_format import Scope


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


async def main(args: argparse.Namespace) -> None:
    texts = [p[:600] for _, p in zip(range(2 * args.n), paragraphs(), strict=False)]
    qs = questions(200)
    with tempfile.TemporaryDirectory() as tmp:
        vault = Path(tmp) / "vault"
        (vault / "memory").mkdir(parents=True)
        (vault / "MEMORY.md").write_text("# Memory\n")
        settings = load_settings(vault, {"embedder.provider": args.embedder})
        async with open_service(settings) as svc:
            await svc.warm()
            adds = []
            for i in range(args.n):
                started = time.perf_counter()
                await svc.memories.add(texts[i], user_id=f"user{i % args.users}")
                adds.append((time.perf_counter() - started) * 1000)
            searches = []
            for q in qs:
                started = time.perf_counter()
                await svc.memories.search(q, user_id="user0", limit=5)
                searches.append((time.perf_counter() - started) * 1000)
            batch = [NewMemory(t, Scope(user_id="batch")) for t in texts[args.n : 2 * args.n]]
            started = time.perf_counter()
            await svc.memories.add_batch(batch)
            batch_s = time.perf_counter() - started
            count = await svc.memories.count()
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"embedder {args.embedder}, {args.n} adds over {args.users} scope file(s)")
    print(
        f"add -> searchable: p50 {statistics.median(adds):.1f} ms, p95 {pct(adds, 95):.1f} ms, "
        f"first 100 p50 {statistics.median(adds[:100]):.1f} ms, "
        f"last 100 p50 {statistics.median(adds[-100:]):.1f} ms"
    )
    print(
        f"search (scoped, {len(qs)} queries): p50 {statistics.median(searches):.1f} ms, "
        f"p95 {pct(searches, 95):.1f} ms"
    )
    print(f"add_batch of {len(batch)}: {batch_s:.2f} s ({len(batch) / batch_s:.0f} memories/s)")
    print(f"memories stored: {count}; peak RSS {rss:.0f} MB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--embedder", default="local", choices=["local", "static"])
    parser.add_argument("--users", type=int, default=1)
    asyncio.run(main(parser.parse_args()))
