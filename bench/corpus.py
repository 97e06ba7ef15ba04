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


def sourced_paragraphs(min_chars: int = 40) -> Iterator[tuple[str, str, str]]:
    """(paragraph, set, file in the set's vault) of every eval vault, headings dropped, in a
    fixed order."""
    for name in SETS:
        vault = EVAL / name / "vault"
        for path in sorted(vault.rglob("*.md")):
            rel = path.relative_to(vault).as_posix()
            for para in path.read_text(encoding="utf-8").split("\n\n"):
                para = para.strip()
                if len(para) >= min_chars and not para.startswith("#"):
                    yield para, name, rel


def paragraphs(min_chars: int = 40) -> Iterator[str]:
    """Blank-line separated paragraphs of every eval vault, headings dropped, in a fixed order."""
    for para, _, _ in sourced_paragraphs(min_chars):
        yield para


def _pool() -> list[tuple[str, str, str]]:
    pool = list(sourced_paragraphs())
    random.Random(0).shuffle(pool)  # every size mixes all four sets
    return pool


def entry_sources() -> list[tuple[str, str]]:
    """(set, file) that each section of a build_vault vault came from: "## Entry N" holds the
    paragraph of entry_sources()[N % len(...)]."""
    return [(name, rel) for _, name, rel in _pool()]


def _interleaved() -> list[tuple[str, dict[str, object]]]:
    per_set: list[list[tuple[str, dict[str, object]]]] = []
    for name in SETS:
        with (EVAL / name / "queries.jsonl").open(encoding="utf-8") as fh:
            per_set.append([(name, json.loads(line)) for line in fh])
    out: list[tuple[str, dict[str, object]]] = []
    for i in range(max(len(q) for q in per_set)):
        out.extend(q[i] for q in per_set if i < len(q))
    return out


def gold_questions(limit: int, skip: int = 0) -> list[tuple[str, set[tuple[str, str]]]]:
    """Real questions (the order of questions()) with the (set, file) pairs that answer them."""
    out = []
    for name, row in _interleaved()[skip : skip + limit]:
        prefix = f"{row['vault_dir']}/" if row.get("vault_dir") else ""
        files = row["gold_files"]
        assert isinstance(files, list)
        out.append((str(row["question"]), {(name, prefix + str(f)) for f in files}))
    return out


def questions(limit: int) -> list[str]:
    """Real questions, interleaved across the English and Chinese sets."""
    return [str(row["question"]) for _, row in _interleaved()[:limit]]


def build_vault(root: Path, n_chunks: int, per_file: int = 10) -> int:
    """Write a vault of about n_chunks one-paragraph sections; returns the paragraphs written.

    Past the end of the corpus it cycles, prefixing a date so no text repeats exactly (the
    embedding cache must not make a large vault look cheaper than it is)."""
    (root / "memory").mkdir(parents=True, exist_ok=True)
    pool = [para for para, _, _ in _pool()]
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
