"""Index throughput, search latency, recall and RSS at 1k / 10k / 100k / 1M chunks of real text.

    python bench/search.py                       # 1k, 10k, 100k with the default embedder
    python bench/search.py --sizes 1000,10000,100000,1000000 --embedder static
    python bench/search.py --sizes 10000,100000 --db postgresql://user@host/db  # and PostgreSQL

Each size runs two fresh processes: one indexes (and saves the vector graph past
storage.ann_min_vectors, as ``memcore index`` does), one starts on the finished index as a
daemon would and searches, so start-to-searchable and daemon RSS are a restart's, not the
indexer's. Latencies are timed after WARM_UP other
questions, as in a daemon that has been answering for a while, each pass on questions no
earlier pass asked. recall10_vs_exact compares the
vector search (the HNSW graph past storage.ann_min_vectors) with an exact scan of every stored
vector. gold_hit10 is the share of other real questions whose top 10 holds a paragraph of a
file that answers them (the eval sets' gold files), among everything else in the vault.
Prints numbers only; it never passes or fails on time.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import resource
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np

from bench.corpus import build_vault, entry_sources, gold_questions, questions
from memcore.compose import open_service
from memcore.core.models import SearchFilters
from memcore.core.settings import load_settings
from memcore.service import MemoryService

WARM_UP = 100  # questions asked before the timed ones


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def peak_rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


async def measure_index(
    size: int, embedder: str, workdir: Path, reuse: bool, options: dict[str, object]
) -> dict[str, object]:
    """Phase 1, its own process: index the vault, then, as ``memcore index`` does, build and
    save the HNSW graph past storage.ann_min_vectors (the matrix below it is built per start)."""
    vault = workdir / f"vault-{size}"
    if not vault.exists():
        build_vault(vault, size)
    if not reuse:
        shutil.rmtree(vault / ".memcore", ignore_errors=True)
    settings = load_settings(vault, {"embedder.provider": embedder, **options})
    if settings.database_url and not reuse:
        await drop_namespace(settings.database_url, settings.namespace)
    # not caught up on opening (a new index is, since e7d502c): the index is what is timed
    async with open_service(settings, catch_up=False) as svc:
        t0 = time.perf_counter()
        report = await svc.index()
        index_s = time.perf_counter() - t0
        status = await svc.status()
        t0 = time.perf_counter()
        await svc.prepare_search()  # as `memcore index` does: the graph, past ann_min_vectors
        build_s = time.perf_counter() - t0
    return {
        "chunks": status.chunks,
        "index_s": round(index_s, 1) if report.indexed else "reused",
        "chunks_per_s": round(status.chunks / index_s, 1) if report.indexed else "-",
        "vectors_build_s": round(build_s, 1),
        "db_mb": round(status.db_bytes / 1e6, 1),
        "index_rss_mb": peak_rss_mb(),
    }


async def measure_search(
    size: int, embedder: str, n_queries: int, workdir: Path, options: dict[str, object]
) -> dict[str, object]:
    """Phase 2, a fresh process on the built index, as a daemon starting: time to the first
    vector search, latencies, recall@10 of the vector search against exact, peak RSS."""
    settings = load_settings(workdir / f"vault-{size}", {"embedder.provider": embedder, **options})
    # Each timed pass asks questions no pass asked before (a question asked again would find
    # its pages in the cache), after WARM_UP others, as in a daemon answering for a while.
    asked = questions(WARM_UP + 3 * n_queries)
    others, qs = asked[:WARM_UP], asked[WARM_UP : WARM_UP + n_queries]
    qs_incl, qs_keyword = asked[WARM_UP + n_queries :: 2], asked[WARM_UP + n_queries + 1 :: 2]
    t_open = time.perf_counter()
    async with open_service(settings) as svc:
        open_s = time.perf_counter() - t_open
        vecs = await svc.embedder.embed_queries(qs)  # the model loads here, outside the timing
        t0 = time.perf_counter()
        await svc.search(others[0], query_vector=vecs[0])
        first_s = time.perf_counter() - t0
        await svc.warm()  # as a daemon does at start (the Chinese segmenter, for a vault with any)
        for q in others:
            await svc.search(q)
        excl, incl, embed_only = [], [], []
        for q, v in zip(qs, vecs, strict=True):
            t0 = time.perf_counter()
            await svc.search(q, query_vector=v)
            excl.append((time.perf_counter() - t0) * 1000)
        for q in qs_incl:  # questions never embedded: the search embeds each one
            t0 = time.perf_counter()
            await svc.search(q)
            incl.append((time.perf_counter() - t0) * 1000)
        for q in qs_keyword:  # (embedding them first left the search a cached vector)
            t0 = time.perf_counter()
            await svc.embedder.embed_queries([q])
            embed_only.append((time.perf_counter() - t0) * 1000)
        keyword = []  # the full-text part alone (FTS5 and its word counts)
        async with svc.store.snapshot() as reader:
            for q in qs_keyword:
                t0 = time.perf_counter()
                await reader.search_text(q, 20, SearchFilters())
                keyword.append((time.perf_counter() - t0) * 1000)
        cached = []  # the same text queries again: answered by the L1 cache
        for q in qs_incl:
            t0 = time.perf_counter()
            await svc.search(q)
            cached.append((time.perf_counter() - t0) * 1000)
        rss = peak_rss_mb()  # before the exact answers below, which only the bench needs
        recall = await recall_at_10(svc, vecs)
        gold = await gold_hit_at_10(svc, gold_questions(n_queries, skip=len(asked)), size)
    return {
        "start_to_searchable_ms": round((open_s + first_s) * 1000, 1),
        "search_excl_p50_ms": round(statistics.median(excl), 2),
        "search_excl_p95_ms": round(pct(excl, 95), 2),
        "search_incl_p50_ms": round(statistics.median(incl), 2),
        "search_incl_p95_ms": round(pct(incl, 95), 2),
        "query_embed_p50_ms": round(statistics.median(embed_only), 2),
        "cached_p50_ms": round(statistics.median(cached), 3),
        "keyword_p50_ms": round(statistics.median(keyword), 2),
        "keyword_p95_ms": round(pct(keyword, 95), 2),
        "recall10_vs_exact": round(recall, 4),
        "gold_hit10": gold,
        "daemon_rss_mb": rss,
        "queries": len(qs),
    }


async def gold_hit_at_10(
    svc: MemoryService, asked: list[tuple[str, set[tuple[str, str]]]], size: int
) -> str:
    """Share of questions whose top 10 (hybrid search) holds a paragraph from a file that
    answers them, among every other paragraph of the vault, as "share/questions". Only
    questions with an answering paragraph in this vault count (a small vault holds few);
    copies of a paragraph (past the corpus end the vault cycles) count alike."""
    sources = entry_sources()
    present = set(sources[: min(size, len(sources))])
    hits = 0
    asked = [(q, gold) for q, gold in asked if gold & present]
    for question, gold in asked:
        result = await svc.search(question, limit=10)
        entries = (re.search(r"Entry (\d+)", h.heading) for h in result.hits)
        hits += any(sources[int(m.group(1)) % len(sources)] in gold for m in entries if m)
    return f"{hits / max(len(asked), 1):.3f}/{len(asked)}"


async def drop_namespace(url: str, namespace: str) -> None:
    """A fresh start for this size in PostgreSQL (its chunks and memories go with the files)."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        for table in ("files", "meta", "skipped_files", "embedding_cache", "generation"):
            try:
                await conn.execute(f"DELETE FROM {table} WHERE ns = %s", (namespace,))
            except psycopg.errors.UndefinedTable:
                return  # a database memcore has not used yet


