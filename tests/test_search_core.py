"""Pure search maths: vectors, fusion and tokenisation on small hand-made inputs."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from memcore.core.tokenize import (
    CommonCounts,
    anchor_terms,
    anchored_expression,
    common_tiers,
    estimated_count,
    fts_any,
    query_terms,
    ranked_terms,
    segment,
)
from memcore.core.vectors import VectorIndex, decode_vector, encode_vector, top_k
from memcore.search import fusion
from memcore.search.fusion import Candidate, build_candidates


def test_vector_blob_round_trip_is_little_endian_float32() -> None:
    v = np.array([1.0, -2.5, 3.25], dtype=np.float32)
    blob = encode_vector(v)
    assert blob == np.array([1.0, -2.5, 3.25], dtype="<f4").tobytes()
    assert np.array_equal(decode_vector(blob), v)


def test_top_k_orders_best_first() -> None:
    scores = np.array([0.1, 0.9, 0.5, 0.7], dtype=np.float32)
    assert top_k(scores, 2).tolist() == [1, 3]
    assert top_k(scores, 10).tolist() == [1, 3, 2, 0]


def test_vector_index_adds_replaces_and_removes_incrementally() -> None:
    idx = VectorIndex()
    idx.add([1, 2, 3], np.eye(3, dtype=np.float32))
    assert idx.search(np.array([0, 1, 0], dtype=np.float32), 1) == [(2, pytest.approx(1.0))]
    idx.remove([2])
    assert 2 not in idx and len(idx) == 2
    assert [cid for cid, _ in idx.search(np.array([0, 1, 0.1], dtype=np.float32), 3)] == [3, 1]
    idx.add([1], np.array([[0, 1, 0]], dtype=np.float32))  # replace
    assert idx.search(np.array([0, 1, 0], dtype=np.float32), 1)[0][0] == 1
    assert len(idx) == 2


def test_vector_index_grows_past_its_capacity() -> None:
    rng = np.random.default_rng(0)
    idx = VectorIndex()
    mats = rng.normal(size=(1000, 8)).astype(np.float32)
    for start in range(0, 1000, 100):
        idx.add(list(range(start, start + 100)), mats[start : start + 100])
    assert len(idx) == 1000
    best = idx.search(mats[637], 1)
    assert best[0][0] == 637


def test_vector_index_filters_by_allowed_ids() -> None:
    idx = VectorIndex()
    idx.add([1, 2], np.array([[1, 0], [0.9, 0.1]], dtype=np.float32))
    assert [c for c, _ in idx.search(np.array([1, 0], dtype=np.float32), 2, allowed={2})] == [2]


def test_vector_index_rejects_other_dimensions() -> None:
    idx = VectorIndex()
    idx.add([1], np.ones((1, 4), dtype=np.float32))
    with pytest.raises(ValueError, match="dimensions"):
        idx.add([2], np.ones((1, 5), dtype=np.float32))


def _cpu_of_other_threads() -> float:
    """CPU seconds the threads of this process other than the caller's have used."""
    me, total = threading.get_native_id(), 0
    for task in Path("/proc/self/task").iterdir():
        try:
            if int(task.name) != me:
                fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
                total += int(fields[11]) + int(fields[12])
        except OSError:  # the thread ended meanwhile
            continue
    return total / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads Linux's per-thread CPU")
def test_a_vector_scan_runs_on_the_calling_thread_alone() -> None:
    """A scan as BLAS's gemv would run on one thread per core, whose workers spin for more
    work after each call: under a server's searches they took most of a core of two."""
    rng = np.random.default_rng(0)
    idx = VectorIndex()
    idx.add(range(1, 4001), rng.standard_normal((4000, 384), dtype=np.float32))
    query = rng.standard_normal(384, dtype=np.float32)
    others, own = _cpu_of_other_threads(), time.thread_time()
    # Scan until this thread has spent a set amount of CPU, however fast the CPU is: the check
    # below compares the other threads' CPU with this thread's, never with a fixed figure.
    scans, deadline = 0, time.monotonic() + 60  # a hang guard, not a speed target
    while time.thread_time() - own < 0.3 and time.monotonic() < deadline:
        best = idx.search(query, 10)
        assert idx.similarity(query, [cid for cid, _ in best]) == pytest.approx(dict(best))
        scans += 1
    time.sleep(0.05)  # where spinning workers would go on spinning
    others, own = _cpu_of_other_threads() - others, time.thread_time() - own
    assert own >= 0.3, f"{scans} scans used only {own:.3f} s of this thread's CPU"
    assert others <= 0.2 * own + 0.02  # (the clock ticks every 10 ms)


def _cands() -> list[Candidate]:
    vector = [(1, 0.9), (2, 0.8), (3, 0.1)]
    keyword = [(3, 12.0), (4, 6.0)]
    return build_candidates(vector, keyword, cosine={3: 0.1, 4: 0.05})


