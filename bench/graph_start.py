"""A start on a big index with no usable saved graph (first start past storage.ann_min_vectors,
or after `memcore reindex`): time to the first answer, time until the graph built in the
background takes over, and search latency (query embedding excluded) while it is built and after.

    python bench/search.py --sizes 100000 --embedder static    # builds the index once
    python bench/graph_start.py --vault /tmp/memcore-bench/vault-100000 --embedder static

The saved graph is moved aside for the run and put back after. Searches run one after another
with a 20 ms pause while the graph is built (a daemon answering now and then), then 200 more.
Prints numbers only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import questions
from bench.search import pct
from memcore.compose import open_service
from memcore.core.settings import load_settings
from memcore.storage.ann import AnnIndex


async def measure(vault: Path, embedder: str) -> dict[str, object]:
    settings = load_settings(vault, {"embedder.provider": embedder})
    qs = questions(600)
    async with open_service(settings) as svc:
        vecs = await svc.embedder.embed_queries(qs)
        vectors = svc.store._vectors  # type: ignore[attr-defined]  # SQLite only
        t0 = time.perf_counter()
        await svc.search(qs[0], query_vector=vecs[0])
        first = time.perf_counter() - t0
        during: list[float] = []
        after: list[float] = []
        swapped = None
        i = 0
        while len(after) < 200:
            i = i % (len(qs) - 1) + 1
            t = time.perf_counter()
            await svc.search(qs[i], query_vector=vecs[i])
            ms = (time.perf_counter() - t) * 1000
            if isinstance(vectors.get(svc.model_id), AnnIndex):
                swapped = swapped or time.perf_counter() - t0
                after.append(ms)
            else:
                during.append(ms)
                await asyncio.sleep(0.02)
    return {
        "first_answer_s": round(first, 2),
        "graph_in_place_s": round(swapped or 0, 1),
        "during_build_p50_ms": round(pct(during, 50), 1) if during else None,
        "during_build_p95_ms": round(pct(during, 95), 1) if during else None,
        "after_p50_ms": round(pct(after, 50), 1),
        "after_p95_ms": round(pct(after, 95), 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
    }


def graph_files(vault: Path) -> list[Path]:
    """The saved graphs and their files of float16 copies."""
    found = [
        *(vault / ".memcore").glob("index.db.*.hnsw"),
        *(vault / ".memcore").glob("index.db.*.vec"),
    ]
    return sorted(found)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--vault", type=Path, required=True)
    ap.add_argument("--embedder", default="local")
    args = ap.parse_args()
    saved = graph_files(args.vault)
    aside = [p.rename(p.with_name(p.name + ".aside")) for p in saved]
    try:
        print(json.dumps(asyncio.run(measure(args.vault, args.embedder))))
    finally:
        for path in graph_files(args.vault):
            path.unlink()  # the one this run built
        for p in aside:
            p.rename(p.with_name(p.name.removesuffix(".aside")))


if __name__ == "__main__":
    main()
