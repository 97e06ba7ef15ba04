"""Short facts among long chats: can a bare one-line fact in MEMORY.md be found by a paraphrase
when the vault also holds a long conversation, and what does it cost the conversation's own
questions?

    python bench/facts.py [--chat ../shared/eval/locomo] [--json]

Builds one vault per conversation of the chat set (under ~/.cache/memcore-eval/facts, never in
the repository): its sessions, plus a MEMORY.md of the facts below, each a bare line under a
heading. Then asks (1) one paraphrase per fact, which shares few or no words with it, and
(2) the chat set's own questions. Prints, per fusion method, the facts' recall@1/@5, the share
of chat questions whose top 5 files include MEMORY.md (the cost of ranking facts high), the chat
questions' evidence recall@10 with the facts present, and each fact's rank in the vector list,
the keyword list and the fused list.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import retrieval  # the harness: index caching, metrics

from memcore.compose import build_service
from memcore.core.models import SearchFilters
from memcore.core.settings import FUSIONS, Settings, load_settings
from memcore.search import fusion
from memcore.search.searcher import Searcher

# (heading, fact, paraphrase query). The first is the design card's acceptance case.
FACTS = [
    ("Projects", "DiveAdstra uses DX12 by default.", "render engine"),
    ("Projects", "DiveAdstra uses DX12 by default.", "which graphics API does the game use"),
    ("Infrastructure", "The build server runs Ubuntu 24.04.", "what OS is the CI machine on"),
    ("Process", "Releases ship on Thursdays.", "which weekday do we deploy new versions"),
    ("Preferences", "Lin wants pull requests under 400 lines.", "how big may a code review be"),
    ("Lessons", "Never run migrations from two machines at once.", "rule for schema changes"),
    ("Security", "The staging password rotates every 90 days.", "how often do credentials change"),
    ("People", "Mara is allergic to peanuts.", "food restrictions for the team lunch"),
    ("Office", "The office Wi-Fi network is called studio-5g.", "wireless network name at work"),
    ("People", "Tomas owns the audio pipeline.", "who is responsible for sound"),
    ("Targets", "The game targets 60 fps on the Steam Deck.", "frame rate goal on the handheld"),
    ("Tooling", "Crash reports go to Sentry, project dive-prod.", "where do error logs end up"),
]  # fmt: skip


def memory_md() -> str:
    sections: dict[str, list[str]] = defaultdict(list)
    for heading, fact, _ in FACTS:
        if fact not in sections[heading]:
            sections[heading].append(fact)
    body = "".join(f"\n## {h}\n\n" + "\n".join(facts) + "\n" for h, facts in sections.items())
    return "# Memory\n" + body


def build_sets(chat: Path, work: Path) -> tuple[Path, Path]:
    """Two sets over the same vaults: the fact questions and the chat set's own questions."""
    chat_queries = retrieval.load_queries(chat)
    convs = sorted({str(q["vault_dir"]) for q in chat_queries})
    facts_set, chat_set = work / "facts", work / "chat"
    for conv in convs:
        vault = work / "vaults" / conv
        if not vault.exists():
            shutil.copytree(chat / "vault" / conv, vault)
        (vault / "MEMORY.md").write_text(memory_md(), encoding="utf-8")
    for set_dir in (facts_set, chat_set):
        set_dir.mkdir(parents=True, exist_ok=True)
        link = set_dir / "vault"
        if not link.exists():
            link.symlink_to(work / "vaults", target_is_directory=True)
    fact_rows = [
        {"id": f"{conv}/fact{i}", "vault_dir": conv, "question": q, "fact": fact,
         "gold_files": ["MEMORY.md"]}
        for conv in convs
        for i, (_, fact, q) in enumerate(FACTS)
    ]  # fmt: skip
    (facts_set / "queries.jsonl").write_text("\n".join(map(json.dumps, fact_rows)) + "\n")
    (chat_set / "queries.jsonl").write_text("\n".join(map(json.dumps, chat_queries)) + "\n")
    return facts_set, chat_set


def vault_settings(set_dir: Path, conv: str, args: argparse.Namespace) -> Settings:
    """One conversation's vault, on the index the harness cached for it."""
    vault = set_dir / "vault" / conv
    overrides = {
        "index.include": ("**/*.md",),
        "storage.db": str(retrieval.cache_db(set_dir, vault, args)),
    }
    return load_settings(vault, overrides, env={})


async def fact_ranks(facts_set: Path, args: argparse.Namespace) -> list[dict[str, object]]:
    """Rank of each fact's own chunk in the vector and keyword lists and under every fusion."""
    rows = []
    queries = retrieval.load_queries(facts_set)
    for conv in sorted({str(q["vault_dir"]) for q in queries}):
        async with build_service(vault_settings(facts_set, conv, args)) as svc:
            await svc.index()
            for q in (q for q in queries if q["vault_dir"] == conv):
                rows.append(await rank_fact(svc.searcher, str(q["question"]), str(q["fact"])))
                rows[-1]["conv"] = conv
    return rows


