"""MemoryService: the one object that indexes the vault, searches it and reports status."""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Self

import numpy as np
import numpy.typing as npt

from memcore.chunker import ChunkerConfig
from memcore.embedders.base import EmbeddingRunner
from memcore.errors import EmbedderError
from memcore.indexing import (
    CHUNKING_KEY,
    Tally,
    attach_vectors,
    chunking_signature,
    embed_missing,
    prepare_file,
)
from memcore.models import (
    DiskFile,
    FileState,
    Hit,
    IndexReport,
    IndexStatus,
    SearchFilters,
    SearchMode,
    SearchResult,
)
from memcore.planner import plan_changes
from memcore.prompt import relevant_memories
from memcore.search import fusion
from memcore.search.tokenize import fts_match_expression, has_cjk
from memcore.search.vectors import VectorIndex
from memcore.settings import Settings
from memcore.storage.base import Store
from memcore.vault import scan_vault, stat_memory_files

log = logging.getLogger(__name__)

Progress = Callable[[str, int, int], None]  # (phase, done, total)
FILES_PER_BATCH = 32  # files chunked and embedded together; each is still its own transaction
PENDING_BATCH = 256
EMBEDDER_RETRY_S = 30.0  # how long indexing skips a failed embedder before trying it again


def _no_progress(phase: str, done: int, total: int) -> None:
    return None


@dataclass(frozen=True, slots=True)
class Found:
    """What the retrievers found for a query, before fusion."""

    candidates: list[fusion.Candidate]
    has_vectors: bool
    warnings: tuple[str, ...]
    query_has_cjk: bool


