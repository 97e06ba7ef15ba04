"""Score fusion of a vector list and a keyword list into one ranking, every method's score in
[0, 1] (higher is more relevant). Pure."""

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


def weighted(cands: Sequence[Candidate], weights: Weights = DEFAULT_WEIGHTS) -> dict[int, float]:
    """The design card's keyword rerank: vector_weight x cosine + keyword_weight x (BM25 /
    best BM25 of the query), divided by the weights' sum and kept in [0, 1]."""
    best = max((c.keyword_score or 0.0 for c in cands), default=0.0)
    total = weights.total or 1.0
    return {
        c.chunk_id: _unit(
            (
                weights.vector * (c.vector_score or 0.0)
                + (weights.keyword * (c.keyword_score or 0.0) / best if best > 0 else 0.0)
            )
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

    The base is 0.5 at the default weights (0.3 / 0.7, the best single value measured across
    the dev sets) and moves with their ratio. A vector list whose top cosines are nearly flat
    carries little information, so the weight grows as the spread falls below
    ``reference_spread`` (clamped to 0.5x-4x). A query in a script the embedder cannot read
    (Chinese for an English model) multiplies it by 4.
    """
    ratio = weights.keyword / weights.vector if weights.vector > 0 else 1e6
    base = 0.5 * ratio / (DEFAULT_WEIGHTS.keyword / DEFAULT_WEIGHTS.vector)
    spread = vector_spread(cands)
    factor = 1.0 if spread is None else min(4.0, max(0.5, reference_spread / max(spread, 1e-3)))
    return base * factor * (1.0 if model_reads_query else 4.0)


def adaptive(
    cands: Sequence[Candidate],
    model_reads_query: bool = True,
    weights: Weights = DEFAULT_WEIGHTS,
) -> dict[int, float]:
    """The card's keyword rerank with a per-query keyword weight w (adaptive_keyword_weight):
    (cosine + w x BM25 / best BM25) / (1 + w), in [0, 1]."""
    w = adaptive_keyword_weight(cands, model_reads_query, weights)
    return weighted(cands, Weights(1.0, w))


def fuse(
    cands: Sequence[Candidate],
    method: str,
    weights: Weights = DEFAULT_WEIGHTS,
    rrf_k: int = 60,
    model_reads_query: bool = True,
) -> dict[int, float]:
    """Scores in [0, 1], higher is better, by a named method: adaptive, weighted, rrf, linear,
    vector (the cosine) or keyword (BM25 / the query's best BM25)."""
    if method == "keyword":
        best = max((c.keyword_score or 0.0 for c in cands), default=0.0)
        return {
            c.chunk_id: _unit((c.keyword_score or 0.0) / best) if best > 0 else 0.0
            for c in cands
            if c.keyword_rank
        }
    if method == "vector":
        return {c.chunk_id: _unit(c.vector_score or 0.0) for c in cands if c.vector_rank}
    if method == "rrf":
        return rrf(cands, k=rrf_k, weights=weights)
    if method == "linear":
        return linear(cands, weights)
    if method == "adaptive":
        return adaptive(cands, model_reads_query=model_reads_query, weights=weights)
    return weighted(cands, weights)