def test_candidates_union_keeps_ranks_and_cosines() -> None:
    by_id = {c.chunk_id: c for c in _cands()}
    assert by_id[3] == Candidate(3, 0.1, 12.0, 3, 1)
    assert by_id[4] == Candidate(4, 0.05, 6.0, None, 2)
    assert by_id[1].keyword_rank is None


def test_rrf_sums_weighted_reciprocal_ranks_scaled_to_one() -> None:
    even = fusion.Weights(1.0, 1.0)
    scores = fusion.rrf(_cands(), k=60, weights=even)
    best = 2 / 61  # first in both lists
    assert scores[3] == pytest.approx((1 / 63 + 1 / 61) / best)
    assert scores[1] == pytest.approx((1 / 61) / best)
    assert fusion.ranked(scores)[0][0] == 3
    weighted = fusion.rrf(_cands(), k=60)  # vector 0.7, keyword 0.3
    assert weighted[3] == pytest.approx((0.7 / 63 + 0.3 / 61) / (1 / 61))
    assert all(0 < v <= 1 for v in weighted.values())


def test_weights_change_the_order_as_documented() -> None:
    # chunk 1 leads the vector list only, chunk 4 the keyword list only
    cands = build_candidates([(1, 0.9), (2, 0.5)], [(4, 10.0), (2, 1.0)], cosine={4: 0.1})
    vector_heavy = fusion.Weights(0.9, 0.1)
    keyword_heavy = fusion.Weights(0.1, 0.9)
    for method in ("rrf", "linear", "weighted", "adaptive"):
        by_vector = fusion.fuse(cands, method, vector_heavy)
        by_keyword = fusion.fuse(cands, method, keyword_heavy)
        assert by_vector[1] > by_vector[4], method
        assert by_keyword[4] > by_keyword[1], method


def test_weighted_mixes_cosine_and_scaled_bm25_by_the_weights() -> None:
    scores = fusion.weighted(_cands(), fusion.Weights(1.0, 0.3))
    assert scores[1] == pytest.approx(0.9 / 1.3)
    assert scores[3] == pytest.approx((0.1 + 0.3) / 1.3)
    assert scores[4] == pytest.approx((0.05 + 0.15) / 1.3)


def test_coverage_weighs_each_word_by_its_rarity() -> None:
    from memcore.core.tokenize import coverage, idf

    counts = {"zebra": 2, "common": 90, "nowhere": 0}
    assert coverage(counts, 100, ["zebra", "common", "nowhere"]) == pytest.approx(1.0)
    assert coverage(counts, 100, []) == 0.0 and coverage({}, 100, ["x"]) == 0.0
    whole = idf(100, 2) + idf(100, 90) + idf(100, 0)
    assert coverage(counts, 100, ["zebra", "zebra"]) == pytest.approx(idf(100, 2) / whole)
    assert coverage(counts, 100, ["common"]) < 0.05 < idf(100, 90)  # common: little, not 0
    assert idf(100, 0) > idf(100, 2) > idf(100, 90) > 0


def test_keyword_scores_take_the_scale_of_the_best_hits_share_of_the_query() -> None:
    """A keyword score is BM25 over the best, times the share of the query's IDF the best hit
    holds: the order stays BM25's, and a best hit holding a fifth of the query scores 0.2."""
    cands = _cands()
    assert fusion.keywords(cands) == fusion.fuse(cands, "keyword")
    whole, fifth = fusion.keywords(cands), fusion.fuse(cands, "keyword", keyword_scale=0.2)
    assert [c for c, _ in fusion.ranked(fifth)] == [c for c, _ in fusion.ranked(whole)]
    assert fifth == pytest.approx({c: 0.2 * v for c, v in whole.items()})
    assert max(fifth.values()) == pytest.approx(0.2)
    for method in ("weighted", "adaptive"):  # the keyword part of a mix shrinks likewise
        full, scaled = fusion.fuse(cands, method), fusion.fuse(cands, method, keyword_scale=0.2)
        assert scaled[1] == pytest.approx(full[1])  # chunk 1 is in the vector list only
        assert scaled[3] < full[3]
    for method in ("rrf", "linear", "vector"):  # ranks and spans: relative by nature
        assert fusion.fuse(cands, method, keyword_scale=0.2) == fusion.fuse(cands, method)


@pytest.mark.parametrize("method", ["adaptive", "weighted", "rrf", "linear", "vector", "keyword"])
def test_every_method_scores_within_zero_and_one(method: str) -> None:
    cands = build_candidates(
        [(1, 0.99), (2, -0.3), (3, 0.2)], [(3, 40.0), (5, 0.5)], cosine={5: -0.9}
    )
    scores = fusion.fuse(cands, method)
    assert scores and all(0.0 <= v <= 1.0 for v in scores.values())