class MemoryService:
    """Indexes Markdown into a Store and answers hybrid searches.

    Use as ``async with MemoryService(settings, store, runner) as svc``. Safe to call from one
    event loop; writes are serialised by an internal lock.
    """

    def __init__(self, settings: Settings, store: Store, embedder: EmbeddingRunner) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder
        ix = settings.index
        self.chunker = ChunkerConfig(
            ix.chunk_tokens, ix.overlap_tokens, ix.chars_per_token, ix.split
        )
        self._chunking = chunking_signature(ix)
        self._vectors: VectorIndex | None = None
        self._pending: int | None = None  # chunks without a current vector; None = unknown
        # After a failure, indexing stops calling the embedder until this monotonic time, so
        # full text goes in at once; fill_pending() always tries and closes it again.
        self._embedder_down_until = 0.0
        self._write_lock = asyncio.Lock()

    async def __aenter__(self) -> Self:
        await self.store.__aenter__()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            await self.embedder.aclose()
        finally:
            await self.store.__aexit__(exc_type, exc, tb)

    @property
    def model_id(self) -> str:
        return self.embedder.model_id

    # ---- indexing -------------------------------------------------------------------------

    async def index(
        self,
        paths: Collection[str] | None = None,
        *,
        full: bool = False,
        progress: Progress = _no_progress,
        stop: asyncio.Event | None = None,
    ) -> IndexReport:
        """Bring the index in line with the vault (or only with ``paths``, vault-relative).

        Idempotent and resumable: each file is replaced in one transaction, so an interrupted
        run leaves every file fully old or fully new and the next run picks up the rest.
        ``stop`` is checked between batches of files; a stopped run reports what it did.
        """
        started = time.perf_counter()
        s = self.settings
        async with self._write_lock:
            disk = (
                scan_vault(s.vault, s.index.include, s.index.exclude)
                if paths is None
                else stat_memory_files(s.vault, paths, s.index.include, s.index.exclude)
            )
            states = await self.store.file_states()
            # re-chunk everything when the chunking changed; unchanged chunk texts keep vectors
            rechunk = await self._chunking_changed(bool(states)) and paths is None and not full
            full = full or rechunk
            plan = plan_changes(
                disk, states, full=full, scope=None if paths is None else set(paths)
            )
            tally = Tally(
                unchanged=len(plan.unchanged),
                rebuild=full,
                embedder_down=time.monotonic() < self._embedder_down_until,
            )
            if rechunk:
                tally.warnings.append(
                    f"chunking changed ({self._chunking}): re-chunking all {len(disk)} files"
                )
            total = len(plan.to_read)
            stopped = stop.is_set if stop is not None else lambda: False
            for start in range(0, total, FILES_PER_BATCH):
                if stopped():
                    break
                batch = plan.to_read[start : start + FILES_PER_BATCH]
                await self._index_batch(batch, states, tally)
                progress("files", min(start + FILES_PER_BATCH, total), total)
            removed = await self.store.delete_files(plan.to_delete)
            if self._vectors is not None:
                self._vectors.remove(removed)
            if not tally.embedder_down and not stopped():
                await self._fill_pending(tally, progress, stop)
            pending = self._pending = await self.store.count_pending(self.model_id)
            if paths is None and not stopped():
                await self.store.set_meta(CHUNKING_KEY, self._chunking)
        return IndexReport(
            indexed=tuple(tally.indexed),
            unchanged=tally.unchanged,
            deleted=plan.to_delete,
            failed=tuple(tally.failed),
            chunks_embedded=tally.embedded,
            chunks_reused=tally.reused,
            chunks_pending=pending,
            elapsed_ms=(time.perf_counter() - started) * 1000,
            warnings=tuple(dict.fromkeys(tally.warnings)),
        )

    async def _chunking_changed(self, has_files: bool) -> bool:
        """Whether the index was built with other chunk settings or an older chunker. An empty
        index is stamped with the current ones instead (its first files use them)."""
        if not has_files:
            await self.store.set_meta(CHUNKING_KEY, self._chunking)
            return False
        return await self.store.get_meta(CHUNKING_KEY) != self._chunking

    async def _index_batch(
        self, files: Sequence[DiskFile], states: dict[str, FileState], tally: Tally
    ) -> None:
        prepared = []
        ix = self.settings.index
        for f in files:
            item = await asyncio.to_thread(
                prepare_file, self.settings.vault, ix, self.chunker, f, states.get(f.path), tally
            )
            if item is not None:
                prepared.append(item)
        for state in tally.touched:
            await self.store.touch_file(state)
        tally.touched.clear()
        if not prepared:
            return
        error = await attach_vectors(self.store, self.embedder, prepared, tally)
        if error is not None:
            self._embedder_failed(tally, error)
        for item in prepared:
            loaded = self._vectors is not None
            old = await self.store.chunk_ids_of([item.state.path]) if loaded else []
            ids = await self.store.replace_file(
                item.state, item.chunks, item.fts, item.vectors, self.model_id
            )
            if self._vectors is not None:
                self._vectors.remove(old)
                with_vec = [(i, v) for i, v in zip(ids, item.vectors, strict=True) if v is not None]
                if with_vec:
                    self._vectors.add([i for i, _ in with_vec], np.stack([v for _, v in with_vec]))
            tally.indexed.append(item.state.path)

    async def _fill_pending(
        self, tally: Tally, progress: Progress, stop: asyncio.Event | None = None
    ) -> None:
        """Embed chunks whose vector is missing or from another model (model change)."""
        total = await self.store.count_pending(self.model_id)
        done = 0
        while done < total and not (stop is not None and stop.is_set()):
            batch = await self.store.pending_chunks(self.model_id, PENDING_BATCH)
            if not batch:
                return
            cached = await self.store.cached_vectors([p.content_hash for p in batch], self.model_id)
            todo = {p.content_hash: p.embed_text for p in batch if p.content_hash not in cached}
            try:
                cached.update(await embed_missing(self.store, self.embedder, todo, tally))
            except EmbedderError as exc:
                self._embedder_failed(tally, exc)
                return
            by_id = {p.chunk_id: cached[p.content_hash] for p in batch}
            updated = await self.store.set_vectors(by_id, self.model_id)
            if self._vectors is not None and updated:
                self._vectors.add(updated, np.stack([by_id[i] for i in updated]))
            done += len(batch)
            progress("embed", min(done, total), total)

    def _embedder_failed(self, tally: Tally, exc: EmbedderError) -> None:
        tally.embedder_down = True
        tally.warnings.append(f"embedder unavailable, vectors pending: {exc}")
        self._embedder_down_until = time.monotonic() + EMBEDDER_RETRY_S

    async def fill_pending(self) -> IndexReport:
        """Retry embedding for chunks stored while the embedder was down."""
        started = time.perf_counter()
        tally = Tally()
        self._embedder_down_until = 0.0
        async with self._write_lock:
            await self._fill_pending(tally, _no_progress)
            pending = self._pending = await self.store.count_pending(self.model_id)
        return IndexReport(
            chunks_embedded=tally.embedded,
            chunks_pending=pending,
            elapsed_ms=(time.perf_counter() - started) * 1000,
            warnings=tuple(dict.fromkeys(tally.warnings)),
        )

    # ---- search ---------------------------------------------------------------------------

    async def _vector_index(self) -> VectorIndex:
        if self._vectors is None:
            ids, mat = await self.store.load_vectors(self.model_id)
            index = VectorIndex(mat.shape[1] if len(ids) else None)
            index.add(ids.tolist(), mat)
            self._vectors = index
        return self._vectors

    async def search(
        self,
        query: str,
        limit: int | None = None,
        filters: SearchFilters | None = None,
        fusion_name: str | None = None,
        min_score: float | None = None,
        query_vector: npt.NDArray[np.float32] | None = None,
        as_of: dt.date | None = None,
    ) -> SearchResult:
        """Hybrid search. Never raises for odd query text; degrades to keyword-only (and says
        so in ``warnings``) when the embedder is unreachable or vectors are still pending.

        ``query_vector`` skips embedding the query (it must come from the same model);
        ``as_of`` is the day the recency boost counts ages from (default today)."""
        s = self.settings.search
        limit = limit or s.limit
        method = fusion_name or s.fusion
        min_score = s.min_score if min_score is None else min_score
        found = await self.candidates(
            query,
            limit * s.candidates,
            filters,
            query_vector,
            method != "keyword",
            method != "vector",
        )
        mode: SearchMode = (
            "keyword" if not found.has_vectors else ("vector" if method == "vector" else "hybrid")
        )
        scores = self.fuse(
            found.candidates, method if found.has_vectors else "keyword", found.query_has_cjk
        )
        scores = await self.boost_recent(scores, as_of)
        top = [(cid, sc) for cid, sc in fusion.ranked(scores) if sc >= min_score][:limit]
        hits = await self.hits(found.candidates, top)
        return SearchResult(query, hits, mode, found.warnings)

    async def candidates(
        self,
        query: str,
        n: int,
        filters: SearchFilters | None = None,
        query_vector: npt.NDArray[np.float32] | None = None,
        use_vectors: bool = True,
        use_keywords: bool = True,
    ) -> Found:
        """The top ``n`` of each retriever (cosine and BM25), before fusion."""
        filters = filters or SearchFilters()
        warnings: list[str] = []
        keyword: list[tuple[int, float]] = []
        match = fts_match_expression(query)
        if match and use_keywords:
            keyword = await self.store.keyword_search(match, n, filters)
        vector: list[tuple[int, float]] = []
        cosine: dict[int, float] = {}
        if use_vectors:
            qvec = query_vector
            if qvec is None and query.strip():
                qvec = await self._embed_query(query, warnings)
            index = await self._vector_index() if qvec is not None else None
            if index is not None and len(index) == 0:
                warnings.append("no vectors indexed yet; keyword results only")
            elif index is not None and qvec is not None:
                allowed = await self.store.filtered_ids(filters) if filters.active else None
                vector = index.search(qvec, n, allowed)
                cosine = index.similarity(qvec, [cid for cid, _ in keyword])
            if self._pending is None:
                self._pending = await self.store.count_pending(self.model_id)
            if self._pending:
                warnings.append(f"{self._pending} chunks are waiting for vectors")
        cands = fusion.build_candidates(vector, keyword, cosine)
        return Found(cands, bool(vector), tuple(warnings), has_cjk(query))

    async def hits(
        self, cands: Sequence[fusion.Candidate], top: Sequence[tuple[int, float]]
    ) -> tuple[Hit, ...]:
        """Hit values for fused (chunk id, score) pairs, in that order."""
        rows = await self.store.chunk_rows([cid for cid, _ in top])
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

    async def _embed_query(self, query: str, warnings: list[str]) -> npt.NDArray[np.float32] | None:
        if time.monotonic() < self._embedder_down_until:
            warnings.append(
                "embedder unavailable, keyword results only (retrying in the background)"
            )
            return None
        try:
            vecs = await self.embedder.embed([query])
            query_vec: npt.NDArray[np.float32] = vecs[0]
            return query_vec
        except EmbedderError as exc:
            warnings.append(f"embedder unavailable, keyword results only: {exc}")
            self._embedder_down_until = time.monotonic() + EMBEDDER_RETRY_S
            return None

    def fuse(
        self, cands: Sequence[fusion.Candidate], method: str, query_has_cjk: bool = False
    ) -> dict[int, float]:
        """Combine both lists with a fusion method (see settings.FUSIONS)."""
        s = self.settings.search
        reads = self.embedder.reads_cjk or not query_has_cjk
        return fusion.fuse(cands, method, s.keyword_weight, s.rrf_k, model_reads_query=reads)

    async def boost_recent(
        self, scores: dict[int, float], as_of: dt.date | None = None
    ) -> dict[int, float]:
        """Apply the configured recency boost (``search.recency_weight``; 0 = unchanged)."""
        s = self.settings.search
        if s.recency_weight <= 0 or not scores:
            return scores
        ref = as_of or dt.date.today()
        ages: dict[int, float] = {}
        for cid, row in (await self.store.chunk_rows(list(scores))).items():
            try:
                ages[cid] = (ref - dt.date.fromisoformat((row.date or "")[:10])).days
            except ValueError:  # undated chunk: no boost
                continue
        return fusion.recency(scores, ages, s.recency_weight, s.recency_half_life_days)

    async def context(
        self, query: str, limit: int = 3, filters: SearchFilters | None = None
    ) -> str:
        """A "## Relevant Memories" block for a prompt (empty string when nothing matches)."""
        result = await self.search(query, limit=limit, filters=filters)
        return relevant_memories(result.hits)

    # ---- status ---------------------------------------------------------------------------

    async def status(self) -> IndexStatus:
        st = await self.store.stats(self.model_id)
        return IndexStatus(
            files=st.files,
            chunks=st.chunks,
            vectors_pending=st.vectors_pending,
            model_id=self.model_id,
            other_models=st.other_models,
            db_path=str(self.settings.db_path),
            db_bytes=st.db_bytes,
            last_indexed=st.last_indexed,
        )
