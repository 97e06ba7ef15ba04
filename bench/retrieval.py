"""Retrieval quality on a set in the layout of ../shared/eval (queries.jsonl + vault/).

    python bench/retrieval.py --set ../shared/eval/locomo [--json]
        [--embedder local|static|ollama|openai] [-o ollama.model=bge-m3 ...]
        [--fusion adaptive|all] [--limit 100]
        [--chunk-tokens 400] [--overlap-tokens 50]
        [--recency-weight 0.1 --half-life 30 --as-of question|newest|today]
        [--strength-weight 0.3]
        [--rankings out.jsonl] [--overlap other.jsonl]

Indexes through the real pipeline (chunker, embedder, SQLite, FTS5) and asks every query
through MemoryService.search. Index databases are cached under ~/.cache/memcore-eval keyed by
set, vault and settings; the vault's own content hashes decide what is re-read, and embeddings
are cached by text hash, so reruns and other fusion methods cost only the queries. Sets whose
queries name a ``vault_dir`` (locomo, longmemeval_s) index one vault per value and ask each
query only against its own vault.

``--rankings`` writes each question's top 10 (chunks, as path and lines) to a file;
``--overlap`` reads such a file from another run (SQLite's, say, beside PostgreSQL's) and
reports ``top10_overlap``: the mean share of each question's top 10 both runs hold.

A server embedder is measured the same way: ``--embedder ollama -o ollama.model=bge-m3`` or
``--embedder openai -o openai.base_url=http://127.0.0.1:8080/v1 -o openai.model=NAME``
(``-o`` takes any setting, as ``memcore.toml`` would; its API key comes from the environment).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import hashlib
import json
import math
import os
import re
import sqlite3
import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from memcore.compose import build_service
from memcore.core.models import Hit, SearchFilters
from memcore.core.settings import FUSIONS, Settings, load_settings
from memcore.search import fusion
from memcore.search.searcher import Searcher
from memcore.vault.chunker import parse_day

TURN_ID = re.compile(r"^\[([^\]\s]+)\]", re.MULTILINE)
CACHE = Path(os.environ.get("BENCH_EVAL_CACHE", Path.home() / ".cache" / "memcore-eval"))


@dataclass
class Scores:
    """Sums of per-query metrics; divided by counts at the end."""

    sums: dict[str, float] = field(default_factory=lambda: defaultdict(float))
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    latencies: list[float] = field(default_factory=list)

    def add(self, name: str, value: float) -> None:
        self.sums[name] += value
        self.counts[name] += 1

    def means(self) -> dict[str, float]:
        return {k: round(self.sums[k] / self.counts[k], 4) for k in self.sums}


def ranked_files(hits: list[Hit]) -> list[str]:
    """Files in the order of their best chunk."""
    return list(dict.fromkeys(h.path for h in hits))


def ndcg(files: list[str], gold: dict[str, float], k: int) -> float:
    dcg = sum(gold.get(f, 0.0) / math.log2(i + 2) for i, f in enumerate(files[:k]))
    ideal = sorted(gold.values(), reverse=True)[:k]
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal))
    return dcg / idcg if idcg else 0.0


def evidence_in(text: str) -> set[str]:
    return set(TURN_ID.findall(text))


def within_budget(hits: list[Hit], tokens: int) -> str:
    """The first `tokens` (chars/4) of the ranked chunks' text."""
    budget, parts = tokens * 4, []
    for h in hits:
        if budget <= 0:
            break
        parts.append(h.text[:budget])
        budget -= len(h.text) + 1
    return "\n".join(parts)


def score_query(q: dict[str, object], hits: list[Hit], scores: Scores) -> None:
    gold_files = list(q["gold_files"])  # type: ignore[call-overload]
    relevance = q.get("relevance")
    gold = dict.fromkeys(gold_files, 1.0)
    if isinstance(relevance, dict) and "gold_ids" in q:
        by_id = dict(zip(q["gold_ids"], gold_files, strict=False))  # type: ignore[call-overload]
        gold = {by_id[i]: float(r) for i, r in relevance.items() if i in by_id and float(r) > 0}
    files = ranked_files(hits)
    scores.add("hit@1", float(bool(set(files[:1]) & set(gold))))
    scores.add("hit@5", float(bool(set(files[:5]) & set(gold))))
    for k in (1, 3, 5, 10):
        scores.add(f"recall@{k}", len(set(files[:k]) & set(gold)) / len(gold))
    rr = next((1 / (i + 1) for i, f in enumerate(files[:10]) if f in gold), 0.0)
    scores.add("mrr@10", rr)
    scores.add("ndcg@10", ndcg(files, gold, 10))
    evidence = set(q.get("evidence") or [])  # type: ignore[call-overload]
    if evidence:
        for k in (5, 10):
            found = set().union(*(evidence_in(h.text) for h in hits[:k]))
            scores.add(f"evidence_recall@{k}", len(evidence & found) / len(evidence))
        for budget in (1000, 2000):
            found = evidence_in(within_budget(hits, budget))
            scores.add(f"evidence_recall@{budget}tok", len(evidence & found) / len(evidence))


