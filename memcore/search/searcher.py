"""Searcher: hybrid search over one read snapshot (vector and keyword lists, fusion, recency).

The query is embedded before the snapshot opens, so no snapshot waits on an embedder; the
cache is asked in that snapshot, so a miss costs no second one. The pipeline stages
(``candidates``, ``fused``, ``boost_recent``, ``hits``) are public for the retrieval harness,
which scores several fusion methods on the same candidates.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
import os
import time
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from memcore.core.errors import EmbedderError, InputError
from memcore.core.lru import LRU
from memcore.core.models import Hit, MemoryRecord, SearchFilters, SearchMode, SearchResult
from memcore.core.moments import utc_today
from memcore.core.settings import Settings
from memcore.core.tokenize import has_cjk, has_words, warm_segmenter
from memcore.embedders.base import EmbeddingRunner
from memcore.search import fusion, strength
from memcore.search.recall import Recall, note_key
from memcore.storage.base import IndexReader, Store, Vector, both, settled

if TYPE_CHECKING:
    from memcore.core.metrics import Metrics

log = logging.getLogger(__name__)
MAX_LIMIT = 1000  # results one search returns at most, on every front
KEYWORD_SCALED = ("keyword", "weighted", "adaptive")  # the methods scoring BM25 itself


@dataclass(frozen=True, slots=True)
class Found:
    """What the retrievers found for a query, before fusion."""

    pool: fusion.Pool  # both lists' candidates
    has_vectors: bool  # the vector list is not empty (fuse both lists, else keywords only)
    vectors_available: bool  # the query was embedded and the index holds vectors of its model
    warnings: tuple[str, ...]
    query_has_cjk: bool

    @property
    def candidates(self) -> list[fusion.Candidate]:
        """The pool as Candidate values (made when first asked for: a search needs none)."""
        return self.pool.candidates


class Searcher:
    """Answers searches; safe to call from many tasks at once (each gets its own snapshot)."""

    metrics: Metrics | None = None  # the service's (GET /metrics), once it has one

    def __init__(
        self,
        settings: Settings,
        store: Store,
        embedder: EmbeddingRunner,
        recall: Recall | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.recall = recall or Recall(settings.vault)
        size = settings.search.cache_size
        # a question's answer, and the index state it was found at (_state)
        self.cache: LRU[tuple[object, ...], tuple[tuple[object, ...], SearchResult]] | None = (
            LRU(size) if size else None
        )

    async def search(
        self,
        query: str,
        limit: int | None = None,
        filters: SearchFilters | None = None,
        fusion_name: str | None = None,
        min_score: float | None = None,
        query_vector: Vector | None = None,
        as_of: dt.date | None = None,
    ) -> SearchResult:
        """Hybrid search. Never raises for odd query text; degrades to keyword-only (and says
        so in ``warnings``) when the embedder is unreachable or vectors are still pending.
        Raises StorageError only when the index itself cannot be read.

        ``query_vector`` skips embedding the query (it must come from the same model; with
        no query text the search is by the vector alone);
        ``as_of`` is the day the recency boost counts ages from (default today).

        A text query is answered from the L1 cache when it was asked of the same index state
        (any write, here or in another process, moves the state on): the state is read in the
        snapshot the search would use, so a miss searches on in it."""
        s = self.settings.search
        limit = limit or s.limit
        if not 1 <= limit <= MAX_LIMIT:
            raise InputError(f"limit must be 1-{MAX_LIMIT}, got {limit}")
        method = fusion_name or s.fusion
        floor = s.min_score if min_score is None else min_score
        if not 0 <= floor <= 1:  # also NaN
            raise InputError(f"min_score (threshold) must be between 0 and 1, got {floor}")
        started = time.perf_counter()
        filters = vault_relative(filters or SearchFilters(), self.settings.vault)
        warnings: list[str] = []
        cache = self.cache if query_vector is None else None  # a caller's vector: not cached
        if not has_words(query) and query_vector is not None:
            method = "vector"  # a precomputed vector alone: nothing for keywords to match
        elif not has_words(query) and filters.tag:
            return await self.listing(filters, limit)
        elif not has_words(query):
            # "?" or "..." would only match noise (every chunk is somewhat near it)
            warnings.append("the query has no words to search for")
            empty: SearchMode = "keyword" if method == "keyword" else "hybrid"
            return SearchResult(query, (), empty, tuple(warnings), {})
        query_vector, embedding = await self._query_vector(query, method, query_vector, warnings)
        key = (query, limit, repr(filters), fusion_name, min_score, as_of)
        asked = cache is not None and cache.peek(key) is not None  # at some index state
        try:
            async with self.store.snapshot() as reader:
                # A query not asked before has the keyword list of its first pool asked for
                # first: the snapshot starts with that query (one hand-off for both). One whose
                # answer the cache holds starts the snapshot alone and is asked of the cache
                # once its state is known: a hit must not leave a keyword query running on the
                # connection, which the next search on it would wait behind (~1 ms).
                keywords = (
                    None if asked else self._keywords(reader, query, method, filters, query_vector)
                )
                await asyncio.sleep(0)  # let it hand its query to the database (as ``both``)
                try:
                    state = self._state(await reader.begun())
                    fresh = None if cache is None else cache.get(key, lambda kept: kept[0] == state)
                    if fresh is not None:
                        self._observe_search(fresh[1], "hit", started)
                        return fresh[1]
                    # asked before, at another state: the keyword list goes beside the embedding
                    keywords = keywords or self._keywords(
                        reader, query, method, filters, query_vector
                    )
                    if embedding is not None:
                        if not embedding.done():  # a first search loads the vectors meanwhile
                            await reader.vectors_ready(self.embedder.model_id)
                        query_vector = await embedding
                    result = await self._search_in(
                        reader, query, limit, filters, method, floor, query_vector, as_of,
                        warnings, keywords,
                    )  # fmt: skip
                finally:
                    if keywords is not None:
                        await settled(keywords)
        finally:
            if embedding is not None:  # a hit, or an error: not waited for
                await settled(embedding)
        log.debug(
            "search %r: %d hits (%s) in %.1f ms",
            query, len(result.hits), result.mode, (time.perf_counter() - started) * 1000,
        )  # fmt: skip
        # kept only when not degraded (embedder down, vectors pending); at one state a query
        if cache is not None and not result.warnings:
            cache.put(key, (state, result))
        self._observe_search(result, "off" if cache is None else "miss", started)
        return result

    async def _query_vector(
        self, query: str, method: str, given: Vector | None, warnings: list[str]
    ) -> tuple[Vector | None, asyncio.Future[Vector | None] | None]:
        """The query's vector (a caller's, checked), or the task making it. Made before the
        snapshot opens, so that no snapshot waits on a remote embedder (a repeated query's
        vector is remembered by the runner: a cached answer costs no model run). A model in
        this process answers in milliseconds: the keyword query runs meanwhile, where the
        index's keyword query does not take the vector."""
        if given is not None:
            expected = await self.embedder.dimension()
            if expected is not None and len(given) != expected:
                raise InputError(
                    f"query_vector has {len(given)} dimensions; "
                    f"{self.embedder.model_id} makes vectors of {expected}"
                )
            return unit_vector(given), None
        if method == "keyword" or not query.strip():
            return None, None
        if self.embedder.in_process and not self.store.keywords_take_vector:
            return None, asyncio.ensure_future(self._timed_embedding(query, warnings))
        return await self._timed_embedding(query, warnings), None

    async def _timed_embedding(self, query: str, warnings: list[str]) -> Vector | None:
        started = time.perf_counter()
        try:
            return await self.embed_query(query, warnings)
        finally:
            self._observe("query_embedding", started)

    def _with(self, query_vector: Vector | None) -> tuple[Vector, str] | None:
        return None if query_vector is None else (query_vector, self.embedder.model_id)

    def _observe(self, part: str, started: float) -> None:
        if self.metrics is not None:
            self.metrics.search_part_seconds.labels(part).observe(time.perf_counter() - started)

    def _observe_search(self, result: SearchResult, cache: str, started: float) -> None:
        if self.metrics is not None:
            path = "fused" if result.mode == "hybrid" else result.mode
            took = time.perf_counter() - started
            self.metrics.search_seconds.labels(path, cache).observe(took)

    def _keywords(
        self,
        reader: IndexReader,
        query: str,
        method: str,
        filters: SearchFilters,
        query_vector: Vector | None,
    ) -> asyncio.Future[list[tuple[int, float]]] | None:
        """The keyword list of the first pool, asked for now (None: a vector-only search)."""
        if method == "vector":
            return None
        ranked = reader.search_text(
            query, self.settings.search.candidates, filters, self._with(query_vector)
        )
        return asyncio.ensure_future(self._timed_keywords(ranked))

    async def _timed_keywords(
        self, ranked: Awaitable[list[tuple[int, float]]]
    ) -> list[tuple[int, float]]:
        started = time.perf_counter()
        try:
            return await ranked
        finally:
            self._observe("keyword", started)

    def _state(self, generation: int | None) -> tuple[object, ...]:
        """What a cached answer depends on besides the query: the index generation, the
        day (recency and strength age with it) and the review log when strength ranks."""
        reviews = self.recall.log.size() if self.settings.strength.weight > 0 else 0
        # expiry dates are UTC days
        return (generation, dt.date.today(), reviews, self.embedder.model_id, utc_today())

    async def _search_in(
        self,
        reader: IndexReader,
        query: str,
        limit: int,
        filters: SearchFilters,
        method: str,
        min_score: float,
        query_vector: Vector | None,
        as_of: dt.date | None,
        warnings: list[str],
        keywords: Awaitable[list[tuple[int, float]]] | None = None,
    ) -> SearchResult:
        """The search itself, in one snapshot, the query already embedded (or not);
        ``keywords``, the keyword list of the first pool when it was asked for already."""
        s = self.settings.search
        try:
            found, ranking = await self.rank(
                reader, query, s.candidates, filters, query_vector, method, as_of, keywords
            )
            if limit > s.candidates and len(ranking) >= s.candidates:
                # past the pool: the first search.candidates results stay as they are
                # and the rest continue from a pool as deep as the deepest limit, so
                # every limit's results are the first ones of any longer search
                more, deeper = await self.rank(
                    reader, query, MAX_LIMIT, filters, query_vector, method, as_of
                )
                ranking = continued(ranking[: s.candidates], deeper)
                found = dataclasses.replace(  # a hit shows the parts it was ranked by
                    found, pool=fusion.Pool.of_candidates([*more.candidates, *found.candidates])
                )
        except ValueError as exc:  # a caller's vector of another size than the index's
            raise InputError(
                f"query_vector has {len(query_vector or ())} dimensions; the index holds "
                f"vectors of {self.embedder.model_id} of another dimension"
            ) from exc
        passing = [(cid, sc) for cid, sc in ranking if sc >= min_score]
        hits: list[Hit] = []
        memories: dict[int, MemoryRecord] = {}
        at = 0
        while len(hits) < limit and at < len(passing):  # past expired memories, the next ones
            top = passing[at : at + limit - len(hits)]
            at += len(top)
            hits += await self.hits(reader, found.pool, top, filters, memories)
        mode: SearchMode = (
            "keyword"
            if not found.vectors_available
            else ("vector" if method == "vector" else "hybrid")
        )
        return SearchResult(query, tuple(hits), mode, (*warnings, *found.warnings), memories)

    async def listing(self, filters: SearchFilters, limit: int) -> SearchResult:
        """What carries the filters' tag (with no query): newest first, each scored 1 (every
        threshold, at most 1, lets it through)."""
        async with self.store.snapshot() as reader:
            hits: list[Hit] = []
            memories: dict[int, MemoryRecord] = {}
            offset = 0
            while len(hits) < limit:  # more only when expired memories were left out
                want = limit - len(hits)
                ids = await reader.newest_matching(filters, want, offset)
                hits += await self.hits(reader, [], [(cid, 1.0) for cid in ids], filters, memories)
                offset += len(ids)
                if len(ids) < want:
                    break
        return SearchResult("", tuple(hits), "keyword", (), memories)

    async def rank(
        self,
        reader: IndexReader,
        query: str,
        pool: int,
        filters: SearchFilters,
        query_vector: Vector | None,
        method: str,
        as_of: dt.date | None,
        keywords: Awaitable[list[tuple[int, float]]] | None = None,
    ) -> tuple[Found, list[tuple[int, float]]]:
        """Every candidate of a pool (the top ``pool`` of each list), fused, boosted and
        weighed, best first. Scores are rounded to 6 digits: the score every front shows."""
        found = await self.candidates(
            reader,
            query,
            pool,
            filters,
            query_vector if method != "keyword" else None,
            use_keywords=method != "vector",
            keywords=keywords,
        )
        fused = await self.fused_pool(reader, query, found, method)
        if self.settings.search.recency_weight <= 0 and self.settings.strength.weight <= 0:
            return found, fusion.ranked_rounded(found.pool.ids, fused)
        scores = fusion.scored(found.pool, fused)
        scores = await self.boost_recent(reader, scores, as_of)
        scores = await self.weigh_strength(reader, scores, as_of)
        n = len(scores)
        ids = np.fromiter(scores, dtype=np.int64, count=n)
        return found, fusion.ranked_rounded(ids, np.fromiter(scores.values(), np.float64, n))

    async def embed_query(self, query: str, warnings: list[str]) -> Vector | None:
        """The query's vector, or None (with a warning) when the embedder is unavailable."""
        if self.embedder.down:
            warnings.append(
                f"embedder unavailable, keyword results only: {self.embedder.down_reason} "
                "(retrying in the background)"
            )
            return None
        try:
            vecs = await self.embedder.embed_queries([query])
        except EmbedderError as exc:
            warnings.append(f"embedder unavailable, keyword results only: {exc}")
            self.embedder.mark_down(str(exc))
            return None
        vec: Vector = vecs[0]
        return vec

    async def candidates(
        self,
        reader: IndexReader,
        query: str,
        n: int,
        filters: SearchFilters,
        query_vector: Vector | None,
        use_keywords: bool = True,
        keywords: Awaitable[list[tuple[int, float]]] | None = None,
    ) -> Found:
        """The top ``n`` of each retriever (cosine and BM25) in one snapshot, before fusion
        (``keywords``: the keyword list, when it was asked for already)."""
        warnings: list[str] = []
        model = self.embedder.model_id
        cosine: dict[int, float] = {}
        available = False
        if keywords is None:
            keywords = (
                reader.search_text(query, n, filters, self._with(query_vector))
                if use_keywords
                else _no_hits()
            )
        # the keyword query runs in the database's thread while the vectors are scored
        keyword, vector = await both(
            keywords,
            (
                reader.search_vectors(query_vector, model, n, filters)
                if query_vector is not None
                else _no_hits()
            ),
        )
        if query_vector is not None:
            available = bool(vector) or await reader.has_vectors(model)
            # the cosine of the keyword hits the vector list does not hold (a database reads
            # each row it is asked for: the others' scores are known)
            seen = {cid for cid, _ in vector}
            unseen = [cid for cid, _ in keyword if cid not in seen]
            if vector and unseen:
                cosine = await reader.vector_similarity(query_vector, model, unseen)
            elif not available:
                warnings.append("no vectors indexed yet; keyword results only")
            pending = await reader.count_pending(model)
            if pending:
                warnings.append(f"{pending} chunks are waiting for vectors")
        pool = fusion.Pool.of(vector, keyword, cosine)
        return Found(pool, bool(vector), available, tuple(warnings), has_cjk(query))

    async def fused(
        self, reader: IndexReader, query: str, found: Found, method: str
    ) -> dict[int, float]:
        """The candidates fused by ``method`` (keywords alone when there are no vectors to
        fuse), keyword scores on the absolute scale of ``fusion``: scaled by the share of the
        query's IDF the best keyword hit holds (``IndexReader.keyword_coverage``)."""
        return fusion.scored(found.pool, await self.fused_pool(reader, query, found, method))

    async def fused_pool(
        self, reader: IndexReader, query: str, found: Found, method: str
    ) -> fusion.Scores:
        """``fused`` as one score per pool candidate (NaN: left out by the method)."""
        fused = method if found.has_vectors else "keyword"
        scale = 1.0
        top = found.pool.top_keyword()
        if fused in KEYWORD_SCALED and top is not None:
            scale = (await reader.keyword_coverage(query, [top])).get(top, 0.0)
        s = self.settings.search
        reads = self.embedder.reads_cjk or not found.query_has_cjk
        weights = fusion.Weights(s.vector_weight, s.keyword_weight)
        return fusion.fuse_pool(found.pool, fused, weights, s.rrf_k, reads, scale)

    async def boost_recent(
        self, reader: IndexReader, scores: dict[int, float], as_of: dt.date | None = None
    ) -> dict[int, float]:
        """Apply the configured recency boost (``search.recency_weight``; 0 = unchanged)."""
        s = self.settings.search
        if s.recency_weight <= 0 or not scores:
            return scores
        ref = as_of or dt.date.today()
        ages: dict[int, float] = {}
        for cid, row in (await reader.chunk_rows(list(scores))).items():
            try:
                ages[cid] = (ref - dt.date.fromisoformat((row.date or "")[:10])).days
            except ValueError:  # undated chunk: no boost
                continue
        return fusion.recency(scores, ages, s.recency_weight, s.recency_half_life_days)

    async def weigh_strength(
        self, reader: IndexReader, scores: dict[int, float], as_of: dt.date | None = None
    ) -> dict[int, float]:
        """Scale scores by FSRS retrievability (``strength.weight``; 0 = unchanged)."""
        weight = self.settings.strength.weight
        if weight <= 0 or not scores:
            return scores
        now = dt.datetime.combine(as_of, dt.time(12), dt.UTC) if as_of else dt.datetime.now(dt.UTC)
        ids = list(scores)
        rows, memories = await reader.hit_rows(ids)
        held = await self.recall.of_chunks(rows, memories, now)
        return {
            cid: strength.weigh(sc, held[cid].retrievability, weight) if cid in held else sc
            for cid, sc in scores.items()
        }

    async def hits(
        self,
        reader: IndexReader,
        cands: Sequence[fusion.Candidate] | fusion.Pool,
        top: Sequence[tuple[int, float]],
        filters: SearchFilters | None = None,
        memories_out: dict[int, MemoryRecord] | None = None,
    ) -> list[Hit]:
        """Hit values for fused (chunk id, score) pairs, in that order; memories past their
        expiration date (a UTC day) left out unless the filters show them. The memories among
        them go into ``memories_out`` (by chunk id) when given."""
        ids = [cid for cid, _ in top]
        rows, memories = await reader.hit_rows(ids)
        if filters is None or not filters.show_expired:
            today = utc_today()
            for cid, m in memories.items():
                if m.expiration_date is not None and m.expiration_date < today:
                    rows.pop(cid, None)
        if memories_out is not None:
            memories_out.update((cid, m) for cid, m in memories.items() if cid in rows)
        pool = fusion.as_pool(cands)
        none = fusion.Candidate(0, None, None, None, None)
        by_id = {cid: pool.get(cid) or none for cid, _ in top}
        return [
            Hit(
                chunk_id=cid,
                path=rows[cid].path,
                start_line=rows[cid].start_line,
                end_line=rows[cid].end_line,
                heading=rows[cid].heading,
                score=sc,
                text=rows[cid].text,
                vector_score=by_id[cid].vector_score,
                keyword_score=by_id[cid].keyword_score,
                date=rows[cid].date,
                tags=rows[cid].tags,
                id=(
                    memories[cid].id
                    if cid in memories
                    else note_key(rows[cid].path, rows[cid].start_line, rows[cid].end_line)
                ),
            )
            for cid, sc in top
            if cid in rows
        ]

    async def warm(self) -> None:
        """Load the Chinese segmenter and the embedding model now, off the event loop, so the
        first search after a daemon start does not pay for them. The segmenter only when the
        index holds Chinese (or cannot tell): its whole dictionary takes ~0.6 s and ~70 MB,
        and a Chinese query is cut without it (core/segmenter.py); the first Chinese text to
        index in a vault without any loads it then."""
        async with self.store.snapshot() as reader:
            chinese = await reader.holds_chinese()
        if chinese is not False:
            await asyncio.to_thread(warm_segmenter)
        if not self.embedder.down:
            try:
                await self.embedder.embed_queries(["warm up"])
            except EmbedderError as exc:
                self.embedder.mark_down(str(exc))


