"""Keyword ranking over FTS5, run on a snapshot's connection thread (SqliteReader hands
these to it whole): BM25 over the rarer words of a query, the chunks holding the rarest first
(``text_search``), a small scope ranked among itself (``ranked_in_scope``), and which words a
chunk holds (``held_terms``, for keyword_coverage). FTS5 syntax stays in this module."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Sequence
from typing import NamedTuple

from memcore.core.tokenize import (
    ANCHOR_CAP,
    ANCHOR_MAX_TERMS,
    ANCHOR_ROWS,
    RANK_POSTINGS,
    anchor_terms,
    anchored_expression,
    common_tiers,
    estimated_count,
    fts_any,
    ranked_terms,
)

FEW_TO_RANK = 2_000  # a scope of at most this many chunks is ranked on its own


class Counted(NamedTuple):
    """Each word's chunk count (``doc_counts``), the chunk-id span counted over (None when
    every word's count was known) and the common words' estimated counts, to remember."""

    counts: dict[str, int]
    span: int | None
    estimated: dict[str, int]


def _text_search(
    db: sqlite3.Connection,
    terms: list[str],
    k: int,
    where: str,
    params: list[object],
    known: dict[str, int],
) -> tuple[list[tuple[int, float]], Counted | None]:
    """The keyword search of ``terms`` (the top ``k`` chunks by BM25), on the connection's
    thread; also the words' counts (None: it counted nothing), for the caller to remember
    (``known`` holds the ones it did).

    Ranking costs ~3 us a matching chunk, and BM25 first reads every chunk of every word to
    weigh it: a query with common words ("using", "looking") matches most of a big index.
    So: weigh only the rarer words (RANK_POSTINGS), and rank only the chunks holding the
    rarest of them (at least ANCHOR_ROWS chunks), still by BM25 over every weighed word;
    chunks that match only common words score little anyway. When every word is common (a
    big vault: "what kind of art does Caroline make"), the chunks holding all of them, else
    any two, are ranked before every match is. Small indexes (every word rarer than the
    need) are ranked as a whole."""
    if not 1 < len(terms) <= ANCHOR_MAX_TERMS:  # one word, or a pasted page: rank all
        return _ranked(db, fts_any(terms), k, where, params), None
    counted = doc_counts(db, terms, ANCHOR_CAP, known)
    counts = counted.counts
    weighed = ranked_terms(counts, RANK_POSTINGS)
    if not weighed:
        return [], counted
    every = fts_any(weighed)
    narrower: list[str] = []
    anchors = anchor_terms(counts, want=max(ANCHOR_ROWS, 5 * k), cap=ANCHOR_CAP)
    if anchors is not None:
        narrower.append(anchored_expression(weighed, anchors))
    narrower += [
        f"({tier}) AND ({every})"
        for tier in common_tiers({t: counts[t] for t in weighed}, ANCHOR_CAP)
    ]
    for expression in narrower:
        rows = _ranked(db, expression, k, where, params)
        if len(rows) >= k:
            return rows, counted
    return _ranked(db, every, k, where, params), counted


def doc_counts(
    db: sqlite3.Connection, terms: list[str], cap: int, known: dict[str, int]
) -> Counted:
    """How many chunks hold each term: ``known`` ones as given (remembered from an earlier
    query, see CommonCounts); the rest exact up to ``cap``, past it estimated from where the
    term's first cap + 1 and last cap / 2 chunks lie among the chunk ids (at most 1.5 * cap
    chunks read a term, however common it is)."""
    counts = {t: known[t] for t in terms if t in known}
    rest = [t for t in terms if t not in counts]
    if not rest:
        return Counted(counts, None, {})
    head_sql = (
        "SELECT {i}, count(*), max(r) FROM "
        "(SELECT rowid AS r FROM memory_fts WHERE memory_fts MATCH ? LIMIT ?)"
    )
    bounds_sql = (
        "SELECT -1, (SELECT min(id) FROM memory_chunks), (SELECT max(id) FROM memory_chunks)"
    )
    params: list[object] = []
    for term in rest:
        params += [fts_any([term]), cap + 1]
    sql = " UNION ALL ".join([bounds_sql, *(head_sql.format(i=i) for i in range(len(rest)))])
    head = {i: (n or 0, last) for i, n, last in db.execute(sql, params).fetchall()}
    lo, hi = head.pop(-1)
    span = hi - lo + 1 if hi else 0
    counts |= {rest[i]: n for i, (n, _) in head.items()}
    common = [i for i, (n, _) in head.items() if n > cap]
    if not common:
        return Counted(counts, span, {})
    tail_sql = (
        "SELECT {i}, count(*), min(r) FROM (SELECT rowid AS r FROM memory_fts "
        "WHERE memory_fts MATCH ? ORDER BY rowid DESC LIMIT ?)"
    )
    params = []
    for i in common:
        params += [fts_any([rest[i]]), cap // 2]
    sql = " UNION ALL ".join(tail_sql.format(i=i) for i in common)
    estimated: dict[str, int] = {}
    for i, n, first in db.execute(sql, params).fetchall():
        count, last = head[i]
        counts[rest[i]] = estimated[rest[i]] = estimated_count(count, last, n, first, lo, hi)
    return Counted(counts, span, estimated)


def held_terms(
    db: sqlite3.Connection,
    terms: list[str],
    ids: list[int],
    known: dict[str, int],
    counted: Counted | None,
) -> tuple[Counted, dict[int, list[str]]]:
    """Which of ``terms`` each chunk of ``ids`` holds (FTS5 seeks the chunk's row in each
    word's list), with the words' counts: ``counted`` when the search counted them already,
    else as ``doc_counts`` gives them (one word needs none: it is all the query's weight)."""
    if counted is None and len(terms) == 1:
        counted = Counted({terms[0]: 1}, None, {})
    elif counted is None:
        counted = doc_counts(db, terms, ANCHOR_CAP, known)
    return counted, {cid: _words_held(db, "memory_fts", terms, cid) for cid in ids}


def _words_held(db: sqlite3.Connection, table: str, terms: list[str], cid: int) -> list[str]:
    """Which of ``terms`` the chunk ``cid`` holds in a full-text ``table`` (FTS5 seeks its row
    in each word's list)."""
    column = table.rpartition(".")[2]  # the table's hidden column, named like it
    sql = f"SELECT 1 FROM {table} WHERE {column} MATCH ? AND rowid = ?"
    return [t for t in terms if db.execute(sql, (fts_any([t]), cid)).fetchone()]


def text_search_held(
    db: sqlite3.Connection,
    terms: list[str],
    k: int,
    where: str,
    params: list[object],
    known: dict[str, int],
) -> tuple[list[tuple[int, float]], Counted | None, tuple[Counted, dict[int, list[str]]] | None]:
    """``_text_search``, and which words its best hit holds when that is a few seeks (the
    words were counted, or there is one): the searcher asks it of every search
    (keyword_coverage), and this saves that a hand-off of its own."""
    rows, counted = _text_search(db, terms, k, where, params, known)
    held = None
    if rows and (counted is not None or len(terms) == 1):
        held = held_terms(db, terms, [rows[0][0]], known, counted)
    return rows, counted, held


def _ranked(
    db: sqlite3.Connection, match: str, k: int, where: str, params: list[object]
) -> list[tuple[int, float]]:
    if where:
        sql = (
            "SELECT c.id, -memory_fts.rank FROM memory_fts "
            "JOIN memory_chunks c ON c.id = memory_fts.rowid "
            f"WHERE memory_fts MATCH ?{where} ORDER BY memory_fts.rank LIMIT ?"
        )
    else:
        # FTS5's own rank column (BM25) lets it sort without a join: 40% faster at 100k
        sql = "SELECT rowid, -rank FROM memory_fts WHERE memory_fts MATCH ? ORDER BY rank LIMIT ?"
    return [(r[0], float(r[1])) for r in db.execute(sql, [match, *params, k]).fetchall()]


# A scope's chunks are ranked in a table of their own, in the connection's TEMP schema (the
# main database stays read-only to readers; a snapshot's ROLLBACK empties it). Ranking them in
# the vault's own full-text index took a MATCH per chunk, and each one read every word's whole
# list again to weigh it: 46 ms a search for a user's 100 chunks among 1M, p95 226 ms.
_SCOPE_TABLE = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.scope_fts USING fts5 "
    "(fts_text, tokenize = 'porter unicode61 remove_diacritics 2')"
)
_SCOPE_FILL = (
    "INSERT INTO temp.scope_fts (rowid, fts_text) SELECT id, fts_text FROM memory_chunks "
    "WHERE id IN (SELECT value FROM json_each(?))"
)


def ranked_in_scope(
    db: sqlite3.Connection, terms: list[str], k: int, ids: Sequence[int]
) -> tuple[list[tuple[int, float]], tuple[Counted, dict[int, list[str]]] | None]:
    """The top ``k`` of a scope's chunks (``ids``) by BM25 among themselves: each word
    weighed by its rarity in the scope (as on PostgreSQL), which is what tells a scope's
    chunks apart. Also which words the best one holds, and each word's count in the scope,
    for ``keyword_coverage`` to weigh them as the ranking did (in this same hand-off)."""
    db.execute(_SCOPE_TABLE)
    db.execute("DELETE FROM temp.scope_fts")
    db.execute(_SCOPE_FILL, (json.dumps(list(ids)),))
    rows = db.execute(
        "SELECT rowid, -rank FROM temp.scope_fts WHERE scope_fts MATCH ? ORDER BY rank, rowid "
        "LIMIT ?",
        (fts_any(terms), k),
    ).fetchall()
    if not rows:
        return [], None
    top, terms = rows[0][0], terms[:ANCHOR_MAX_TERMS]
    held = {top: _words_held(db, "temp.scope_fts", terms, top)}
    count = "SELECT count(*) FROM temp.scope_fts WHERE scope_fts MATCH ?"
    counts = {t: db.execute(count, (fts_any([t]),)).fetchone()[0] for t in terms}
    return [(r[0], float(r[1])) for r in rows], (Counted(counts, len(ids), {}), held)


# The index's words, in order (a view of the full-text index: nothing is stored), in the
# connection's TEMP schema. A range of them is a seek: whether any is Chinese takes ~1 ms.
_TERMS_TABLE = (
    "CREATE VIRTUAL TABLE IF NOT EXISTS temp.memory_terms USING fts5vocab(main, memory_fts, row)"
)
_CHINESE = ("\u3400", "\ua000"), ("\uf900", "\ufb00")  # tokenize._CJK_RUN's ranges


def holds_chinese(db: sqlite3.Connection) -> bool:
    db.execute(_TERMS_TABLE)
    sql = "SELECT 1 FROM temp.memory_terms WHERE term >= ? AND term < ? LIMIT 1"
    return any(db.execute(sql, span).fetchone() for span in _CHINESE)
