"""Saving and loading one long session transcript: conversations.save of N messages (user,
assistant with tool calls, tool results) in one call on a fresh vault, then load; when its
turns are searchable and embedded (a large save indexes in the background); then saving it
again with one message more (incremental).

    python bench/conversation.py [--n 20000] [--embedder static|local] [--http]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import questions
from memcore.compose import open_service
from memcore.core.models import SearchFilters
from memcore.core.settings import load_settings
from memcore.memory.conversations import PAGE_TURNS


def transcript(n: int) -> list[dict[str, object]]:
    texts = questions(max(n // 3, 1))
    out: list[dict[str, object]] = []
    for i in range(n):
        text = f"{texts[(i // 3) % len(texts)]} ({i})"
        if i % 3 == 0:
            out.append({"role": "user", "content": text})
        elif i % 3 == 1:
            call = {
                "id": f"c{i}",
                "type": "function",
                "function": {"name": "search_notes", "arguments": json.dumps({"q": text})},
            }
            out.append({"role": "assistant", "content": None, "tool_calls": [call]})  # fmt: skip
        else:
            out.append({"role": "tool", "tool_call_id": f"c{i - 1}", "content": text})
    return out


async def run(n: int, embedder: str) -> None:
    messages = transcript(n)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "memory").mkdir()
        settings = load_settings(Path(tmp), {"embedder.provider": embedder})
        async with open_service(settings) as svc:
            await svc.index()
            convo = svc.conversations
            t0 = time.perf_counter()
            await convo.save("long", messages)
            saved = time.perf_counter() - t0
            t1 = time.perf_counter()
            back = await convo.load("long")
            loaded = time.perf_counter() - t1
            assert back == messages
            await svc.writer.indexed()  # the turns' text is in the index: keyword search finds them
            searchable = time.perf_counter() - t0
            await svc.writer.settle(vectors=True)
            embedded = time.perf_counter() - t0
            last = next(str(m["content"]) for m in reversed(messages) if m["role"] == "user")
            found = await svc.search(last, filters=SearchFilters(run_id="long"))
            assert found.hits, "the last question is not found"
            assert not found.warnings, found.warnings
            more = [*messages, {"role": "user", "content": "one more question (appended)"}]
            t0 = time.perf_counter()
            await convo.save("long", more)
            again = time.perf_counter() - t0
            assert await convo.load("long", limit=2) == more[-2:]
            size = sum(p.stat().st_size for p in (Path(tmp) / "memory/runs/long").glob("*.md"))
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{n} messages ({len(json.dumps(messages)) / 1e6:.1f} MB as JSON, "
          f"{size / 1e6:.1f} MB of Markdown in {-(-n // PAGE_TURNS)} pages), "
          f"embedder {embedder}: save {saved:.2f} s, load {loaded:.2f} s, "
          f"searchable by keyword after {searchable:.2f} s, embedded after {embedded:.2f} s; "
          f"saved again with one more message in {again:.2f} s; "
          f"peak RSS {peak:.0f} MB")  # fmt: skip


def tiny(n: int) -> list[dict[str, object]]:
    """``n`` tiny messages ("ok 17"): the most turns a body can hold."""
    roles = ("user", "assistant")
    return [{"role": roles[i % 2], "content": f"ok {i}"} for i in range(n)]


def over_http(n: int, embedder: str, settle: bool = False, small: bool = False) -> None:
    """The same save as one request to a real `memcore serve` (its own process): PUT
    /api/conversations/long with N messages, then GET it back. Meanwhile another client asks
    /health every 20 ms: how long the server's event loop was held (its p50/p95/max), and
    the server's peak RSS."""
    import os
    import threading

    import httpx

    from bench.http_api import pct, peak_rss_mb, rss_mb, start_serve

    messages = tiny(n) if small else transcript(n)
    body = json.dumps({"messages": messages}).encode()
    health: dict[str, list[float]] = {"put": [], "settle": [], "get": []}
    phase = ["put"]
    done = threading.Event()

    def probe(url: str) -> None:
        with httpx.Client(base_url=url, timeout=120) as client:
            while not done.is_set():
                t = time.perf_counter()
                client.get("/health").raise_for_status()
                health[phase[0]].append((time.perf_counter() - t) * 1000)
                time.sleep(0.02)

    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "memory").mkdir()
        env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": embedder}
        server, url = start_serve(Path(tmp), env)
        prober = threading.Thread(target=probe, args=(url,))
        try:
            with httpx.Client(base_url=url, timeout=300) as http:
                headers = {"Content-Type": "application/json"}
                idle = rss_mb(server.pid)
                prober.start()
                t0 = time.perf_counter()
                put = http.put("/api/conversations/long", content=body, headers=headers)
                saved = time.perf_counter() - t0
                put.raise_for_status()
                after_put, rss_put = peak_rss_mb(server.pid), rss_mb(server.pid)
                if settle:  # the watcher indexes the new pages after the PUT: let it finish
                    phase[0] = "settle"
                    while http.get("/api/status").json()["chunks"] < n:
                        time.sleep(0.5)
                phase[0] = "get"
                t0 = time.perf_counter()
                back = http.get("/api/conversations/long")
                loaded = time.perf_counter() - t0
                done.set()
                prober.join()
                assert back.json()["messages"] == messages
                peak, rss_get = peak_rss_mb(server.pid), rss_mb(server.pid)
        finally:
            done.set()
            server.terminate()
            server.wait(60)
    put_ms, settle_ms, get_ms = health["put"], health["settle"], health["get"]
    print(
        f"{n} messages over HTTP ({len(body) / 1e6:.1f} MB in one PUT), embedder {embedder}: "
        f"save {saved:.2f} s, load {loaded:.2f} s"
    )
    print(
        f"/health during the PUT ({len(put_ms)} asked): p50 {pct(put_ms, 50):.1f} ms, p95 "
        f"{pct(put_ms, 95):.1f} ms, max {max(put_ms, default=0):.1f} ms; "
        + (
            f"while the watcher indexed it ({len(settle_ms)}): p50 {pct(settle_ms, 50):.1f} ms, "
            f"p95 {pct(settle_ms, 95):.1f} ms, max {max(settle_ms):.1f} ms; "
            if settle_ms
            else ""
        )
        + f"during the GET "
        f"({len(get_ms)}): p50 {pct(get_ms, 50):.1f} ms, max {max(get_ms, default=0):.1f} ms"
    )
    print(f"server RSS: {idle:.0f} MB idle, peak {after_put:.0f} MB by the end of the PUT "
          f"({rss_put:.0f} MB then), peak {peak:.0f} MB by the end of the GET ({rss_get:.0f} MB "
          f"then)")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--embedder", default="static", choices=["static", "local"])
    parser.add_argument("--http", action="store_true", help="one PUT to a real memcore serve")
    parser.add_argument(
        "--settle", action="store_true", help="GET once the watcher has indexed the PUT's pages"
    )
    parser.add_argument("--tiny", action="store_true", help="tiny messages (ok 17), not turns")
    args = parser.parse_args()
    if args.http:
        over_http(args.n, args.embedder, args.settle, args.tiny)
    else:
        asyncio.run(run(args.n, args.embedder))
