"""Full-text tokenisation: CJK word segmentation (jieba) and safe FTS5 MATCH queries. Pure."""

from __future__ import annotations

import itertools
import logging
import re
import threading
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

# CJK Unified Ideographs (+ Extension A, compatibility) - the scripts FTS5 cannot split itself.
_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_WORD = re.compile(r"[^\W_]+(?:['\u2019][^\W_]+)?", re.UNICODE)
_jieba_lock = threading.Lock()

STOPWORDS = frozenset(
    """a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for from
    further had has have having he her here hers herself him himself his how i if in into is it
    its itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself
    yourselves""".split()  # noqa: SIM905 - a word list reads better as prose
)


def has_words(query: str) -> bool:
    """True when the query holds a letter or digit in any script."""
    return any(ch.isalnum() for ch in query)


def has_cjk(text: str) -> bool:
    return _CJK_RUN.search(text) is not None


@lru_cache(maxsize=1)
def _jieba() -> Any:
    """Import and initialise jieba once (about a second); only called when CJK text appears."""
    with _jieba_lock:
        import jieba

        jieba.setLogLevel(logging.WARNING)
        jieba.initialize()
        return jieba


def warm_segmenter() -> None:
    """Load jieba now (blocking, about a second) instead of on the first Chinese text."""
    _jieba()


def _cjk_words(run: str, for_index: bool) -> Iterator[str]:
    jb = _jieba()
    words = list(jb.cut_for_search(run, HMM=True))
    yield from words
    if for_index:
        # single characters too, so one-character queries find longer words that contain them
        seen = {w for w in words if len(w) == 1}
        yield from (ch for ch in run if ch not in seen)
        return
    # A word jieba does not know (a name, often glued to the next character: "杨昊现") may be
    # cut differently in the text; its characters still match the indexed single characters.
    for word in words:
        if len(word) > 1 and word not in jb.dt.FREQ:
            yield from word


def segment(text: str, for_index: bool = True) -> str:
    """Text with every CJK run replaced by space-separated words (other text unchanged)."""
    if not has_cjk(text):
        return text
    out, pos = [], 0
    for m in _CJK_RUN.finditer(text):
        out.append(text[pos : m.start()])
        out.append(" " + " ".join(_cjk_words(m.group(), for_index)) + " ")
        pos = m.end()
    out.append(text[pos:])
    return "".join(out)


def query_terms(text: str) -> list[str]:
    """Distinct search terms of a user query, stopwords dropped unless nothing else is left."""
    terms: list[str] = []
    pos = 0
    for m in _CJK_RUN.finditer(text):
        terms.extend(w.lower() for w in _WORD.findall(text[pos : m.start()]))
        terms.extend(w for w in _cjk_words(m.group(), for_index=False) if w.strip())
        pos = m.end()
    terms.extend(w.lower() for w in _WORD.findall(text[pos:]))
    unique = list(dict.fromkeys(terms))
    content = [t for t in unique if t not in STOPWORDS]
    return content or unique


def fts_any(terms: list[str]) -> str:
    """Any of these terms, each a quoted string (nothing in them is syntax)."""
    return " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)


# Keyword search at scale: count each query word's chunks up to ANCHOR_CAP, then rank only the
# chunks of the rarest words (at least ANCHOR_ROWS of them), still scored over every word.
ANCHOR_CAP = 5000
ANCHOR_ROWS = 2000
ANCHOR_MAX_TERMS = 256  # counted in one statement: two SQL parameters a term


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


def common_tiers(counts: dict[str, int], cap: int, max_pairs: int = 8) -> list[list[list[str]]]:
    """When every word found is common (over ``cap`` chunks), the chunks worth ranking are
    those holding several of them: first all the words, then any two (for up to ``max_pairs``
    words). Each tier is a list of conjunctions (words that must all be there); [] when some
    word is rare enough to anchor on, or there are fewer than two words."""
    found = [t for t, n in counts.items() if n > 0]
    if len(found) < 2 or any(counts[t] <= cap for t in found):
        return []
    tiers = [[found]]
    if 2 < len(found) <= max_pairs:
        tiers.append([list(pair) for pair in itertools.combinations(found, 2)])
    return tiers


def fts_conjunctions(groups: list[list[str]]) -> str:
    """Chunks holding every word of at least one group (FTS5 syntax, every word quoted)."""
    return " OR ".join("(" + " AND ".join(fts_any([t]) for t in g) + ")" for g in groups)


def anchored_expression(terms: list[str], anchors: list[str]) -> str:
    """Chunks holding an anchor term, ranked by BM25 over every term of the query."""
    return f"({fts_any(anchors)}) AND ({fts_any(terms)})"
