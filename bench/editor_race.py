"""An editor saving stale buffers while agents add (issue 41): how many acknowledged adds a
person's saves removed, and whether each of those is in the history as that person's DELETE
(restorable) or lost silently.

    python bench/editor_race.py [--adds 1050] [--writers 4] [--saves-per-second 50] [--pg]

The editor reads the memory file, waits half its period, writes the buffer it read to a temp
file and renames it over the file (as editors save); the writers add to the same file; a
watcher loop indexes it. Prints the counts and the time taken.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memcore.compose import open_service
from memcore.core.errors import WriteConflict
from memcore.core.settings import load_settings


async def run(adds: int, writers: int, rate: float, pg_url: str | None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        vault = Path(tmp)
        (vault / "memory").mkdir()
        over = {"embedder.provider": "static"}
        if pg_url:
            over |= {"storage.url": pg_url, "storage.namespace": f"race{os.getpid()}"}
        async with open_service(load_settings(vault, over)) as svc:
            (seed,) = await svc.memories.add("seed", user_id="alice")
            path, rel = vault / seed.path, seed.path
            done, saves = threading.Event(), [0]

            def editor() -> None:
                while not done.is_set():
                    buffer = path.read_bytes()
                    time.sleep(0.5 / rate)
                    tmp_file = path.with_name(f".{path.name}.swp")
                    tmp_file.write_bytes(buffer)
                    os.replace(tmp_file, path)
                    saves[0] += 1
                    time.sleep(0.5 / rate)

            async def watcher() -> None:
                while not done.is_set():
                    await svc.index([rel])
                    await asyncio.sleep(0.001)

            acked, refused = [], [0]

            async def writer(n: int) -> None:
                i = 0
                while len(acked) < adds:
                    i += 1
                    try:
                        (r,) = await svc.memories.add(f"writer {n} note {i}", user_id="alice")
                    except WriteConflict:
                        refused[0] += 1
                        continue
                    acked.append(r)

            started = time.perf_counter()
            person = threading.Thread(target=editor)
            person.start()
            watching = asyncio.create_task(watcher())
            try:
                await asyncio.gather(*(writer(n) for n in range(writers)))
            finally:
                done.set()
                person.join()
                await watching
            took = time.perf_counter() - started
            await svc.index([rel])
            present = {r.id for r in await svc.memories.get_all(user_id="alice", limit=10_000)}
            dropped = [r for r in acked if r.id not in present]
            logged = 0
            for r in dropped:
                last = (await svc.memories.history(r.id))[-1]
                logged += last["event"] == "DELETE" and last["actor"] == "person"
            twice, by = 0, Counter[str]()  # memories whose history says ADD twice in a row
            misread = 0  # and those whose first ADD is not the API's (#54)
            for r in acked:
                events = await svc.memories.history(r.id)
                misread += events[0]["actor"] != "api"
                pairs = [
                    f"{a['actor']}+{b['actor']}"
                    for a, b in itertools.pairwise(events)
                    if a["event"] == b["event"] == "ADD"
                ]
                twice += bool(pairs)
                by.update(pairs)
    print(
        f"{'PostgreSQL' if pg_url else 'SQLite'}, {writers} writers, editor ~{rate:.0f} saves/s: "
        f"{len(acked)} adds acknowledged in {took:.1f} s ({refused[0]} refused after 20 tries); "
        f"the editor saved {saves[0]} times and removed {len(dropped)}: {logged} logged as the "
        f"person's DELETE (restorable), {len(dropped) - logged} lost silently; {twice} with "
        f"two ADDs in a row in the history{f' ({dict(by)})' if by else ''}, {misread} first "
        f"logged as a person's"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--adds", type=int, default=1050)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--saves-per-second", type=float, default=50.0)
    parser.add_argument("--pg", action="store_true", help="on a pgserver PostgreSQL")
    args = parser.parse_args()
    if args.pg:
        from tests.pg_server import running_server  # pgserver, as the tests start it

        with tempfile.TemporaryDirectory() as data, running_server(Path(data)) as (url, _):
            asyncio.run(run(args.adds, args.writers, args.saves_per_second, url))
    else:
        asyncio.run(run(args.adds, args.writers, args.saves_per_second, None))
