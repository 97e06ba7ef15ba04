"""Event-loop stalls while the daemon catches up with a large vault and answers queries.

    python bench/loop_lag.py                    # 20,000 files, static embedder
    python bench/loop_lag.py --files 2000 --embedder local

Runs the real Daemon in this process on a fresh vault of one-section files of real text. A
ticker task sleeps 5 ms at a time and records how late it wakes: that lateness is the time
the loop was blocked, which every other caller (an HTTP request, an MCP call) would wait.
The daemon first warms its models (before it serves anything; reported apart), then catches
up; during the catch-up the bench asks a first Chinese query and an English one.
Prints numbers only; never passes or fails.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import build_vault
from memcore.compose import open_service
from memcore.core.settings import load_settings
from memcore.fronts.daemon import Daemon

TICK_S = 0.005


async def ticker(stop: asyncio.Event, lags: list[float]) -> None:
    while not stop.is_set():
        t0 = time.perf_counter()
        await asyncio.sleep(TICK_S)
        lags.append((time.perf_counter() - t0 - TICK_S) * 1000)


async def run(files: int, embedder: str, workdir: Path) -> dict[str, object]:
    vault = workdir / "vault"
    build_vault(vault, files, per_file=1)
    settings = load_settings(vault, {"embedder.provider": embedder})
    lags: list[float] = []
    queries: list[tuple[str, float, int]] = []
    async with open_service(settings) as svc:
        daemon = Daemon(settings, svc)
        tick_stop = asyncio.Event()
        tick = asyncio.create_task(ticker(tick_stop, lags))
        started = time.perf_counter()
        task = asyncio.create_task(daemon.run())
        while not daemon.warmed:  # noqa: ASYNC110 - polls a plain attribute
            await asyncio.sleep(0.01)
        warm_s, warm_lags = time.perf_counter() - started, len(lags)
        await asyncio.sleep(3.0)  # some files are in by now
        for q in ("渲染引擎默认用什么", "what did the user say about their job", "比赛在哪里举行"):
            t0 = time.perf_counter()
            result = await svc.search(q)
            queries.append((q, (time.perf_counter() - t0) * 1000, len(result.hits)))
        while daemon._watcher is None:  # noqa: ASYNC110 - polls a plain attribute
            await asyncio.sleep(0.05)
        caught_up = time.perf_counter() - started
        daemon.stop.set()
        await task
        tick_stop.set()
        await tick
    ordered = sorted(lags[warm_lags:])
    return {
        "files": files,
        "embedder": embedder,
        "warm_up_s": round(warm_s, 2),
        "max_stall_during_warm_up_ms": round(max(lags[:warm_lags], default=0.0), 1),
        "catch_up_s": round(caught_up, 1),
        "ticks": len(lags),
        "max_stall_ms": round(ordered[-1], 1),
        "p99_stall_ms": round(ordered[int(0.99 * (len(ordered) - 1))], 1),
        "median_stall_ms": round(statistics.median(ordered), 2),
        "queries_during_catch_up": [
            {"query": q, "ms": round(ms, 1), "hits": n} for q, ms, n in queries
        ],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--embedder", default="static")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        print(json.dumps(asyncio.run(run(args.files, args.embedder, Path(tmp))), indent=2))


if __name__ == "__main__":
    main()