def test_recency_boost_halves_every_half_life_and_is_proportional() -> None:
    scores = {1: 0.8, 2: 0.8, 3: 0.8, 4: 0.8, 5: 0.2}
    ages = {1: 0.0, 2: 30.0, 3: 60.0, 5: 0.0, 6: 1.0}  # 4 undated; 6 not a candidate
    out = fusion.recency(scores, ages, weight=0.5, half_life_days=30)
    assert out[1] == pytest.approx(0.8)  # dated today: keeps its score
    assert out[2] == pytest.approx(0.8 * 1.25 / 1.5)
    assert out[3] == pytest.approx(0.8 * 1.125 / 1.5)
    assert out[4] == pytest.approx(0.8 / 1.5)  # undated: no boost
    assert out[5] == pytest.approx(0.2)
    assert set(out) == set(scores)
    assert fusion.recency(scores, {1: -5.0}, 0.5)[1] == pytest.approx(0.8)  # future = today
    assert fusion.recency(scores, ages, weight=0.0) == scores


def test_recency_reorders_near_ties_but_not_clear_winners() -> None:
    scores = {1: 1.0, 2: 0.98, 3: 0.5}
    ages = {1: 365.0, 2: 1.0, 3: 0.0}
    order = [cid for cid, _ in fusion.ranked(fusion.recency(scores, ages, 0.1, 30))]
    assert order == [2, 1, 3]


def test_linear_min_max_normalises_each_list() -> None:
    scores = fusion.linear(_cands(), fusion.Weights(0.7, 0.3))
    assert scores[1] == pytest.approx(0.7)  # best vector, no keyword
    assert scores[3] == pytest.approx(0.7 * (0.1 - 0.05) / 0.85 + 0.3)
    assert scores[4] == pytest.approx(0.0)


def test_segment_splits_chinese_runs_and_keeps_english() -> None:
    seg = segment("用户喜欢喝咖啡 and tea")
    words = seg.split()
    assert {"用户", "喜欢", "咖啡", "and", "tea"} <= set(words)
    assert "咖" in words  # single characters too, for one-character queries


def test_query_terms_drop_stopwords_and_segment_chinese() -> None:
    assert query_terms("What did Caroline research?") == ["caroline", "research"]
    assert query_terms("the") == ["the"]  # nothing else left: keep it
    assert set(query_terms("喜欢喝咖啡")) >= {"喜欢", "咖啡"}
    assert set(query_terms("DX12 渲染引擎")) >= {"dx12", "渲染", "引擎"}


@pytest.mark.parametrize(
    "raw", ['"unbalanced', "AND(", "a* -b", "NEAR(x y)", "col:term", "^start", "+++", "it's"]
)
def test_fts_expression_quotes_every_term(raw: str) -> None:
    terms = query_terms(raw)
    expr = fts_any(terms) if terms else None
    assert expr is None or all(
        part.startswith('"') and part.endswith('"') for part in expr.split(" OR ")
    )


def test_fts_expression_is_none_without_terms() -> None:
    assert query_terms("?!* -- ()") == []


def _lists(vector_cos: list[float], bm25: list[float]) -> list[Candidate]:
    vector = [(i, c) for i, c in enumerate(vector_cos)]
    keyword = [(100 + i, b) for i, b in enumerate(bm25)]
    return build_candidates(vector, keyword, cosine={100 + i: 0.0 for i in range(len(bm25))})


def test_adaptive_trusts_keywords_more_when_vectors_are_flat() -> None:
    informative = _lists([0.8 - 0.02 * i for i in range(20)], [10.0, 5.0])
    flat = _lists([0.50 - 0.001 * i for i in range(20)], [10.0, 5.0])
    assert fusion.vector_spread(informative) == pytest.approx(0.38)
    assert fusion.adaptive_keyword_weight(informative) == pytest.approx(fusion.ADAPTIVE_BASE / 2)
    assert fusion.adaptive_keyword_weight(flat) == pytest.approx(fusion.ADAPTIVE_BASE * 4)
    # with flat vectors the strongest keyword hit wins; with informative ones the best vector
    assert fusion.ranked(fusion.adaptive(flat))[0][0] == 100
    assert fusion.ranked(fusion.adaptive(informative))[0][0] == 0


def test_adaptive_trusts_keywords_when_the_model_cannot_read_the_query() -> None:
    cands = _lists([0.6 - 0.015 * i for i in range(20)], [10.0])
    reads = fusion.adaptive_keyword_weight(cands, model_reads_query=True)
    assert fusion.adaptive_keyword_weight(cands, model_reads_query=False) == pytest.approx(
        4 * reads
    )


