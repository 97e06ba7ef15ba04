"""Score fusion of a vector list and a keyword list into one ranking, every method's score in
[0, 1] (higher is more relevant). Pure.

A keyword score is a hit's BM25 over the query's best, times the share of the query's IDF
that best hit holds (the searcher measures it): BM25 over the best alone scored 1.0 for any
query that matched one word anywhere, so "a query nobody asked" (one stray "asked") looked as
relevant as an exact match, and no relevance floor could keep it out. The order within the
list is BM25's either way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple


class Candidate(NamedTuple):
    """A chunk found by either retriever. Ranks are 1-based; None means not in that list.
    (A named tuple: a search makes hundreds, each in under half the time of a frozen
    dataclass.)"""

    chunk_id: int
    vector_score: float | None
    keyword_score: float | None
    vector_rank: int | None
    keyword_rank: int | None


def build_candidates(
    vector: Sequence[tuple[int, float]],
    keyword: Sequence[tuple[int, float]],
    cosine: Mapping[int, float] | None = None,
) -> list[Candidate]:
    """Union of both lists. ``cosine`` adds vector scores for keyword-only candidates."""
    vrank = {cid: i + 1 for i, (cid, _) in enumerate(vector)}
    krank = {cid: i + 1 for i, (cid, _) in enumerate(keyword)}
    vscore = dict(cosine or {}) | dict(vector)
    kscore = dict(keyword)
    ids = dict.fromkeys([cid for cid, _ in vector] + [cid for cid, _ in keyword])
    new = tuple.__new__  # a named tuple's own constructor is a Python function: 2.5x slower
    return [
        new(Candidate, (cid, vscore.get(cid), kscore.get(cid), vrank.get(cid), krank.get(cid)))
        for cid in ids
    ]


@dataclass(frozen=True, slots=True)
class Weights:
    """How much each list counts: ``search.vector_weight`` and ``search.keyword_weight``."""

    vector: float = 0.7
    keyword: float = 0.3

    @property
    def total(self) -> float:
        return self.vector + self.keyword


DEFAULT_WEIGHTS = Weights()
ADAPTIVE_BASE = 0.7  # adaptive's keyword weight at the default weights (adaptive_keyword_weight)


def rrf(
    cands: Sequence[Candidate], k: int = 60, weights: Weights = DEFAULT_WEIGHTS
) -> dict[int, float]:
    """Weighted Reciprocal Rank Fusion, sum of w / (k + rank) over the lists a chunk is in,
    divided by its largest possible value (first in both lists): a score in (0, 1]."""
    best = weights.total / (k + 1)
    out: dict[int, float] = {}
    for c in cands:
        s = 0.0
        if c.vector_rank is not None:
            s += weights.vector / (k + c.vector_rank)
        if c.keyword_rank is not None:
            s += weights.keyword / (k + c.keyword_rank)
        out[c.chunk_id] = s / best if best > 0 else 0.0
    return out


def _minmax(values: Mapping[int, float]) -> dict[int, float]:
    if not values:
        return {}
    lo, hi = min(values.values()), max(values.values())
    span = hi - lo
    return {cid: (v - lo) / span if span > 0 else 1.0 for cid, v in values.items()}


def linear(cands: Sequence[Candidate], weights: Weights = DEFAULT_WEIGHTS) -> dict[int, float]:
    """Normalised weighted sum: min-max scale each list over the candidates, then mix by the
    weights (divided by their sum): a score in [0, 1]."""
    v = _minmax({c.chunk_id: c.vector_score for c in cands if c.vector_score is not None})
    t = _minmax({c.chunk_id: c.keyword_score for c in cands if c.keyword_score is not None})
    total = weights.total or 1.0
    return {
        c.chunk_id: (
            weights.vector * v.get(c.chunk_id, 0.0) + weights.keyword * t.get(c.chunk_id, 0.0)
        )
        / total
        for c in cands
    }


def keywords(cands: Sequence[Candidate], scale: float = 1.0) -> dict[int, float]:
    """The keyword list on its own: each BM25 over the query's best, times ``scale``, the
    share of the query's IDF the best hit holds (see the module's docstring)."""
    best = max((c.keyword_score or 0.0 for c in cands), default=0.0)
    return {
        c.chunk_id: _unit(scale * (c.keyword_score or 0.0) / best) if best > 0 else 0.0
        for c in cands
        if c.keyword_rank
    }


def weighted(
    cands: Sequence[Candidate], weights: Weights = DEFAULT_WEIGHTS, keyword_scale: float = 1.0
) -> dict[int, float]:
    """The design card's keyword rerank: vector_weight x cosine + keyword_weight x the
    keyword score (``keywords``), divided by the weights' sum and kept in [0, 1]."""
    kw = keywords(cands, keyword_scale)
    total = weights.total or 1.0
    return {
        c.chunk_id: _unit(
            (weights.vector * (c.vector_score or 0.0) + weights.keyword * kw.get(c.chunk_id, 0.0))
            / total
        )
        for c in cands
    }


