"""Fusion over columns (fusion.Pool) gives, bit for bit, what the methods' definitions give one
chunk at a time: the reference below is each method written out per candidate, as the
docstrings define it, and the ranking rounds as Python's ``round(score, 6)`` does."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from memcore.search import fusion
from memcore.search.fusion import Candidate, Pool, Weights

METHODS = ("adaptive", "weighted", "rrf", "linear", "vector", "keyword")


def _unit(x: float) -> float:
    return min(1.0, max(0.0, x))


def _keywords(cands: list[Candidate], scale: float) -> dict[int, float]:
    best = max((c.keyword_score or 0.0 for c in cands), default=0.0)
    return {
        c.chunk_id: _unit(scale * (c.keyword_score or 0.0) / best) if best > 0 else 0.0
        for c in cands
        if c.keyword_rank
    }


def _weighted(cands: list[Candidate], w: Weights, scale: float) -> dict[int, float]:
    kw = _keywords(cands, scale)
    total = w.total or 1.0
    out = {}
    for c in cands:
        mix = w.vector * (c.vector_score or 0.0) + w.keyword * kw.get(c.chunk_id, 0.0)
        out[c.chunk_id] = _unit(mix / total)
    return out


def _minmax(values: dict[int, float]) -> dict[int, float]:
    if not values:
        return {}
    lo, hi = min(values.values()), max(values.values())
    return {cid: (v - lo) / (hi - lo) if hi > lo else 1.0 for cid, v in values.items()}


def reference(
    cands: list[Candidate], method: str, w: Weights, k: int, reads: bool, scale: float
) -> dict[int, float]:
    """Each method, one candidate at a time."""
    if method == "keyword":
        return _keywords(cands, scale)
    if method == "vector":
        return {c.chunk_id: _unit(c.vector_score or 0.0) for c in cands if c.vector_rank}
    if method == "rrf":
        best = w.total / (k + 1)
        out = {}
        for c in cands:
            s = 0.0
            if c.vector_rank is not None:
                s += w.vector / (k + c.vector_rank)
            if c.keyword_rank is not None:
                s += w.keyword / (k + c.keyword_rank)
            out[c.chunk_id] = s / best if best > 0 else 0.0
        return out
    if method == "linear":
        v = _minmax({c.chunk_id: c.vector_score for c in cands if c.vector_score is not None})
        t = _minmax({c.chunk_id: c.keyword_score for c in cands if c.keyword_score is not None})
        total = w.total or 1.0
        mixed = {}
        for c in cands:
            mix = w.vector * v.get(c.chunk_id, 0.0) + w.keyword * t.get(c.chunk_id, 0.0)
            mixed[c.chunk_id] = mix / total
        return mixed
    if method == "adaptive":
        return _weighted(
            cands, Weights(1.0, fusion.adaptive_keyword_weight(cands, reads, w)), scale
        )
    return _weighted(cands, w, scale)


Ranked = list[tuple[int, float]]


def _lists(data: st.DataObject) -> tuple[Ranked, Ranked, dict[int, float]]:
    ids = data.draw(st.lists(st.integers(0, 60), unique=True, max_size=40))
    n_vector = data.draw(st.integers(0, len(ids)))
    cos = st.floats(-1.0, 1.0, allow_nan=False)
    vector = sorted(((cid, data.draw(cos)) for cid in ids[:n_vector]), key=lambda p: -p[1])
    pick = data.draw(st.lists(st.sampled_from(ids), unique=True) if ids else st.just([]))
    bm25 = st.floats(0.0, 50.0, allow_nan=False)
    keyword = sorted(((cid, data.draw(bm25)) for cid in pick), key=lambda p: -p[1])
    in_vector = {cid for cid, _ in vector}
    cosine = {cid: data.draw(cos) for cid, _ in keyword if cid not in in_vector}
    return vector, keyword, cosine


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_columns_score_and_rank_as_one_chunk_at_a_time(data: st.DataObject) -> None:
    vector, keyword, cosine = _lists(data)
    method = data.draw(st.sampled_from(METHODS))
    w = Weights(
        data.draw(st.sampled_from([0.7, 0.5, 1.0, 0.0])),
        data.draw(st.sampled_from([0.3, 0.5, 0.0])),
    )
    scale, reads = data.draw(st.floats(0.0, 1.0)), data.draw(st.booleans())
    pool = Pool.of(vector, keyword, cosine)
    # the candidates: the vector list's order, then the keyword list's others
    order = list(dict.fromkeys([c for c, _ in vector] + [c for c, _ in keyword]))
    assert [c.chunk_id for c in pool.candidates] == order
    for c in pool.candidates:
        assert c.vector_score == (dict(vector) | {}).get(c.chunk_id, cosine.get(c.chunk_id))
        assert c.keyword_score == dict(keyword).get(c.chunk_id)
        assert pool.get(c.chunk_id) == c
    expected = reference(pool.candidates, method, w, 60, reads, scale)
    assert fusion.fuse(pool, method, w, 60, reads, scale) == expected
    assert fusion.fuse(list(pool.candidates), method, w, 60, reads, scale) == expected
    scores = fusion.fuse_pool(pool, method, w, 60, reads, scale)
    rounded = {cid: round(sc, 6) for cid, sc in expected.items()}
    assert fusion.ranked_rounded(pool.ids, scores) == fusion.ranked(rounded)


def test_rounding_matches_pythons_round_next_to_every_half() -> None:
    """round6 picks its millionth by a float product; next to a half it asks round itself."""
    halves = (np.arange(0, 200_000) + 0.5) / 1e6
    values = np.concatenate([
        np.random.default_rng(7).random(200_000), halves,
        np.nextafter(halves, 2.0), np.nextafter(halves, -1.0),
        [0.0, 1.0, 1 / 128, 3 / 128, 5e-7, 1e-300],
    ])  # fmt: skip
    assert fusion.round6(values).tolist() == [round(v, 6) for v in values.tolist()]


def test_a_pool_with_a_chunk_twice_keeps_its_last_place_as_a_dict_would() -> None:
    """A search's lists never name a chunk twice; lists that do (a harness's) are still
    read as the union always was: first place for the order, last place for the values."""
    pool = Pool.of([(1, 0.9), (2, 0.8), (1, 0.7)], [(3, 5.0)])
    assert pool.candidates == [Candidate(1, 0.7, None, 3, None), Candidate(2, 0.8, None, 2, None),
                               Candidate(3, None, 5.0, None, 1)]  # fmt: skip