def cache_db(set_dir: Path, vault: Path, args: argparse.Namespace) -> Path:
    parts = (
        set_dir.resolve(),
        vault.resolve(),
        args.embedder,
        args.chunk_tokens,
        args.overlap_tokens,
    )
    if args.option:  # a server model or another setting: its own cache
        parts = (*parts, *sorted(args.option))
    if getattr(args, "split", "window") != "window":  # older caches stay valid for windows
        parts = (*parts, args.split)
    digest = hashlib.sha256("|".join(map(str, parts)).encode()).hexdigest()[:12]
    return CACHE / f"{set_dir.name}-{vault.name}-{digest}.db"


async def run_vault(
    set_dir: Path,
    vault: Path,
    queries: list[dict[str, object]],
    args: argparse.Namespace,
    scores: dict[str, Scores],
) -> tuple[float, int]:
    """Index (or reuse) one vault and ask its questions: (indexing seconds, files indexed)."""
    overrides = {
        "index.include": ("**/*.md",),
        "index.chunk_tokens": args.chunk_tokens,
        "index.overlap_tokens": args.overlap_tokens,
        "index.split": args.split,
        "embedder.provider": args.embedder,
        "storage.db": str(cache_db(set_dir, vault, args)),
        "search.recency_weight": args.recency_weight,
        "search.recency_half_life_days": args.half_life,
        "strength.weight": args.strength_weight,
        **options(args.option),
    }
    settings = load_settings(vault, overrides, env={})
    CACHE.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 - once, before any work
    async with build_service(settings) as svc:
        t0 = time.perf_counter()
        report = await svc.index()
        index_s = time.perf_counter() - t0
        if report.failed:
            print(f"warning: {len(report.failed)} files failed in {vault}", file=sys.stderr)
        newest = None if settings.database_url else newest_day(settings.db_path)
        for q in queries:
            as_of = reference_day(q, newest, args)
            if len(scores) == 1:
                (method,) = scores
                t0 = time.perf_counter()
                result = await svc.search(
                    str(q["question"]), limit=args.limit, fusion_name=method, as_of=as_of
                )
                scores[method].latencies.append((time.perf_counter() - t0) * 1000)
                score_query(q, list(result.hits), scores[method])
                TOP10.append([f"{h.path}#L{h.start_line}-{h.end_line}" for h in result.hits[:10]])
                if getattr(args, "calibrate", None):
                    gold = set(q["gold_files"])  # type: ignore[call-overload]
                    CALIBRATION.hits += [(h.score, h.path in gold) for h in result.hits[:10]]
                    CALIBRATION.cosines += [
                        h.vector_score for h in result.hits[:10]
                        if h.path in gold and h.vector_score is not None
                    ]  # fmt: skip
                    CALIBRATION.top.append(result.hits[0].score if result.hits else 0.0)
                continue
            # every method ranks the same candidates: retrieve once, fuse many times
            await rank_all(svc.searcher, q, settings, args, as_of, scores)
        for kind, question in (
            NEGATIVES[: 2 * len(queries)] if getattr(args, "calibrate", None) else ()
        ):
            # asked the way the set's own questions were (--fusion), so the two compare
            method = next(iter(scores)) if len(scores) == 1 else None
            result = await svc.search(question, limit=1, fusion_name=method)
            best = result.hits[0].score if result.hits else 0.0
            (CALIBRATION.other_top if kind else CALIBRATION.nonsense_top).append(best)
    return index_s, len(report.indexed)


