"""MemoryService: the one object every front-end talks to; a facade over indexer and searcher.

It owns the store's and the embedder's lifetimes. Many tasks may call it at once: searches
each read their own snapshot, writes are short transactions, and indexing runs that overlap
are ordered per file (see ``Indexer``).
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Collection
from types import TracebackType
from typing import Self

from memcore.core.models import IndexReport, IndexStatus, SearchFilters, SearchResult
from memcore.core.settings import Settings
from memcore.embedders.base import EmbeddingRunner
from memcore.index.indexer import Indexer, Progress, no_progress
from memcore.llm.base import LLM
from memcore.memory.conversations import Conversations
from memcore.memory.operations import MemoryApi
from memcore.memory.writer import MemoryWriter
from memcore.search.context import relevant_memories
from memcore.search.recall import Recall
from memcore.search.searcher import Searcher
from memcore.storage.base import Store, Vector
from memcore.vault.history import HistoryLog


class MemoryService:
    """Indexes Markdown into a Store and answers hybrid searches.

    Use as ``async with MemoryService(settings, store, runner) as svc``.
    """

    def __init__(
        self,
        settings: Settings,
        store: Store,
        embedder: EmbeddingRunner,
        llm: LLM | None = None,
    ) -> None:
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.llm = llm
        self.indexer = Indexer(settings, store, embedder, HistoryLog(settings.vault))
        self.recall = Recall(settings.vault)  # FSRS strength from memory/reviews.jsonl
        self.searcher = Searcher(settings, store, embedder, self.recall)
        writer = MemoryWriter(settings.vault, store, self.indexer)
        self.memories = MemoryApi(store, writer, self.searcher, llm, self.recall)
        self.conversations = Conversations(writer)  # transcripts, chat and tool-call items

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
            if self.llm is not None:
                await self.llm.aclose()
        finally:
            await self.store.__aexit__(exc_type, exc, tb)

    @property
    def model_id(self) -> str:
        return self.embedder.model_id

    async def index(
        self,
        paths: Collection[str] | None = None,
        *,
        full: bool = False,
        progress: Progress = no_progress,
        stop: asyncio.Event | None = None,
        fill_pending: bool = True,
    ) -> IndexReport:
        """See ``Indexer.index``: incremental, resumable, one transaction per file.
        ``fill_pending=False``: only the files that changed, not the vectors still missing
        elsewhere (a catch-up before a read must not re-embed a vault after a model change)."""
        return await self.indexer.index(
            paths, full=full, progress=progress, stop=stop, fill_pending=fill_pending
        )

    async def prepare_search(self, started: Callable[[int], None] | None = None) -> None:
        """Leave the index quick to search from the next start: past storage.ann_min_vectors,
        build and save the vector graph now if none is saved (minutes at 1M chunks; the
        daemon builds it in the background instead). ``started(n)`` says a build began."""
        await self.store.prepare_vectors(self.model_id, started)

    async def fill_pending(self) -> IndexReport:
        """Retry embedding for chunks stored while the embedder was down."""
        return await self.indexer.fill_pending()

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
        """See ``Searcher.search``: hybrid, degrading to keyword-only with a warning."""
        return await self.searcher.search(
            query, limit, filters, fusion_name, min_score, query_vector, as_of
        )

    async def context(
        self,
        query: str,
        limit: int = 3,
        filters: SearchFilters | None = None,
        min_score: float | None = None,
    ) -> str:
        """A "## Relevant Memories" block for a prompt: the best ``limit`` hits that clear
        the relevance floor (``search.context_min_score`` unless ``min_score``); an empty
        string when none does. Conversation turns only when ``filters`` ask for them
        (``include_turns``; the default filters leave them out). Every memory put in the
        block counts as used: one FSRS review each."""
        floor = self.settings.search.context_min_score if min_score is None else min_score
        filters = filters or SearchFilters(include_turns=False)
        result = await self.search(query, limit=limit, filters=filters, min_score=floor)
        await self.memories.reinforce_hits(result.hits)
        return relevant_memories(result.hits)

    async def warm(self) -> None:
        """Load models and dictionaries off the event loop before the first query needs them."""
        await self.searcher.warm()

    async def status(self) -> IndexStatus:
        async with self.store.snapshot() as reader:
            st = await reader.stats(self.model_id)
            skipped = await reader.skipped_files()
            copies = await reader.memory_copies()
        return IndexStatus(
            files=st.files,
            chunks=st.chunks,
            vectors_pending=st.vectors_pending,
            model_id=self.model_id,
            other_models=st.other_models,
            db_path=self.store.location,
            db_bytes=st.db_bytes,
            engine=self.store.engine,
            duplicate_memories=copies,
            last_indexed=st.last_indexed,
            skipped={p: f.reason for p, f in sorted(skipped.items())},
        )
