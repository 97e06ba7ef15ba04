"""Real text for benchmarks: paragraphs and questions from ../shared/eval (read, never copied)."""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path

EVAL = Path(
    os.environ.get("BENCH_EVAL_DIR", Path(__file__).resolve().parents[2] / "shared" / "eval")
)
SETS = ("locomo", "longmemeval_oracle", "scifact", "cmrc2018")


def paragraphs(min_chars: int = 40) -> Iterator[str]:
    """Blank-line separated paragraphs of every eval vault, headings dropped, in a fixed order."""
    for name in SETS:
        for path in sorted((EVAL / name / "vault").rglob("*.md")):
            for para in path.read_text(encoding="utf-8").split("\n\n"):
                para = para.strip()
                if len(para) >= min_chars and not para.startswith("#"):
                    yield para


def questions(limit: int) -> list[str]:
    """Real questions, interleaved across the English and Chinese sets."""
    per_set: list[list[str]] = []
    for name in SETS:
        with (EVAL / name / "queries.jsonl").open(encoding="utf-8") as fh:
            per_set.append([json.loads(line)["question"] for line in fh])
    out: list[str] = []
    for i in range(max(len(q) for q in per_set)):
        out.extend(q[i] for q in per_set if i < len(q))
    return out[:limit]


def build_vault(root: Path, n_chunks: int, per_file: int = 10) -> int:
    """Write a vault of about n_chunks one-paragraph sections; returns the paragraphs written.

    Past the end of the corpus it cycles, prefixing a date so no text repeats exactly (the
    embedding cache must not make a large vault look cheaper than it is)."""
    (root / "memory").mkdir(parents=True, exist_ok=True)
    pool = list(paragraphs())
    random.Random(0).shuffle(pool)  # every size mixes all four sets
    written, file_no = 0, 0
    while written < n_chunks:
        file_no += 1
        lines = [f"# Note {file_no}\n"]
        for _ in range(min(per_file, n_chunks - written)):
            cycle, idx = divmod(written, len(pool))
            prefix = f"({2020 + cycle}-{1 + idx % 12:02d}-{1 + idx % 28:02d}) " if cycle else ""
            lines.append(f"## Entry {written}\n\n{prefix}{pool[idx][:1400]}\n")
            written += 1
        (root / "memory" / f"{file_no:06d}.md").write_text("\n".join(lines), encoding="utf-8")
    return written