def test_unknown_chinese_names_also_match_by_character() -> None:
    terms = query_terms("杨昊现效力于哪里？")
    assert {"杨", "昊", "现"} <= set(terms)  # jieba glued the name to the next character
    assert "效" not in terms  # known words are not split


def test_relevant_memories_block_shortens_long_text_and_cites_lines() -> None:
    from memcore.core.models import Hit
    from memcore.search.context import relevant_memories

    long = "word " * 300
    hits = [
        Hit(1, "memory/a.md", 3, 9, "Fixes > DX12", 0.9, long, date="2024-10-01"),
        Hit(2, "MEMORY.md", 1, 2, "", 0.5, "short"),
    ]
    block = relevant_memories(hits)
    lines = block.splitlines()
    assert lines[0] == "## Relevant Memories"
    assert lines[1].startswith("1. [2024-10-01] Fixes > DX12: word word") and lines[1].endswith(
        " ... (memory/a.md:3-9)"
    )
    assert len(lines[1]) < 700
    assert lines[2] == "2. short (MEMORY.md:1-2)"
    assert relevant_memories([]) == ""


def test_anchor_terms_are_the_rarest_words_until_enough_chunks() -> None:
    counts = {"using": 5001, "recipe": 1800, "beer": 157, "ancash": 8, "zzz": 0}
    assert anchor_terms(counts, want=100, cap=5000) == ["ancash", "beer"]
    assert anchor_terms(counts, want=1000, cap=5000) == ["ancash", "beer", "recipe"]
    # every matching word would be taken, or none is rare enough: rank every match
    assert anchor_terms({"a": 3, "b": 4}, want=100, cap=5000) is None
    assert anchor_terms({"a": 6000, "b": 7000}, want=100, cap=5000) is None
    expr = anchored_expression(["beer", "using"], ["beer"])
    assert expr == '("beer") AND ("beer" OR "using")'


def test_common_words_are_ranked_where_several_of_them_meet() -> None:
    common = {"kind": 8316, "art": 20216, "caroline": 7522, "missing": 0}
    assert common_tiers(common, cap=5000) == [
        '"caroline" AND "kind" AND "art"',
        '("caroline" AND ("kind" OR "art")) OR ("kind" AND ("art"))',
    ]
    assert common_tiers({**common, "ancash": 83}, cap=5000) == []  # a rare word anchors
    assert common_tiers({"art": 5001}, cap=5000) == []
    assert common_tiers({"art": 5001, "kind": 6000}, cap=5000) == ['"art" AND "kind"']


def test_contractions_are_stopwords_with_either_apostrophe() -> None:
    assert query_terms("I\u2019m sure I've seen Tokyo's guide, don't you think?") == [
        "sure",
        "seen",
        "tokyo's",
        "guide",
        "think",
    ]


def test_word_counts_past_the_cap_are_estimated_from_both_ends() -> None:
    # a word everywhere: its first 5001 chunks in ids 1..16530, its last 2500 in 1182866..
    one = estimated_count(5001, 16_530, 2500, 1_182_866, 1, 1_191_238)
    assert 330_000 < one < 380_000  # 356,528 chunks really hold it
    # a word written in one stretch (ids 600k..800k): the ends meet in the middle of it
    local = estimated_count(5001, 733_000, 2500, 760_000, 1, 1_191_238)
    assert 7501 <= local < 8000
    # the two ends overlap: fewer than head + tail, at least head
    assert estimated_count(5001, 900_000, 2500, 850_000, 1, 1_191_238) == 5001


def test_only_the_rarer_words_are_weighed_within_the_budget() -> None:
    counts = {"one": 356_528, "cocktail": 3626, "making": 124_316, "sure": 46_712, "zz": 0}
    assert ranked_terms(counts, 200_000) == ["cocktail", "sure", "making"]
    assert ranked_terms(counts, 10_000) == ["cocktail"]
    assert ranked_terms(counts, 10) == ["cocktail"]  # the rarest always
    assert ranked_terms({"zz": 0}, 10) == []


def test_common_word_estimates_are_kept_until_the_index_grows_or_they_age() -> None:
    now = [0.0]
    kept = CommonCounts(size=2, max_age=60, clock=lambda: now[0])
    kept.put("using", 193_799, span=1_000_000)
    assert kept.get("using", span=1_090_000) == 193_799  # grown 9%: still stands
    assert kept.get("using", span=1_110_000) is None  # grown 11%: count again
    assert kept.get("never", span=1_000_000) is None
    now[0] = 61.0
    assert kept.get("using", span=1_000_000) is None  # older than max_age
    kept.put("a", 1, 10)
    kept.put("b", 2, 10)
    kept.put("c", 3, 10)
    assert kept.get("a", 10) is None and kept.get("c", 10) == 3  # at most `size` words
