"""Saving and loading one long session transcript: conversations.save of N messages (user,
assistant with tool calls, tool results) in one call, then load, on a fresh vault.

    python bench/conversation.py [--n 20000] [--embedder static|local]
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
from memcore.core.settings import load_settings


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
        settings = load_settings(
            Path(tmp), {"embedder.provider": embedder, "index.max_file_bytes": 50_000_000}
        )
        async with open_service(settings) as svc:
            await svc.index()
            t0 = time.perf_counter()
            await svc.conversations.save("long", messages)
            saved = time.perf_counter() - t0
            t0 = time.perf_counter()
            back = await svc.conversations.load("long")
            loaded = time.perf_counter() - t0
            assert back == messages
            size = (Path(tmp) / "memory/runs/long/conversation.md").stat().st_size
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{n} messages ({len(json.dumps(messages)) / 1e6:.1f} MB as JSON, "
          f"{size / 1e6:.1f} MB of Markdown), embedder {embedder}: save {saved:.2f} s, "
          f"load {loaded:.2f} s, peak RSS {peak:.0f} MB")  # fmt: skip


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--embedder", default="static", choices=["static", "local"])
    args = parser.parse_args()
    asyncio.run(run(args.n, args.embedder))
