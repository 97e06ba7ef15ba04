"""Searcher: hybrid search over one read snapshot (vector and keyword lists, fusion, recency).

The query is embedded before the snapshot opens, so no snapshot waits on an embedder. The
pipeline stages (``candidates``, ``fuse``, ``boost_recent``, ``hits``) are public for the
retrieval harness, which scores several fusion methods on the same candidates.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass

from memcore.embedders.base import EmbeddingRunner
from memcore.errors import EmbedderError
from memcore.models import Hit, SearchFilters, SearchMode, SearchResult
from memcore.search import fusion
from memcore.search.tokenize import has_cjk, warm_segmenter
from memcore.settings import Settings
from memcore.storage.base import IndexReader, Store, Vector


@dataclass(frozen=True, slots=True)
class Found:
    """What the retrievers found for a query, before fusion."""

    candidates: list[fusion.Candidate]
    has_vectors: bool
    warnings: tuple[str, ...]
    query_has_cjk: bool


class Searcher:
    """Answers searches; safe to call from many tasks at once (each gets its own snapshot)."""

    def __init__(self, settings: Settings, store: Store, embedder: EmbeddingRunner) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder

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

        ``query_vector`` skips embedding the query (it must come from the same model);
        ``as_of`` is the day the recency boost counts ages from (default today)."""
        s = self.settings.search
        limit = limit or s.limit
        method = fusion_name or s.fusion
        min_score = s.min_score if min_score is None else min_score
        warnings: list[str] = []
        if query_vector is None and method != "keyword" and query.strip():
            query_vector = await self.embed_query(query, warnings)
        async with self.store.snapshot() as reader:
            found = await self.candidates(
                reader,
                query,
                limit * s.candidates,
                filters or SearchFilters(),
                query_vector if method != "keyword" else None,
                use_keywords=method != "vector",
            )
            fused = method if found.has_vectors else "keyword"
            scores = self.fuse(found.candidates, fused, found.query_has_cjk)
            scores = await self.boost_recent(reader, scores, as_of)
            top = [(cid, sc) for cid, sc in fusion.ranked(scores) if sc >= min_score][:limit]
            hits = await self.hits(reader, found.candidates, top)
        mode: SearchMode = (
            "keyword" if not found.has_vectors else ("vector" if method == "vector" else "hybrid")
        )
        return SearchResult(query, hits, mode, (*warnings, *found.warnings))

    async def embed_query(self, query: str, warnings: list[str]) -> Vector | None:
        """The query's vector, or None (with a warning) when the embedder is unavailable."""
        if self.embedder.down:
            warnings.append(
                f"embedder unavailable, keyword results only: {self.embedder.down_reason} "
                "(retrying in the background)"
            )
            return None
        try:
            vecs = await self.embedder.embed([query])
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
    ) -> Found:
        """The top ``n`` of each retriever (cosine and BM25) in one snapshot, before fusion."""
        warnings: list[str] = []
        model = self.embedder.model_id
        keyword = await reader.search_text(query, n, filters) if use_keywords else []
        vector: list[tuple[int, float]] = []
        cosine: dict[int, float] = {}
        if query_vector is not None:
            vector = await reader.search_vectors(query_vector, model, n, filters)
            if vector:
                cosine = await reader.vector_similarity(
                    query_vector, model, [cid for cid, _ in keyword]
                )
            elif not await reader.has_vectors(model):
                warnings.append("no vectors indexed yet; keyword results only")
            pending = await reader.count_pending(model)
            if pending:
                warnings.append(f"{pending} chunks are waiting for vectors")
        cands = fusion.build_candidates(vector, keyword, cosine)
        return Found(cands, bool(vector), tuple(warnings), has_cjk(query))

    def fuse(
        self, cands: Sequence[fusion.Candidate], method: str, query_has_cjk: bool = False
    ) -> dict[int, float]:
        """Combine both lists with a fusion method (see settings.FUSIONS)."""
        s = self.settings.search
        reads = self.embedder.reads_cjk or not query_has_cjk
        return fusion.fuse(cands, method, s.keyword_weight, s.rrf_k, model_reads_query=reads)

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

    async def hits(
        self,
        reader: IndexReader,
        cands: Sequence[fusion.Candidate],
        top: Sequence[tuple[int, float]],
    ) -> tuple[Hit, ...]:
        """Hit values for fused (chunk id, score) pairs, in that order."""
        rows = await reader.chunk_rows([cid for cid, _ in top])
        by_id = {c.chunk_id: c for c in cands}
        return tuple(
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
            )
            for cid, sc in top
            if cid in rows
        )

    async def warm(self) -> None:
        """Load the Chinese segmenter and the embedding model now, off the event loop, so the
        first search after a daemon start does not pay for them."""
        await asyncio.to_thread(warm_segmenter)
        if not self.embedder.down:
            try:
                await self.embedder.embed(["warm up"])
            except EmbedderError as exc:
                self.embedder.mark_down(str(exc))