def unit_vector(vector: Vector) -> Vector:
    """A caller's query vector as float32 of length 1. Raises InputError for a bad one."""
    vec = np.asarray(vector, dtype=np.float32).reshape(-1)
    norm = float(np.linalg.norm(vec))
    if vec.size == 0 or not np.isfinite(norm) or norm == 0:
        raise InputError("query_vector must be a non-empty, finite, non-zero list of numbers")
    out: Vector = vec / norm
    return out


def vault_relative(filters: SearchFilters, vault: Path) -> SearchFilters:
    """Accept ``./memory/`` and absolute paths inside the vault as path prefixes."""
    prefix = filters.path_prefix
    if not prefix:
        return filters
    trail = "/" if prefix.endswith(("/", os.sep)) else ""
    if os.path.isabs(prefix):
        try:
            prefix = Path(prefix).resolve().relative_to(vault.resolve()).as_posix()
        except ValueError:
            return filters  # outside the vault: it matches nothing, as it should
        prefix = "" if prefix == "." else prefix + trail
    prefix = prefix.replace(os.sep, "/")
    while prefix.startswith("./"):
        prefix = prefix[2:]
    return dataclasses.replace(filters, path_prefix=prefix if prefix not in ("", ".") else None)


def continued(
    first: list[tuple[int, float]], deeper: list[tuple[int, float]]
) -> list[tuple[int, float]]:
    """``first`` followed by the rest of ``deeper`` in its order, each of those scored at
    most the last score of ``first`` (the list stays sorted)."""
    shown = {cid for cid, _ in first}
    floor = first[-1][1] if first else 1.0
    return first + [(cid, min(sc, floor)) for cid, sc in deeper if cid not in shown]


async def _no_hits() -> list[tuple[int, float]]:
    return []