def _unit(x: float) -> float:
    return min(1.0, max(0.0, x))


def recency(
    scores: Mapping[int, float],
    age_days: Mapping[int, float],
    weight: float,
    half_life_days: float = 30.0,
) -> dict[int, float]:
    """Date boost after any fusion method: a score is multiplied by (1 + ``weight`` x
    0.5 ^ (age / half_life)) / (1 + ``weight``), so a chunk dated on the reference day keeps its
    score, one ``half_life_days`` older keeps (1 + weight / 2) / (1 + weight) of it, and scores
    stay in [0, 1]. Future dates count as age 0; undated chunks (not in ``age_days``) count as
    infinitely old. Proportional, so it means the same for every method."""
    if weight <= 0:
        return dict(scores)
    out: dict[int, float] = {}
    for cid, sc in scores.items():
        age = age_days.get(cid)
        boost = 0.0 if age is None else weight * 0.5 ** (max(age, 0.0) / half_life_days)
        out[cid] = sc * (1.0 + boost) / (1.0 + weight)
    return out


def ranked(scores: Mapping[int, float]) -> list[tuple[int, float]]:
    """Scores as (chunk id, score), best first; ties keep insertion order."""
    return sorted(scores.items(), key=lambda kv: -kv[1])


def vector_spread(cands: Sequence[Candidate], depth: int = 20) -> float | None:
    """Cosine of the best vector hit minus that of the ``depth``-th: how much the list knows."""
    scores = sorted(
        (c.vector_score for c in cands if c.vector_rank is not None and c.vector_score is not None),
        reverse=True,
    )
    if len(scores) < 2:
        return None
    return scores[0] - scores[min(depth, len(scores)) - 1]


def adaptive_keyword_weight(
    cands: Sequence[Candidate],
    model_reads_query: bool = True,
    weights: Weights = DEFAULT_WEIGHTS,
    reference_spread: float = 0.15,
) -> float:
    """How much to trust keywords over vectors for this query, as a multiple of the vector
    list's weight.

    The base is 0.7 at the default weights (0.3 / 0.7) and moves with their ratio. It was 0.5
    while a keyword score was BM25 over the best alone; on the absolute scale (the module's
    docstring) keyword scores are lower, and 0.7 gives back what 0.5 lost on LoCoMo (nDCG@10
    0.853 at 0.5, 0.857 at 0.7, 0.854 before; docs/retrieval-quality.md). A vector list
    whose top cosines are nearly flat carries little information, so the weight grows as the
    spread falls below ``reference_spread`` (clamped to 0.5x-4x). A query in a script the
    embedder cannot read (Chinese for an English model) multiplies it by 4.
    """
    ratio = weights.keyword / weights.vector if weights.vector > 0 else 1e6
    base = ADAPTIVE_BASE * ratio / (DEFAULT_WEIGHTS.keyword / DEFAULT_WEIGHTS.vector)
    spread = vector_spread(cands)
    factor = 1.0 if spread is None else min(4.0, max(0.5, reference_spread / max(spread, 1e-3)))
    return base * factor * (1.0 if model_reads_query else 4.0)


def adaptive(
    cands: Sequence[Candidate],
    model_reads_query: bool = True,
    weights: Weights = DEFAULT_WEIGHTS,
    keyword_scale: float = 1.0,
) -> dict[int, float]:
    """The card's keyword rerank with a per-query keyword weight w (adaptive_keyword_weight):
    (cosine + w x the keyword score) / (1 + w), in [0, 1]."""
    w = adaptive_keyword_weight(cands, model_reads_query, weights)
    return weighted(cands, Weights(1.0, w), keyword_scale)


def fuse(
    cands: Sequence[Candidate],
    method: str,
    weights: Weights = DEFAULT_WEIGHTS,
    rrf_k: int = 60,
    model_reads_query: bool = True,
    keyword_scale: float = 1.0,
) -> dict[int, float]:
    """Scores in [0, 1], higher is better, by a named method: adaptive, weighted, rrf, linear,
    vector (the cosine) or keyword (``keywords``). ``keyword_scale`` scales the keyword
    score of the methods that use it (keyword, weighted, adaptive); rrf and linear use ranks
    and min-max spans, relative to the query by nature."""
    if method == "keyword":
        return keywords(cands, keyword_scale)
    if method == "vector":
        return {c.chunk_id: _unit(c.vector_score or 0.0) for c in cands if c.vector_rank}
    if method == "rrf":
        return rrf(cands, k=rrf_k, weights=weights)
    if method == "linear":
        return linear(cands, weights)
    if method == "adaptive":
        return adaptive(cands, model_reads_query, weights, keyword_scale)
    return weighted(cands, weights, keyword_scale)