async def rank_fact(searcher: Searcher, query: str, fact: str) -> dict[str, object]:
    qvec = await searcher.embed_query(query, [])
    async with searcher.store.snapshot() as reader:
        found = await searcher.candidates(reader, query, 400, SearchFilters(), qvec)
        rows = await reader.chunk_rows([c.chunk_id for c in found.candidates])
        fused = {m: await searcher.fused(reader, query, found, m) for m in FUSIONS}
    own = next((c for c in found.candidates if fact in rows[c.chunk_id].text), None)
    out: dict[str, object] = {
        "query": query,
        "fact": fact,
        "cosine": round(own.vector_score or 0.0, 3) if own else None,
        "vector_rank": own.vector_rank if own else None,
        "keyword_rank": own.keyword_rank if own else None,
    }
    for method in FUSIONS:
        order = fusion.ranked(fused[method])
        out[method] = next(
            (i + 1 for i, (cid, _) in enumerate(order) if own and cid == own.chunk_id), None
        )
    return out


def intrusions(chat_set: Path, args: argparse.Namespace) -> float:
    """Share of the chat questions whose top 5 files include MEMORY.md."""
    hits = total = 0
    queries = retrieval.load_queries(chat_set)

    async def run() -> None:
        nonlocal hits, total
        for conv in sorted({str(q["vault_dir"]) for q in queries}):
            async with build_service(vault_settings(chat_set, conv, args)) as svc:
                for q in (q for q in queries if q["vault_dir"] == conv):
                    result = await svc.search(str(q["question"]), limit=20)
                    files = retrieval.ranked_files(list(result.hits))[:5]
                    hits += "MEMORY.md" in files
                    total += 1

    asyncio.run(run())
    return hits / max(total, 1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chat", type=Path, default=Path("../shared/eval/locomo"))
    ap.add_argument("--work", type=Path, default=retrieval.CACHE / "facts")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    facts_set, chat_set = build_sets(args.chat, args.work)
    default = load_settings(facts_set, env={}).search.fusion
    harness = argparse.Namespace(
        embedder="local", option=[], fusion="all", limit=100, chunk_tokens=200,
        overlap_tokens=25, split="window", recency_weight=0.0, half_life=30.0, as_of="today",
        strength_weight=0.0,
    )  # fmt: skip
    defaults = load_settings(facts_set, env={}).index
    harness.chunk_tokens, harness.overlap_tokens = defaults.chunk_tokens, defaults.overlap_tokens
    harness.set = chat_set
    chat = {str(r["fusion"]): r for r in asyncio.run(retrieval.evaluate(harness))}
    ranks = asyncio.run(fact_ranks(facts_set, harness))
    summary = {
        m: {
            "fact_at_1": round(sum(r[m] == 1 for r in ranks) / len(ranks), 3),
            "fact_in_top5": round(sum((r[m] or 99) <= 5 for r in ranks) / len(ranks), 3),
            "chat_evidence_recall@10": chat[m]["evidence_recall@10"] if m in chat else None,
            "chat_ndcg@10": chat[m]["ndcg@10"] if m in chat else None,
        }
        for m in FUSIONS
    }
    intruded = round(intrusions(chat_set, harness), 4)
    if args.json:
        print(json.dumps({"summary": summary, "chat_top5_with_memory_md": intruded,
                          "ranks": ranks}))  # fmt: skip
        return
    print(f"{len(FACTS)} fact questions x {len(ranks) // len(FACTS)} chat vaults "
          f"({args.chat.name}); the fact's own chunk must rank")  # fmt: skip
    print(f"{'fusion':>9}  {'fact@1':>7}  {'fact in top 5':>13}  {'chat evidence@10':>16}")
    for m, row in summary.items():
        print(f"{m:>9}  {row['fact_at_1']:>7}  {row['fact_in_top5']:>13}  "
              f"{row['chat_evidence_recall@10'] or '':>16}")  # fmt: skip
    print(f"chat questions with MEMORY.md in their top 5 files (default search): {intruded}")
    first = ranks[0]["conv"]
    print(f"per fact in {first}: cosine, vector rank, keyword rank, rank under {default}")
    for r in (r for r in ranks if r["conv"] == first):
        print(f"  {r['query']!r:42} {r['cosine']!s:>6} v#{r['vector_rank']!s:<4} "
              f"k#{r['keyword_rank']!s:<4} #{r[default]}")  # fmt: skip


if __name__ == "__main__":
    main()
