"""Score fusion of a vector list and a keyword list into one ranking, every method's score in
[0, 1] (higher is more relevant). Pure.

A keyword score is a hit's BM25 over the query's best, times the share of the query's IDF
that best hit holds (the searcher measures it): BM25 over the best alone scored 1.0 for any
query that matched one word anywhere, so "a query nobody asked" (one stray "asked") looked as
relevant as an exact match, and no relevance floor could keep it out. The order within the
list is BM25's either way.

The candidates of a search are held as columns (``Pool``) and every method is computed over
them with numpy, in the same float64 operations, in the same order, as one chunk at a time
would be: a search fuses a few hundred candidates, and doing it chunk by chunk in Python was
a third of a millisecond of every search. ``Candidate`` values are made only when asked for."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

Scores = npt.NDArray[np.float64]  # one per pool candidate; NaN: not scored by that method


class Candidate(NamedTuple):
    """A chunk found by either retriever. Ranks are 1-based; None means not in that list.
    (A named tuple: a search makes hundreds, each in under half the time of a frozen
    dataclass.)"""

    chunk_id: int
    vector_score: float | None
    keyword_score: float | None
    vector_rank: int | None
    keyword_rank: int | None


class Pool:
    """Both lists' candidates as columns, in the union's order (the vector list's, then the
    keyword list's others): scores NaN and ranks 0 where a chunk is not in that list (a
    keyword hit's cosine, when known, is its vector score without a vector rank)."""

    __slots__ = (
        "_at",
        "_candidates",
        "ids",
        "keyword_rank",
        "keyword_score",
        "vector_rank",
        "vector_score",
    )

    def __init__(
        self,
        ids: npt.NDArray[np.int64],
        vector_score: Scores,
        keyword_score: Scores,
        vector_rank: npt.NDArray[np.int64],
        keyword_rank: npt.NDArray[np.int64],
    ) -> None:
        self.ids = ids
        self.vector_score = vector_score
        self.keyword_score = keyword_score
        self.vector_rank = vector_rank
        self.keyword_rank = keyword_rank
        self._candidates: list[Candidate] | None = None
        self._at: dict[int, int] | None = None

    @classmethod
    def of(
        cls,
        vector: Sequence[tuple[int, float]],
        keyword: Sequence[tuple[int, float]],
        cosine: Mapping[int, float] | None = None,
    ) -> Pool:
        """The union of both lists (best first, each chunk once); ``cosine`` adds the vector
        scores of keyword hits the vector list does not hold."""
        v_ids = [cid for cid, _ in vector]
        at = dict(zip(v_ids, range(len(v_ids)), strict=True))
        if len(at) < len(v_ids) or len({cid for cid, _ in keyword}) < len(keyword):
            return cls.of_candidates(_union(vector, keyword, cosine))  # (never from a search)
        k_at = [at.get(cid, -1) for cid, _ in keyword]
        only = [cid for (cid, _), i in zip(keyword, k_at, strict=True) if i < 0]
        n_v, n = len(v_ids), len(v_ids) + len(only)
        ids = np.array(v_ids + only, dtype=np.int64)
        vs = np.full(n, np.nan)
        vs[:n_v] = [score for _, score in vector]
        if cosine:
            vs[n_v:] = [cosine.get(cid, np.nan) for cid in only]
        rows = np.array(k_at, dtype=np.int64)
        rows[rows < 0] = np.arange(n_v, n)
        ks = np.full(n, np.nan)
        ks[rows] = [score for _, score in keyword]
        vr = np.zeros(n, dtype=np.int64)
        vr[:n_v] = np.arange(1, n_v + 1)
        kr = np.zeros(n, dtype=np.int64)
        kr[rows] = np.arange(1, len(keyword) + 1)
        return cls(ids, vs, ks, vr, kr)

    @classmethod
    def of_candidates(cls, cands: Sequence[Candidate]) -> Pool:
        """Candidates as columns (a chunk twice: both kept, the later one found by ``get``)."""
        pool = cls(
            np.array([c.chunk_id for c in cands], dtype=np.int64),
            np.array([_nan(c.vector_score) for c in cands], dtype=np.float64),
            np.array([_nan(c.keyword_score) for c in cands], dtype=np.float64),
            np.array([c.vector_rank or 0 for c in cands], dtype=np.int64),
            np.array([c.keyword_rank or 0 for c in cands], dtype=np.int64),
        )
        pool._candidates = list(cands)
        return pool

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def candidates(self) -> list[Candidate]:
        """The pool as Candidate values, in its order (made once, when first asked for)."""
        if self._candidates is None:
            vs, ks = self.vector_score.tolist(), self.keyword_score.tolist()
            vr, kr = self.vector_rank.tolist(), self.keyword_rank.tolist()
            rows = zip(self.ids.tolist(), vs, ks, vr, kr, strict=True)
            self._candidates = [_candidate(*row) for row in rows]
        return self._candidates

    def get(self, chunk_id: int) -> Candidate | None:
        """One chunk's candidate (None when neither list holds it)."""
        if self._at is None:
            self._at = {cid: i for i, cid in enumerate(self.ids.tolist())}
        i = self._at.get(chunk_id)
        if i is None:
            return None
        if self._candidates is not None:
            return self._candidates[i]
        v, k = float(self.vector_score[i]), float(self.keyword_score[i])
        return _candidate(chunk_id, v, k, int(self.vector_rank[i]), int(self.keyword_rank[i]))

    def top_keyword(self) -> int | None:
        """The keyword list's best chunk."""
        first = np.flatnonzero(self.keyword_rank == 1)
        return int(self.ids[first[0]]) if len(first) else None


def as_pool(cands: Sequence[Candidate] | Pool) -> Pool:
    return cands if isinstance(cands, Pool) else Pool.of_candidates(cands)


def build_candidates(
    vector: Sequence[tuple[int, float]],
    keyword: Sequence[tuple[int, float]],
    cosine: Mapping[int, float] | None = None,
) -> list[Candidate]:
    """Union of both lists. ``cosine`` adds vector scores for keyword-only candidates."""
    return Pool.of(vector, keyword, cosine).candidates


def _union(
    vector: Sequence[tuple[int, float]],
    keyword: Sequence[tuple[int, float]],
    cosine: Mapping[int, float] | None,
) -> list[Candidate]:
    """The union, one chunk at a time (lists that name a chunk twice: its last place counts)."""
    vrank = {cid: i + 1 for i, (cid, _) in enumerate(vector)}
    krank = {cid: i + 1 for i, (cid, _) in enumerate(keyword)}
    vscore = dict(cosine or {}) | dict(vector)
    kscore = dict(keyword)
    ids = dict.fromkeys([cid for cid, _ in vector] + [cid for cid, _ in keyword])
    return [
        Candidate(cid, vscore.get(cid), kscore.get(cid), vrank.get(cid), krank.get(cid))
        for cid in ids
    ]


def _nan(x: float | None) -> float:
    return np.nan if x is None else x


def _candidate(cid: int, vs: float, ks: float, vr: int, kr: int) -> Candidate:
    """A pool's row as a Candidate: a NaN score and a rank 0 read as None (not in that list).
    (``tuple.__new__``: a named tuple's own constructor is a Python function, 2.5x slower.)"""
    return tuple.__new__(
        Candidate, (cid, None if vs != vs else vs, None if ks != ks else ks, vr or None, kr or None)
    )


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
Cands = Sequence[Candidate] | Pool


def rrf(cands: Cands, k: int = 60, weights: Weights = DEFAULT_WEIGHTS) -> dict[int, float]:
    """Weighted Reciprocal Rank Fusion, sum of w / (k + rank) over the lists a chunk is in,
    divided by its largest possible value (first in both lists): a score in (0, 1]."""
    pool = as_pool(cands)
    return scored(pool, _rrf(pool, k, weights))


def _rrf(pool: Pool, k: int, weights: Weights) -> Scores:
    best = weights.total / (k + 1)
    if not best > 0:
        return np.zeros(len(pool))
    with np.errstate(divide="ignore"):
        v = np.where(pool.vector_rank > 0, weights.vector / (k + pool.vector_rank), 0.0)
        t = np.where(pool.keyword_rank > 0, weights.keyword / (k + pool.keyword_rank), 0.0)
    out: Scores = (v + t) / best
    return out


def _minmax(values: Scores) -> Scores:
    """Each present (not NaN) value scaled to [0, 1] over the present ones; absent ones 0."""
    present = ~np.isnan(values)
    if not present.any():
        return np.zeros(len(values))
    lo, hi = float(values[present].min()), float(values[present].max())
    span = hi - lo
    scaled = (values - lo) / span if span > 0 else np.ones(len(values))
    return np.where(present, scaled, 0.0)


def linear(cands: Cands, weights: Weights = DEFAULT_WEIGHTS) -> dict[int, float]:
    """Normalised weighted sum: min-max scale each list over the candidates, then mix by the
    weights (divided by their sum): a score in [0, 1]."""
    pool = as_pool(cands)
    return scored(pool, _linear(pool, weights))


def _linear(pool: Pool, weights: Weights) -> Scores:
    v, t = _minmax(pool.vector_score), _minmax(pool.keyword_score)
    out: Scores = (weights.vector * v + weights.keyword * t) / (weights.total or 1.0)
    return out


def keywords(cands: Cands, scale: float = 1.0) -> dict[int, float]:
    """The keyword list on its own: each BM25 over the query's best, times ``scale``, the
    share of the query's IDF the best hit holds (see the module's docstring)."""
    pool = as_pool(cands)
    return scored(pool, _keywords(pool, scale))


def _keywords(pool: Pool, scale: float) -> Scores:
    """Keyword scores of the keyword list's chunks (NaN for the others)."""
    ks = _zeroed(pool.keyword_score)
    best = float(ks.max(initial=0.0))
    out = _unit(scale * ks / best) if best > 0 else np.zeros(len(pool))
    return np.where(pool.keyword_rank > 0, out, np.nan)


def weighted(
    cands: Cands, weights: Weights = DEFAULT_WEIGHTS, keyword_scale: float = 1.0
) -> dict[int, float]:
    """The design card's keyword rerank: vector_weight x cosine + keyword_weight x the
    keyword score (``keywords``), divided by the weights' sum and kept in [0, 1]."""
    pool = as_pool(cands)
    return scored(pool, _weighted(pool, weights, keyword_scale))


def _weighted(pool: Pool, weights: Weights, keyword_scale: float) -> Scores:
    kw = _zeroed(_keywords(pool, keyword_scale))
    vs = _zeroed(pool.vector_score)
    return _unit((weights.vector * vs + weights.keyword * kw) / (weights.total or 1.0))


def _zeroed(x: Scores) -> Scores:
    """NaN (not in that list) as 0, as ``score or 0.0`` reads None."""
    out: Scores = np.where(np.isnan(x), 0.0, x)
    return out


def _unit(x: Scores) -> Scores:
    out: Scores = np.fmin(1.0, np.fmax(0.0, x))  # (NaN: 0, as min(1, max(0, NaN)) is)
    return out


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


def ranked_rounded(ids: npt.NDArray[np.int64], scores: Scores) -> list[tuple[int, float]]:
    """(chunk id, score) best first, each score rounded to 6 digits first as
    ``round(score, 6)`` does (the score every front shows): the order of the rounded scores,
    ties in the given order; NaN scores (left out by a method) dropped."""
    kept = ~np.isnan(scores)
    ids_kept = ids[kept].tolist()
    rounded = round6(scores[kept])
    order = np.argsort(-rounded, kind="stable").tolist()
    values = rounded.tolist()
    return [(ids_kept[i], values[i]) for i in order]


def round6(x: Scores) -> Scores:
    """``round(v, 6)`` of each value, bit for bit, without a Python call per value (Python's
    round costs half a microsecond each). The nearest millionth is rint(v x 1e6) / 1e6: the
    division of two exact numbers is correctly rounded, so it is the double nearest to that
    millionth, as Python's round gives. Only the choice of millionth can differ: the product
    carries an error far below 1e-9, which matters only next to a half; those few values are
    rounded by Python's round itself."""
    y = x * 1e6
    out: Scores = np.rint(y) / 1e6
    near_half = np.abs(y - np.floor(y) - 0.5) < 1e-6
    for i in np.flatnonzero(near_half).tolist():
        out[i] = round(float(x[i]), 6)
    return out


def vector_spread(cands: Cands, depth: int = 20) -> float | None:
    """Cosine of the best vector hit minus that of the ``depth``-th: how much the list knows."""
    pool = as_pool(cands)
    listed = pool.vector_score[(pool.vector_rank > 0) & ~np.isnan(pool.vector_score)]
    if len(listed) < 2:
        return None
    ordered = np.sort(listed)[::-1]
    return float(ordered[0] - ordered[min(depth, len(ordered)) - 1])


def adaptive_keyword_weight(
    cands: Cands,
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
    cands: Cands,
    model_reads_query: bool = True,
    weights: Weights = DEFAULT_WEIGHTS,
    keyword_scale: float = 1.0,
) -> dict[int, float]:
    """The card's keyword rerank with a per-query keyword weight w (adaptive_keyword_weight):
    (cosine + w x the keyword score) / (1 + w), in [0, 1]."""
    pool = as_pool(cands)
    return scored(pool, _adaptive(pool, model_reads_query, weights, keyword_scale))


def _adaptive(
    pool: Pool, model_reads_query: bool, weights: Weights, keyword_scale: float
) -> Scores:
    w = adaptive_keyword_weight(pool, model_reads_query, weights)
    return _weighted(pool, Weights(1.0, w), keyword_scale)


def fuse(
    cands: Cands,
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
    pool = as_pool(cands)
    return scored(pool, fuse_pool(pool, method, weights, rrf_k, model_reads_query, keyword_scale))


def fuse_pool(
    pool: Pool,
    method: str,
    weights: Weights = DEFAULT_WEIGHTS,
    rrf_k: int = 60,
    model_reads_query: bool = True,
    keyword_scale: float = 1.0,
) -> Scores:
    """``fuse`` as one score per pool candidate, NaN for those the method leaves out (the
    keyword method: chunks outside the keyword list; vector: outside the vector list)."""
    if method == "keyword":
        return _keywords(pool, keyword_scale)
    if method == "vector":
        vs = _zeroed(pool.vector_score)
        return np.where(pool.vector_rank > 0, _unit(vs), np.nan)
    if method == "rrf":
        return _rrf(pool, rrf_k, weights)
    if method == "linear":
        return _linear(pool, weights)
    if method == "adaptive":
        return _adaptive(pool, model_reads_query, weights, keyword_scale)
    return _weighted(pool, weights, keyword_scale)


def scored(pool: Pool, scores: Scores) -> dict[int, float]:
    """Pool scores as {chunk id: score}, in the pool's order, NaN (left out) dropped."""
    return {
        cid: sc
        for cid, sc in zip(pool.ids.tolist(), scores.tolist(), strict=True)
        if sc == sc  # not NaN
    }