@dataclass
class Calibration:
    """What --calibrate gathers: (score, relevant) of every top-10 hit, and the best score
    of each question and of each question with no answer in the vault."""

    hits: list[tuple[float, bool]] = field(default_factory=list)
    top: list[float] = field(default_factory=list)
    other_top: list[float] = field(default_factory=list)  # another set's questions
    nonsense_top: list[float] = field(default_factory=list)  # made-up words
    cosines: list[float] = field(default_factory=list)  # relevant hits' cosine, as Mem0's score

    def report(self) -> str:
        lines = ["score     hits  relevant"]
        for lo in [i / 10 for i in range(10)]:
            inside = [
                rel for sc, rel in self.hits if lo <= sc < lo + 0.1 or (lo == 0.9 and sc == 1)
            ]
            share = f"{sum(inside) / len(inside):.3f}" if inside else "-"
            lines.append(f"{lo:.1f}-{lo + 0.1:.1f}  {len(inside):6d}  {share}")
        lines.append("floor  questions kept  other set's kept  made-up kept")

        def kept(tops: list[float], floor: float) -> str:
            return f"{sum(t >= floor for t in tops) / max(len(tops), 1):.3f}"

        for floor in (0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.55, 0.6):
            lines.append(
                f"{floor:.2f}   {kept(self.top, floor)}           "
                f"{kept(self.other_top, floor)}             {kept(self.nonsense_top, floor)}"
            )
        # what a framework's Mem0-calibrated threshold keeps: relevant top-10 hits at or over
        # it, by memcore's score and by the cosine a Mem0 vector store would report
        relevant = [sc for sc, rel in self.hits if rel]
        lines.append("threshold  relevant hits kept (memcore score)  (cosine)")
        for t in (0.3, 0.5, 0.6, 0.7):
            lines.append(f"{t:.1f}        {kept(relevant, t)}                          "
                         f"{kept(self.cosines, t)}")  # fmt: skip
        return "\n".join(lines)


CALIBRATION = Calibration()
NEGATIVES: list[tuple[bool, str]] = []  # (from another set, question)


TOP10: list[list[str]] = []  # each question's top 10 chunks, in the order asked


def top10_overlap(mine: list[list[str]], theirs_file: Path) -> float:
    """The mean share of each question's top 10 that the other run's top 10 holds too."""
    theirs = [json.loads(line) for line in theirs_file.read_text().splitlines() if line]
    if len(theirs) != len(mine):
        raise SystemExit(f"{theirs_file}: {len(theirs)} questions, this run {len(mine)}")
    shares = [
        len(set(a) & set(b)) / max(len(a), len(b), 1) for a, b in zip(mine, theirs, strict=True)
    ]
    return round(statistics.fmean(shares), 4) if shares else 0.0


def nonsense(n: int, seed: int = 7) -> list[str]:
    """Questions of made-up words: nothing in any vault answers them."""
    import random

    rng = random.Random(seed)
    syllables = [c + v for c in "bdfgklmnprstvwz" for v in "aeiou"]
    return [
        " ".join("".join(rng.choice(syllables) for _ in range(rng.randint(2, 3))) for _ in range(3))
        for _ in range(n)
    ]


async def rank_all(
    searcher: Searcher,
    q: dict[str, object],
    settings: Settings,
    args: argparse.Namespace,
    as_of: dt.date | None,
    scores: dict[str, Scores],
) -> None:
    """Score every fusion method on one set of candidates from one snapshot."""
    query = str(q["question"])
    t0 = time.perf_counter()
    qvec = await searcher.embed_query(query, [])
    async with searcher.store.snapshot() as reader:
        n = max(settings.search.candidates, args.limit)
        found = await searcher.candidates(reader, query, n, SearchFilters(), qvec)
        elapsed = (time.perf_counter() - t0) * 1000
        for method, sc in scores.items():
            t1 = time.perf_counter()
            fused = await searcher.fused(reader, query, found, method)
            fused = await searcher.boost_recent(reader, fused, as_of)
            fused = await searcher.weigh_strength(reader, fused, as_of)
            top = fusion.ranked(fused)[: args.limit]
            sc.latencies.append(elapsed + (time.perf_counter() - t1) * 1000)
            score_query(q, list(await searcher.hits(reader, found.pool, top)), sc)


def reference_day(
    q: dict[str, object], newest: dt.date | None, args: argparse.Namespace
) -> dt.date | None:
    """The day recency counts from: the question's own date when asked for and known (the
    day the user asked), else the newest dated chunk in the vault, or today."""
    if args.as_of == "today":
        return None
    if args.as_of == "question" and q.get("question_date"):
        day = parse_day(str(q["question_date"]))
        if day:
            return dt.date.fromisoformat(day)
    return newest


def newest_day(db: Path) -> dt.date | None:
    with sqlite3.connect(db) as conn:
        (day,) = conn.execute("SELECT max(date) FROM memory_chunks").fetchone()
    return dt.date.fromisoformat(day[:10]) if day else None


def options(pairs: list[str]) -> dict[str, str]:
    """``-o section.key=value`` pairs as settings overrides."""
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or "." not in key:
            raise SystemExit(f"-o takes section.key=value, got {pair!r}")
        out[key.strip()] = value
    return out


