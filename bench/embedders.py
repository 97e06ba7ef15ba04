"""Compare the in-process embedders: artifact size, load time, query latency, throughput.

    python bench/embedders.py [--chunks 500]

Throughput is measured on real paragraphs from ../shared/eval cut to the default window
(800 characters). Prints numbers only.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import paragraphs, questions
from memcore.embedders.local import ASSETS, OnnxMiniLMEmbedder, StaticMiniLMEmbedder


def folder_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


async def measure(
    cls: type[OnnxMiniLMEmbedder], texts: list[str], qs: list[str]
) -> dict[str, float]:
    emb = cls()
    t0 = time.perf_counter()
    await emb.embed(["load"])
    load_ms = (time.perf_counter() - t0) * 1000
    lat = []
    for q in qs:
        t0 = time.perf_counter()
        await emb.embed([q])
        lat.append((time.perf_counter() - t0) * 1000)
    t0 = time.perf_counter()
    for i in range(0, len(texts), 32):
        await emb.embed(texts[i : i + 32])
    rate = len(texts) / (time.perf_counter() - t0)
    return {
        "artifact_mb": round(folder_mb(ASSETS / cls.folder), 1),
        "load_ms": round(load_ms),
        "query_ms_p50": round(statistics.median(lat), 2),
        "chunks_per_s": round(rate, 1),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=500)
    args = ap.parse_args()
    pool = list(paragraphs())
    random.Random(0).shuffle(pool)
    texts = [p[:800] for p in pool[: args.chunks]]
    qs = questions(100)
    print("model | artifact_mb | load_ms | query_ms_p50 | chunks_per_s")
    for cls in (OnnxMiniLMEmbedder, StaticMiniLMEmbedder):
        row = asyncio.run(measure(cls, texts, qs))
        print(" | ".join([cls.model_id, *(str(v) for v in row.values())]))


if __name__ == "__main__":
    main()
