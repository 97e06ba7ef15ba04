"""The first write after a start with a saved graph: how long the event loop stalls, and how
slow searches get, while the memory-mapped graph is read into memory for its first change.

    python bench/search.py --sizes 100000 --embedder static    # builds the index once
    python bench/first_write.py --vault /tmp/memcore-bench/vault-100000 --embedder static

Opens and warms the service as the daemon does, answers one search (the graph is mapped),
then adds memories one after another while a ticker task sleeps 5 ms at a time (its lateness
is the time the loop was blocked) and searches run back to back. The first add reads the graph
in; the later ones show the steady state. The memories are deleted again afterwards.
Prints numbers only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import questions
from bench.loop_lag import ticker
from bench.search import pct, peak_rss_mb
from memcore.compose import open_service
from memcore.core.settings import load_settings

ADDS = 5


async def measure(vault: Path, embedder: str) -> dict[str, object]:
    settings = load_settings(vault, {"embedder.provider": embedder})
    qs = questions(400)
    async with open_service(settings) as svc:
        await svc.warm()  # as the daemon does before it serves: segmenter and model loaded
        vecs = await svc.embedder.embed_queries(qs)
        await svc.search(qs[0], query_vector=vecs[0])
        rss_before = peak_rss_mb()
        searches: list[float] = []
        done = asyncio.Event()

        async def searcher() -> None:
            i = 0
            while not done.is_set():
                i = i % (len(qs) - 1) + 1
                t = time.perf_counter()
                await svc.search(qs[i], query_vector=vecs[i])
                searches.append((time.perf_counter() - t) * 1000)

        rounds: list[dict[str, float]] = []
        added = []
        for n in range(ADDS):
            lags: list[float] = []
            stop = asyncio.Event()
            done.clear()
            searches.clear()
            tick = asyncio.create_task(ticker(stop, lags))
            search = asyncio.create_task(searcher())
            await asyncio.sleep(0.05)
            t = time.perf_counter()
            added += await svc.memories.add(f"first write bench note {n}: the heron's nest")
            took = (time.perf_counter() - t) * 1000
            await asyncio.sleep(0.05)
            stop.set()
            done.set()
            await asyncio.gather(tick, search)
            rounds.append({
                "add_ms": round(took, 1),
                "loop_stall_max_ms": round(max(lags), 1),
                "search_p50_ms": round(pct(searches, 50), 1),
                "search_max_ms": round(max(searches), 1),
            })  # fmt: skip
        for record in added:
            await svc.memories.delete(record.id)
    later = rounds[1:]
    return {
        "first_add_ms": rounds[0]["add_ms"],
        "first_loop_stall_max_ms": rounds[0]["loop_stall_max_ms"],
        "first_search_max_ms": rounds[0]["search_max_ms"],
        "later_add_ms": round(pct([r["add_ms"] for r in later], 50), 1),
        "later_loop_stall_max_ms": max(r["loop_stall_max_ms"] for r in later),
        "later_search_max_ms": max(r["search_max_ms"] for r in later),
        "peak_rss_before_mb": rss_before,
        "peak_rss_mb": peak_rss_mb(),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vault", type=Path, required=True)
    ap.add_argument("--embedder", default="local")
    args = ap.parse_args()
    print(json.dumps(asyncio.run(measure(args.vault, args.embedder))))


if __name__ == "__main__":
    main()
