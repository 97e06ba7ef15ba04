"""Index throughput, search latency and peak RSS at 1k / 10k / 100k chunks of real text.

    python bench/search.py                       # 1k, 10k, 100k with the default embedder
    python bench/search.py --sizes 1000 --embedder static --queries 100

Each size runs in a fresh subprocess (so peak RSS belongs to that size). Prints numbers only;
it never passes or fails on time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import build_vault, questions
from memcore.app import open_service
from memcore.models import SearchFilters
from memcore.settings import load_settings


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


async def measure(
    size: int, embedder: str, n_queries: int, workdir: Path, reuse: bool
) -> dict[str, object]:
    vault = workdir / f"vault-{size}"
    if not vault.exists():
        build_vault(vault, size)
    if not reuse:
        shutil.rmtree(vault / ".memcore", ignore_errors=True)
    settings = load_settings(vault, {"embedder.provider": embedder})
    qs = questions(n_queries)
    async with open_service(settings) as svc:
        t0 = time.perf_counter()
        report = await svc.index()
        index_s = time.perf_counter() - t0
        status = await svc.status()
        t0 = time.perf_counter()
        await svc.search("warm up")  # loads the vector matrix once
        load_ms = (time.perf_counter() - t0) * 1000
        vecs = await svc.embedder.embed_queries(qs)
        excl, incl, embed_only = [], [], []
        for q, v in zip(qs, vecs, strict=True):
            t0 = time.perf_counter()
            await svc.search(q, query_vector=v)
            excl.append((time.perf_counter() - t0) * 1000)
        for q in qs:
            t0 = time.perf_counter()
            await svc.embedder.embed_queries([q])
            embed_only.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            await svc.search(q)
            incl.append((time.perf_counter() - t0) * 1000)
        keyword = []  # the full-text part alone (FTS5 and its word counts)
        async with svc.store.snapshot() as reader:
            for q in qs:
                t0 = time.perf_counter()
                await reader.search_text(q, 20, SearchFilters())
                keyword.append((time.perf_counter() - t0) * 1000)
        cached = []  # the same text queries again: answered by the L1 cache
        for q in qs:
            t0 = time.perf_counter()
            await svc.search(q)
            cached.append((time.perf_counter() - t0) * 1000)
    return {
        "size": size,
        "embedder": settings.embedder.provider,
        "files": len(report.indexed),
        "chunks": status.chunks,
        "index_s": round(index_s, 1),
        "chunks_per_s": round(status.chunks / index_s, 1),
        "matrix_load_ms": round(load_ms, 1),
        "search_excl_p50_ms": round(statistics.median(excl), 2),
        "search_excl_p95_ms": round(pct(excl, 95), 2),
        "search_incl_p50_ms": round(statistics.median(incl), 2),
        "search_incl_p95_ms": round(pct(incl, 95), 2),
        "query_embed_p50_ms": round(statistics.median(embed_only), 2),
        "cached_p50_ms": round(statistics.median(cached), 3),
        "keyword_p50_ms": round(statistics.median(keyword), 2),
        "keyword_p95_ms": round(pct(keyword, 95), 2),
        "db_mb": round(status.db_bytes / 1e6, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "queries": len(qs),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--embedder", default="local")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/memcore-bench"))
    ap.add_argument("--reuse", action="store_true", help="keep an existing index (search only)")
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    if args.one:
        row = asyncio.run(measure(args.one, args.embedder, args.queries, args.workdir, args.reuse))
        print(json.dumps(row))
        return
    cols = [
        "size", "chunks", "embedder", "index_s", "chunks_per_s", "matrix_load_ms",
        "search_excl_p50_ms", "search_excl_p95_ms", "search_incl_p50_ms", "search_incl_p95_ms",
        "query_embed_p50_ms", "cached_p50_ms", "keyword_p50_ms", "keyword_p95_ms", "db_mb",
        "peak_rss_mb",
    ]  # fmt: skip
    print(" | ".join(cols))
    for size in (int(s) for s in args.sizes.split(",")):
        cmd = [sys.executable, __file__, "--one", str(size), "--embedder", args.embedder,
               "--queries", str(args.queries), "--workdir", str(args.workdir),
               *(["--reuse"] if args.reuse else [])]  # fmt: skip
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        row = json.loads(out.strip().splitlines()[-1])
        print(" | ".join(str(row[c]) for c in cols), flush=True)


if __name__ == "__main__":
    main()