async def exact_top10(svc: MemoryService, q: np.ndarray) -> list[set[int]]:
    """The exact top 10 of each query: PostgreSQL scans every vector with its indexes off;
    SQLite's vectors are streamed from the file and scored here."""
    model = svc.embedder.model_id
    async with svc.store.snapshot() as reader:
        if svc.store.backend == "postgres":
            await reader.conn.execute("SET LOCAL enable_indexscan = off")
            await reader.conn.execute("SET LOCAL enable_bitmapscan = off")
            out = []
            for v in q:
                hits = await reader.search_vectors(v, model, 10, SearchFilters())
                out.append({c for c, _ in hits})
            return out
        best_ids = np.zeros((len(q), 0), dtype=np.int64)
        best = np.zeros((len(q), 0), dtype=np.float32)
        async for ids, mat in reader.vector_batches(model, 50_000):
            mat = mat / np.maximum(np.linalg.norm(mat, axis=1, keepdims=True), 1e-12)
            scores = np.concatenate([best, q @ mat.T], axis=1)
            all_ids = np.concatenate([best_ids, np.broadcast_to(ids, (len(q), len(ids)))], axis=1)
            top = np.argsort(-scores, axis=1)[:, :10]
            best = np.take_along_axis(scores, top, axis=1)
            best_ids = np.take_along_axis(all_ids, top, axis=1)
        return [set(row.tolist()) for row in best_ids]


