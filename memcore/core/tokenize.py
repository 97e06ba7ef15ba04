"""Full-text tokenisation: CJK word segmentation (jieba) and safe FTS5 MATCH queries. Pure."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

from memcore.core import segmenter
from memcore.core.lru import LRU
from memcore.core.own_words import NO_WORDS, Words

# CJK Unified Ideographs (+ Extension A, compatibility) - the scripts FTS5 cannot split itself.
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)?", re.UNICODE)

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves""".split()  # noqa: SIM905 - a word list reads better as prose
) | frozenset(
    # Contractions: the full-text tokenizer splits "i'm" into the phrase "i m", which matches
    # nothing a reader would call a keyword and costs a scan of the commonest word there is.
    """i'm i've i'd i'll you're you've you'd you'll he's he'd he'll she's she'd she'll it's
    it'd it'll we're we've we'd we'll they're they've they'd they'll that's that'll there's
    here's what's who's where's when's why's how's let's isn't aren't wasn't weren't hasn't
    haven't hadn't doesn't don't didn't won't wouldn't shan't shouldn't can't cannot couldn't
    mustn't mightn't needn't""".split()  # noqa: SIM905
)


def has_words(query: str) -> bool:
    """True when the query holds a letter or digit in any script."""
    return any(ch.isalnum() for ch in query)


def has_cjk(text: str) -> bool:
    return _CJK_RUN.search(text) is not None


def cuts_quickly(query: str) -> bool:
    """Whether a query's terms are quick to cut where the caller is: no Chinese, or jieba's
    dictionary already loaded (serve and watch load it at start for an index with Chinese)
    and a short query. Else it belongs in a worker thread; for a short query, that hop costs
    more under load than cutting it."""
    return not has_cjk(query) or (segmenter.loaded() and len(query) <= 256)


def warm_segmenter() -> None:
    """Load jieba now (blocking, about a second) instead of on the first Chinese text."""
    segmenter.full()


def _tokenizer(run: str, for_index: bool, own: Words) -> Any:
    # a query is cut with only the dictionary entries it can touch when the whole dictionary
    # is not loaded (a one-shot search); the text to index, always with the whole of it
    if for_index or segmenter.loaded():
        jb = segmenter.full().dt
        return segmenter.layered(jb, own.entries) if own.entries else jb
    jb = segmenter.for_text(run)
    return segmenter.layered(jb, own.entries, run) if own.entries else jb


def _cjk_words(run: str, for_index: bool, own: Words = NO_WORDS) -> Iterator[str]:
    jb = _tokenizer(run, for_index, own)
    words = [w for w in jb.cut_for_search(run, HMM=True) if w not in own.stop]
    yield from words
    if for_index:
        # single characters too, so one-character queries find longer words that contain them
        seen = {w for w in words if len(w) == 1}
        yield from (ch for ch in run if ch not in seen and ch not in own.stop)
        return
    # A word jieba does not know (a name, often glued to the next character: "杨昊现") may be
    # cut differently in the text; its characters still match the indexed single characters.
    for word in words:
        if len(word) > 1 and word not in jb.FREQ:
            yield from word


def segment(text: str, for_index: bool = True, own: Words = NO_WORDS) -> str:
    """Text with every CJK run replaced by space-separated words (other text unchanged), and
    the vault's own stop words (``own``) left out."""
    if own.stop:
        text = _WORD.sub(lambda m: "" if m.group().lower() in own.stop else m.group(), text)
    if not has_cjk(text):
        return text
    out, pos = [], 0
    for m in _CJK_RUN.finditer(text):
        out.append(text[pos : m.start()])
        out.append(" " + " ".join(_cjk_words(m.group(), for_index, own)) + " ")
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def fts_text(heading: str, text: str, own: Words = NO_WORDS) -> str:
    """What full text sees of a chunk: heading and body, Chinese segmented into words, the
    vault's own words applied (core/own_words.py)."""
    return segment(f"{heading}\n{text}", own=own)


def fts_texts(rows: Iterable[Sequence[Any]], own: Words) -> list[str]:
    """``fts_text`` of (id, heading, text, ...) rows."""
    return [fts_text(r[1], r[2], own) for r in rows]


def query_terms(text: str, own: Words = NO_WORDS) -> list[str]:
    """Distinct search terms of a user query, stopwords dropped unless nothing else is left
    (the vault's own stop words always: the index holds none of them)."""
    terms: list[str] = []
    pos = 0
    for m in _CJK_RUN.finditer(text):
        terms.extend(w.lower() for w in _WORD.findall(text[pos : m.start()]))
        terms.extend(w for w in _cjk_words(m.group(), False, own) if w.strip())
        pos = m.end()
    terms.extend(w.lower() for w in _WORD.findall(text[pos:]))
    unique = [t for t in dict.fromkeys(terms) if t not in own.stop]
    content = [t for t in unique if t.replace("\u2019", "'") not in STOPWORDS]
    return content or unique


