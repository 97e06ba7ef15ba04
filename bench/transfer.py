"""Moving a fleet's memory: `memcore export` of the vault bench/fleet.py left, then
`memcore import` of that export into a fresh vault (static embedder).

    python bench/fleet.py --memories 1000000 --users 10000   # once: the vault to move
    python bench/transfer.py [--workdir /tmp/memcore-fleet] [--rows N] [--interleave] [--reuse]

Prints, for each command: wall time, memories a second and peak RSS (the import's load and
graph phases apart), the export's size, and whether the imported vault lists the same ids.
``--rows N`` imports only the export's first N lines (to time an older memcore on a slice);
``--interleave`` first orders the export's lines as a fleet's history would have them, users
taking turns (an export is oldest first, and the bench's batch gave each user's memories one
moment); ``--reuse`` imports the export the last run wrote instead of exporting again.
Numbers only; it never passes or fails on time.
"""

from __future__ import annotations

import argparse
import itertools
import json
import shutil
import sqlite3
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.fleet import measured


def ids_of(vault: Path) -> set[str]:
    db = sqlite3.connect(f"file:{vault / '.memcore' / 'index.db'}?mode=ro", uri=True)
    try:
        return {row[0] for row in db.execute("SELECT memory_id FROM memories")}
    finally:
        db.close()


def main(args: argparse.Namespace) -> None:
    work = Path(args.workdir)
    source = work / "vault"
    if not source.is_dir():
        raise SystemExit(f"no vault in {work}: run bench/fleet.py first")
    memcore = [sys.executable, "-m", "memcore", "--embedder", "static"]
    out = work / "export.jsonl"
    if not args.reuse:
        wall, peak, _, _ = measured([*memcore, "--vault", str(source), "export", str(out)])
        with out.open("rb") as fh:
            rows = sum(1 for _ in fh)
        print(
            f"export: {rows:,} memories in {wall:.1f} s, {rows / wall:,.0f} memories/s, peak "
            f"RSS {peak:.0f} MB; {out.stat().st_size / 1e6:,.0f} MB"
        )
    if args.rows or args.interleave:
        with out.open("rb") as fh:
            lines = fh.readlines()
        if args.interleave:  # the n-th memory of every user, then the n+1-th
            turn: dict[str, int] = {}
            ranked = []
            for line in lines:
                user = str(json.loads(line).get("user_id"))
                turn[user] = turn.get(user, -1) + 1
                ranked.append((turn[user], len(ranked)))
            lines = [lines[i] for _, i in sorted(ranked)]
        cut = work / "export-part.jsonl"
        with cut.open("wb") as part:
            part.writelines(itertools.islice(lines, args.rows or None))
        out = cut
    with out.open("rb") as fh:
        rows = sum(1 for _ in fh)
    target = work / "imported"
    shutil.rmtree(target, ignore_errors=True)
    measured([*memcore, "init", str(target)])
    wall, peak, said, phases = measured([*memcore, "--vault", str(target), "import", str(out)])
    print(
        f"import: {rows:,} memories in {wall:.1f} s, {rows / wall:,.0f} memories/s, peak RSS "
        f"{peak:.0f} MB ({phases}); it said: {said.strip()}"
    )
    with out.open("rb") as fh:
        wanted = {json.loads(line)["id"] for line in fh}
    print(f"the imported vault lists the export's ids: {ids_of(target) == wanted}")


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workdir", default="/tmp/memcore-fleet")
    ap.add_argument("--rows", type=int, default=0, help="import only the first N lines")
    ap.add_argument("--interleave", action="store_true", help="users' memories taking turns")
    ap.add_argument("--reuse", action="store_true", help="import the last run's export")
    main(ap.parse_args())