async def recall_at_10(svc: MemoryService, vecs: np.ndarray) -> float:
    """Share of the exact top 10 that the vector search returns (the HNSW graph or pgvector's
    HNSW index where they are used). Queries with no vector (nothing the model knows) are left
    out."""
    model = svc.embedder.model_id
    q = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
    keep = np.linalg.norm(vecs, axis=1) > 0
    async with svc.store.snapshot() as reader:
        got = [await reader.search_vectors(v, model, 10, SearchFilters()) for v in vecs]
    truth = await exact_top10(svc, q)
    hits = [len({c for c, _ in g} & truth[n]) / 10 for n, g in enumerate(got) if keep[n]]
    return float(np.mean(hits))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--embedder", default="local")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--workdir", type=Path, default=Path("/tmp/memcore-bench"))
    ap.add_argument("--reuse", action="store_true", help="keep an existing index (search only)")
    ap.add_argument(
        "-o",
        dest="options",
        action="append",
        default=[],
        metavar="SECTION.KEY=V",
        help="a setting for both phases, e.g. -o storage.ann_min_vectors=50000",
    )
    ap.add_argument("--db", help="also run each size on this postgresql:// database, side by side")
    ap.add_argument("--phase", choices=["index", "search"], help=argparse.SUPPRESS)
    ap.add_argument("--one", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    options: dict[str, object] = dict(o.split("=", 1) for o in args.options)
    if args.one and args.phase == "index":
        row = asyncio.run(measure_index(args.one, args.embedder, args.workdir, args.reuse, options))
        print(json.dumps(row))
        return
    if args.one:
        row = asyncio.run(
            measure_search(args.one, args.embedder, args.queries, args.workdir, options)
        )
        print(json.dumps(row))
        return
    cols = [
        "size", "backend", "chunks", "index_s", "chunks_per_s", "vectors_build_s",
        "start_to_searchable_ms",
        "search_excl_p50_ms", "search_excl_p95_ms", "search_incl_p50_ms", "search_incl_p95_ms",
        "query_embed_p50_ms", "cached_p50_ms", "keyword_p50_ms", "keyword_p95_ms",
        "recall10_vs_exact", "gold_hit10", "db_mb", "index_rss_mb", "daemon_rss_mb",
    ]  # fmt: skip
    print(f"embedder: {args.embedder}; {args.queries} queries; each phase in its own process")
    print(" | ".join(cols))
    for size in (int(s) for s in args.sizes.split(",")):
        backends = {"sqlite": list(args.options)}
        if args.db:
            backends["postgres"] = [
                *args.options,
                f"storage.url={args.db}",
                f"storage.namespace=bench-{size}",
            ]
        for backend, opts in backends.items():
            row: dict[str, object] = {"size": size, "backend": backend}
            for phase in ("index", "search"):
                cmd = [sys.executable, __file__, "--one", str(size), "--phase", phase,
                       "--embedder", args.embedder, "--queries", str(args.queries),
                       "--workdir", str(args.workdir), *(["--reuse"] if args.reuse else []),
                       *(f"-o{o}" for o in opts)]  # fmt: skip
                out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
                row |= json.loads(out.strip().splitlines()[-1])
            print(" | ".join(str(row[c]) for c in cols), flush=True)


if __name__ == "__main__":
    main()