def load_queries(set_dir: Path) -> list[dict[str, object]]:
    with (set_dir / "queries.jsonl").open(encoding="utf-8") as fh:
        return [q for q in map(json.loads, fh) if q.get("gold_files")]


async def evaluate(args: argparse.Namespace) -> list[dict[str, object]]:
    set_dir: Path = args.set
    queries = load_queries(set_dir)
    groups: dict[str, list[dict[str, object]]] = defaultdict(list)
    for q in queries:
        groups[str(q.get("vault_dir") or "")].append(q)
    default = load_settings(set_dir, env={}).search.fusion
    methods = list(FUSIONS) if args.fusion == "all" else [args.fusion or default]
    scores = {m: Scores() for m in methods}
    index_s, files_indexed = 0.0, 0
    for vault_dir, qs in sorted(groups.items()):
        vault = set_dir / "vault" / vault_dir if vault_dir else set_dir / "vault"
        seconds, files = await run_vault(set_dir, vault, qs, args, scores)
        index_s, files_indexed = index_s + seconds, files_indexed + files
    rows = []
    for method, sc in scores.items():
        out: dict[str, object] = {"set": set_dir.name, "queries": len(queries)}
        out.update(sc.means())
        lat = sorted(sc.latencies)
        out["index_s"] = round(index_s, 1)
        out["files_indexed"] = files_indexed  # 0 when the cached index was reused whole
        out["query_ms_p50"] = round(statistics.median(lat), 2)
        out["query_ms_p95"] = round(lat[min(len(lat) - 1, round(0.95 * (len(lat) - 1)))], 2)
        out.update({"embedder": args.embedder, "fusion": method})
        rows.append(out)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", type=Path, required=True, help="folder with queries.jsonl and vault/")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    ap.add_argument("--embedder", default="local", help="local, static, ollama or openai")
    ap.add_argument(
        "-o",
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any setting, e.g. -o ollama.model=bge-m3 (repeatable)",
    )
    ap.add_argument(
        "--fusion", default=None, help="a method, or 'all' to compare (default: configured)"
    )
    ap.add_argument("--limit", type=int, default=100, help="chunks retrieved per query")
    ap.add_argument("--rankings", type=Path, help="write each question's top 10 here (JSON lines)")
    ap.add_argument("--overlap", type=Path, help="report top10_overlap with such a file")
    ap.add_argument(
        "--calibrate",
        type=Path,
        default=None,
        metavar="OTHER_SET",
        help="also print how often hits at each score are relevant, and how the best score "
        "of this set's questions compares with that of OTHER_SET's questions and made-up "
        "words asked of this set's vaults (nothing answers them)",
    )
    defaults = load_settings(Path("."), env={}).index
    ap.add_argument("--chunk-tokens", type=int, default=defaults.chunk_tokens)
    ap.add_argument("--overlap-tokens", type=int, default=defaults.overlap_tokens)
    ap.add_argument("--split", default="window", help="window or paragraph")
    ap.add_argument("--recency-weight", type=float, default=0.0, help="date boost (0 = off)")
    ap.add_argument("--half-life", type=float, default=30.0, help="recency half-life in days")
    ap.add_argument(
        "--strength-weight",
        type=float,
        default=0.0,
        help="FSRS retrievability in the score (0 = off); ages count from --as-of",
    )
    ap.add_argument(
        "--as-of",
        choices=("question", "newest", "today"),
        default="question",
        help="day recency counts from: the question's date (else newest), newest chunk, today",
    )
    args = ap.parse_args()
    if args.calibrate:
        others = [str(q["question"]) for q in load_queries(args.calibrate)]
        made_up = nonsense(len(others))
        for other, word in zip(others, made_up, strict=True):
            NEGATIVES.extend([(True, other), (False, word)])
    rows = asyncio.run(evaluate(args))
    if args.rankings:
        args.rankings.write_text("".join(json.dumps(t) + "\n" for t in TOP10))
    if args.overlap and len(rows) == 1:
        rows[0]["top10_overlap"] = top10_overlap(TOP10, args.overlap)
    if args.json:
        for row in rows:
            print(json.dumps(row))
        return
    if args.calibrate:
        print(CALIBRATION.report())
    keys = [k for k in rows[0] if k not in ("set", "embedder")]
    print(f"{rows[0]['set']} ({rows[0]['embedder']} embedder, {rows[0]['queries']} queries)")
    print("  ".join(f"{k:>9}" for k in keys))
    for row in rows:
        print("  ".join(f"{row.get(k, ''):>9}" for k in keys))


if __name__ == "__main__":
    main()
