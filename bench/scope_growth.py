"""How an add costs as one scope grows: add p50 / p95 at each size (1k, 10k, 100k memories
for one user, by default), one table, in one process. Real text from ../shared/eval.

    python bench/scope_growth.py [--sizes 1000,10000,100000] [--adds 200]
                                 [--embedder static|local] [--pg]

At each size it times ``--adds`` single ``memories.add`` calls (each searchable when it
returns), then fills the scope with ``add_batch`` up to the next size. The adds rotate over
as many distinct texts as there are memories (no embedding cache hits for the local model).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import questions
from memcore.compose import open_service
from memcore.core.settings import load_settings
from memcore.memory.writer import NewMemory
from memcore.vault.memory_format import Scope
from memcore.vault.pages import list_pages


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, round(p / 100 * (len(xs) - 1)))]


async def main(args: argparse.Namespace) -> None:
    sizes = [int(s) for s in args.sizes.split(",")]
    pool = questions(20_000)
    made = 0

    def text() -> str:
        nonlocal made
        made += 1
        return f"{pool[made % len(pool)]} (memory {made})"

    overrides: dict[str, object] = {"embedder.provider": args.embedder}
    rows = []
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        if args.pg:
            from tests.pg_server import running_server  # pgserver, as the tests start it

            url, _ = stack.enter_context(running_server(Path(tmp) / "pg"))
            overrides["storage.url"] = url
        vault = Path(tmp) / "vault"
        (vault / "memory").mkdir(parents=True)
        settings = load_settings(vault, overrides)
        async with open_service(settings, create=True) as svc:
            await svc.warm()
            m = svc.memories
            scope = Scope(user_id="alice")
            held = 0
            for size in sizes:
                while held < size:
                    n = min(1000, size - held)
                    await m.add_batch([NewMemory(text(), scope) for _ in range(n)])
                    held += n
                times = []
                for _ in range(args.adds):
                    started = time.perf_counter()
                    await m.add(text(), user_id="alice")
                    times.append((time.perf_counter() - started) * 1000)
                held += args.adds
                pages = len(list_pages(vault, "memory/users/alice/core.md"))
                rows.append((size, statistics.median(times), pct(times, 95), pages))
            count = await m.count(user_id="alice")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    backend = "PostgreSQL" if args.pg else "SQLite"
    print(f"embedder {args.embedder}, {backend}, {args.adds} single adds at each size, one user")
    print("| memories in the scope | add p50 | add p95 | pages |")
    print("|---|---|---|---|")
    for size, p50, p95, pages in rows:
        print(f"| {size:,} | {p50:.1f} ms | {p95:.1f} ms | {pages} |")
    first = rows[0][1]
    print(f"p50 at {rows[-1][0]:,} / p50 at {rows[0][0]:,}: {rows[-1][1] / first:.2f}x")
    print(f"memories counted at the end: {count:,}; peak RSS {rss:.0f} MB")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--adds", type=int, default=200)
    parser.add_argument("--embedder", default="static", choices=["static", "local"])
    parser.add_argument("--pg", action="store_true", help="PostgreSQL (pgserver) instead")
    main_args = parser.parse_args()
    asyncio.run(main(main_args))