def fts_any(terms: list[str]) -> str:
    """Any of these terms, each a quoted string (nothing in them is syntax)."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


# Keyword search at scale: count each query word's chunks up to ANCHOR_CAP, then rank only the
# chunks of the rarest words (at least ANCHOR_ROWS of them), still scored over every word.
# 1000 rows find a gold file in the top 10 as often as 2000 or ranking every match: hit@10 of
# 800 real questions at 119k chunks 0.798 (2000: 0.796; all: 0.807 on 400), at 1.19M 0.634
# (2000: 0.634), at half the ranking work.
ANCHOR_CAP = 5000
ANCHOR_ROWS = 1000
ANCHOR_MAX_TERMS = 256  # counted in one statement: two SQL parameters a term
# BM25 weighs each word by reading every chunk that holds it (~50 ns a chunk in FTS5): the
# words of one query may hold this many chunks between them; the commonest go unweighed.
# Gold-file hit@10 at 1.19M chunks over 800 questions: 0.632 at 150k, 0.634 at 250k (keyword
# p95 in isolation 25 vs 30 ms); smaller indexes rarely reach it.
RANK_POSTINGS = 150_000


def idf(total: int, count: int) -> float:
    """BM25's inverse document frequency of a word found in ``count`` of ``total`` chunks
    (Lucene's form: above 0 even for a word in every chunk)."""
    return math.log((total - count + 0.5) / (count + 0.5) + 1.0)


def coverage(counts: Mapping[str, int], total: int, matched: Iterable[str]) -> float:
    """The share of a query's weight that a chunk holding the ``matched`` words holds: the
    sum of their IDFs over that of every query word (``counts``: each word's chunk count,
    0 for a word found nowhere, which weighs most). 1.0 for a chunk with every word, near 0
    for one with only the commonest: what puts keyword scores on an absolute scale (fusion)."""
    weights = {t: idf(max(total, n), n) for t, n in counts.items()}
    whole = sum(weights.values())
    return sum(weights.get(t, 0.0) for t in set(matched)) / whole if whole > 0 else 0.0


def estimated_count(head: int, head_last: int, tail: int, tail_first: int, lo: int, hi: int) -> int:
    """How many chunks hold a word, from its first ``head`` chunks (ids lo..head_last) and its
    last ``tail`` (tail_first..hi): the ids between are taken to be as dense as both ends.

    Sampling both ends keeps a word written in one stretch of the vault (one project's notes)
    from passing for a word found everywhere. When the ends overlap there are fewer than
    head + tail, and at least head."""
    if tail_first <= head_last:
        return head
    sampled = (head_last - lo + 1) + (hi - tail_first + 1)
    gap = tail_first - head_last - 1
    return head + tail + round((head + tail) * gap / max(sampled, 1))


class CommonCounts:
    """Estimated chunk counts of common words, kept between queries. Estimating one reads 1.5
    cap chunks, and the same common words ("previous", "remind") come back query after query.
    An estimate stands while the index spans within 10% of the chunk ids it spanned then, and
    for at most ``max_age`` seconds. Counts under the cap are never kept: they are exact, and a
    word's first chunks must be found the moment they are written."""

    def __init__(
        self,
        size: int = 4096,
        max_age: float = 600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._items: LRU[str, tuple[int, int, float]] = LRU(size)
        self._max_age = max_age
        self._clock = clock
        self.span = 0  # chunk ids the index spanned when last counted (0: not yet)

    def get(self, term: str, span: int) -> int | None:
        found = self._items.get(term)
        if found is None:
            return None
        count, then, at = found
        if not span or abs(span - then) > then / 10 or self._clock() - at > self._max_age:
            return None
        return count

    def put(self, term: str, count: int, span: int) -> None:
        self._items.put(term, (count, span, self._clock()))


def ranked_terms(counts: dict[str, int], budget: int) -> list[str]:
    """The words BM25 ranks by: rarest first while their chunks add up to at most ``budget``,
    and always the rarest. Words past it are the commonest of the query, with the lowest IDF
    ("one" in a third of the chunks); weighing them would cost more than the rest of the query
    and move few results. Words found nowhere are left out (they add nothing)."""
    found = sorted((t for t, n in counts.items() if n > 0), key=lambda t: counts[t])
    kept: list[str] = []
    total = 0
    for term in found:
        total += counts[term]
        if kept and total > budget:
            break
        kept.append(term)
    return kept


def anchor_terms(counts: dict[str, int], want: int, cap: int) -> list[str] | None:
    """The rarest terms whose chunks will be ranked, or None to rank every match.

    ``counts`` holds each term's chunk count, capped (a count above ``cap`` means "common").
    Rarest first, terms are taken until their chunks add up to ``want``; common terms are
    never anchors. None when every matching term would be taken anyway (nothing to save) or
    no term is rare enough (then every match is ranked, as before)."""
    found = sorted((t for t, n in counts.items() if n > 0), key=lambda t: counts[t])
    anchors: list[str] = []
    total = 0
    for term in found:
        if counts[term] > cap or total >= want:
            break
        anchors.append(term)
        total += counts[term]
    if not anchors or len(anchors) == len(found):
        return None
    return anchors


def common_tiers(counts: dict[str, int], cap: int) -> list[str]:
    """When every word found is common (over ``cap`` chunks), the chunks worth ranking are
    those holding several of them. Two FTS5 expressions, tried in turn: all the words; then
    any two of them of which one is among the two rarest (every pair is twice the work, for
    pairs of the commonest words, which score least). [] when some word is rare enough to
    anchor on, or there are fewer than two words."""
    found = sorted((t for t, n in counts.items() if n > 0), key=lambda t: counts[t])
    if len(found) < 2 or counts[found[0]] <= cap:
        return []
    quoted = [fts_any([t]) for t in found]
    tiers = [" AND ".join(quoted)]
    if len(found) > 2:
        first, second = quoted[:2]
        tiers.append(
            f"({first} AND ({fts_any(found[1:])})) OR ({second} AND ({fts_any(found[2:])}))"
        )
    return tiers


def anchored_expression(terms: list[str], anchors: list[str]) -> str:
    """Chunks holding an anchor term, ranked by BM25 over every term of the query."""
    return f"({fts_any(anchors)}) AND ({fts_any(terms)})"
