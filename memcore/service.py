"""MemoryService: the one object every front-end talks to; a facade over indexer and searcher.

It owns the store's and the embedder's lifetimes. Many tasks may call it at once: searches
each read their own snapshot, writes are short transactions, and indexing runs that overlap
are ordered per file (see ``Indexer``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import logging
from collections.abc import AsyncIterator, Callable, Collection
from contextlib import asynccontextmanager
from dataclasses import dataclass
from functools import cached_property
from types import TracebackType
from typing import TYPE_CHECKING, Self

from memcore.core.errors import MemcoreError
from memcore.core.models import (
    LOCAL,
    Caller,
    IndexReport,
    IndexStatus,
    MemoryQuery,
    SearchFilters,
    SearchResult,
)
from memcore.core.redact import redacted
from memcore.core.settings import Settings
from memcore.embedders.base import EmbeddingRunner
from memcore.index.indexer import Indexer, Progress, no_progress
from memcore.llm.base import LLM
from memcore.memory.access import ScopedConversations, ScopedMemory, bind_filters
from memcore.memory.port import Memory
from memcore.memory.remote_hits import DISABLED, with_remote_memories
from memcore.search.context import relevant_memories
from memcore.search.recall import Recall
from memcore.search.searcher import Searcher
from memcore.search.strength import Policy
from memcore.storage.base import Store, Vector
from memcore.vault.history import HistoryLog

if TYPE_CHECKING:
    from memcore.core.metrics import Metrics
    from memcore.memory.conversations import Conversations
    from memcore.memory.scratch import ScratchConversations
    from memcore.memory.writer import MemoryWriter

log = logging.getLogger(__name__)


@dataclass(slots=True)
class Readiness:
    """How far the service is with catching up with the vault. A long-running front (watch,
    serve) starts in ``starting``, goes through ``catching_up`` (files done of total) and ends
    in ``ready``; a library or one-shot CLI service caught up before it was opened (or reads
    what there is) and is ``ready`` from the start."""

    phase: str = "ready"  # starting | catching_up | ready
    files_done: int = 0
    files_total: int = 0

    @property
    def ready(self) -> bool:
        return self.phase == "ready"

    def progress(self, phase: str, done: int, total: int) -> None:
        """An indexing ``Progress`` callback: follows the catch-up's file count."""
        if phase == "files":
            self.phase, self.files_done, self.files_total = "catching_up", done, total

    def warning(self) -> str | None:
        """What a reader should know while results may be incomplete, or None."""
        if self.ready:
            return None
        if self.phase == "starting" or not self.files_total:
            return "still starting: catching up with the vault; results may be incomplete"
        return (
            f"still catching up with the vault ({self.files_done} of {self.files_total} files "
            "indexed); results may be incomplete"
        )

    def to_dict(self) -> dict[str, object]:
        return {"phase": self.phase, "files_done": self.files_done, "files_total": self.files_total}


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
        memories: Memory | None = None,
    ) -> None:
        """``memories``: where memories live when not in this vault (a Mem0 server, or none:
        memory switched off); by default the vault's Markdown."""
        self.settings = settings
        self.store = store
        self.embedder = embedder
        self.llm = llm
        self.indexer = Indexer(settings, store, embedder, HistoryLog(settings.vault))
        # FSRS strength from memory/reviews.jsonl, under the settings' weights and run pace
        policy = Policy(settings.strength.parameters, settings.strength.run_pace)
        self.recall = Recall(settings.vault, policy)
        self.searcher = Searcher(settings, store, embedder, self.recall)
        # The memory side (writer, memories, conversations, scratch) is built when first
        # used: a one-shot search never writes (their modules: ~6 ms of its CPU).
        self._given_memories = memories
        self.readiness = Readiness()
        self._metrics: Metrics | None = None  # made by the first front that serves them
        # False in a batch command run as its own process: a vector graph its load leaves
        # owed is counted in graph_owed, for a fresh process to build once this one ends
        # (cli/app.py): the graph's memory never adds to the load's (at 1M, 1.6 GB together;
        # the load 0.65 GB and the build 0.72 GB apart).
        self.builds_graph_here = True
        self.graph_owed = 0

    @property
    def memory_kind(self) -> str:
        """Where memories live: "markdown" (this vault), "mem0" or "none", known without
        building the memory operations."""
        given = self._given_memories
        return given.kind if given is not None else Memory.kind

    @cached_property
    def writer(self) -> MemoryWriter:
        """Writes to the vault's Markdown: notes (the git hook), transcripts, import, export."""
        from memcore.memory.writer import MemoryWriter

        return MemoryWriter(self.settings.vault, self.store, self.indexer)

    @cached_property
    def memories(self) -> Memory:
        """The memory operations, on the vault's Markdown unless the service was given
        another home for them (a Mem0 server; none: memory switched off)."""
        if self._given_memories is not None:
            return self._given_memories
        from memcore.memory.operations import MemoryApi

        return MemoryApi(self.store, self.writer, self.searcher, self.llm, self.recall)

    @cached_property
    def conversations(self) -> Conversations:
        """Transcripts, chat and tool-call items; memory switched off: checked, then dropped."""
        from memcore.memory.conversations import Conversations, NoConversations

        off = self.memory_kind == "none"
        return (NoConversations if off else Conversations)(self.writer)

    @cached_property
    def scratch(self) -> ScratchConversations:
        """A throwaway session's transcript, in memory."""
        from memcore.memory.scratch import ScratchConversations

        return ScratchConversations(self.writer)

    def _indexing(self) -> set[str]:
        """The files a large save wrote that are still being indexed (none before a write)."""
        writer = self.__dict__.get("writer")
        return set(writer.indexing) if writer is not None else set()

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
            if "writer" in self.__dict__:  # what a large save left to index, before closing
                await self.writer.settle()
            await self.embedder.aclose()
            if "memories" in self.__dict__ or self._given_memories is not None:
                await self.memories.aclose()
            if self.llm is not None:
                await self.llm.aclose()
        finally:
            await self.store.__aexit__(exc_type, exc, tb)

    def memories_for(self, caller: Caller) -> Memory:
        """The memory operations as ``caller`` may use them: its token's scope intersected
        with every call, its idempotency keys its own (memory/access.py). Every front reaches
        memories through this; ``memories`` itself is the vault owner's full access."""
        return ScopedMemory(self.memories, caller)

    def conversations_for(self, caller: Caller) -> ScopedConversations:
        """Transcripts as ``caller`` may reach them (a session's own token, or full access)."""
        return ScopedConversations(self.conversations, caller)

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

    async def catch_up(self, stop: asyncio.Event | None = None) -> IndexReport | None:
        """Load the model and the Chinese dictionary, then bring the index in line with the
        vault once, following the progress in ``readiness`` (a server answers meanwhile,
        saying its results may be incomplete). A failure is logged, not raised: the index is
        served as it is; None then."""
        self.readiness.phase = "starting"
        try:  # as the daemon does: loading jieba later would stall every caller for ~1 s
            await self.warm()
        except Exception:
            log.exception("warming up failed; the first search loads what it needs")
        try:
            report = await self.index(stop=stop, progress=self.readiness.progress)
        except MemcoreError as exc:
            log.warning("could not catch up with the vault (%s); serving the index as it is", exc)
            return None
        finally:
            done, total = self.readiness.files_done, self.readiness.files_total
            self.readiness.phase = "ready"
        if stop is not None and stop.is_set() and done < total:
            log.info("stopped while catching up: %s; %d of %d files left for the next start",
                     report.summary(), total - done, total)  # fmt: skip
        else:
            log.info("caught up with the vault: %s", report.summary())
        return report

    @asynccontextmanager
    async def bulk(self, expected: int = 0) -> AsyncIterator[None]:
        """Many writes follow, about ``expected`` chunks (see ``Store.bulk``): a batch job
        (``add --file``, an import) wraps them in this. Once they went in, the index is left
        quick to search from the next start (``prepare_search``): else every process opened
        after a 1M load loads the exact matrix and starts the graph again."""
        async with self.store.bulk(expected):
            yield
        await self.prepare_search()

    async def prepare_search(self, started: Callable[[int], None] | None = None) -> None:
        """Leave the index quick to search from the next start: past storage.ann_min_vectors,
        build and save the vector graph now if none is saved (minutes at 1M chunks; the
        daemon builds it in the background instead). ``started(n)`` says a build began.
        With ``builds_graph_here`` off, a build is only counted in ``graph_owed``."""
        owed = await self.store.prepare_vectors(self.model_id, started, here=self.builds_graph_here)
        self.graph_owed = max(self.graph_owed, owed)

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
        caller: Caller = LOCAL,
    ) -> SearchResult:
        """See ``Searcher.search``: hybrid, degrading to keyword-only with a warning; while
        the vault is still being caught up, with a warning that results may be incomplete.
        ``caller``: a scoped token's search is held to its scope (Forbidden for another)."""
        filters = bind_filters(caller, filters)
        kind = self.memory_kind
        if kind == "none":
            return SearchResult(query, (), "keyword", (DISABLED,))
        behind = self._indexing_warning()  # as the search starts: what it may not see
        result = await self.searcher.search(
            query, limit, filters, fusion_name, min_score, query_vector, as_of
        )
        if kind != "markdown":  # the memories live elsewhere: the notes here, and theirs
            result = await with_remote_memories(
                self.memories, result, query, limit or self.settings.search.limit,
                filters or SearchFilters(), min_score,
            )  # fmt: skip
        pending = [w for w in (self.readiness.warning(), behind) if w]
        if not pending:
            return result
        return dataclasses.replace(result, warnings=(*pending, *result.warnings))

    def _indexing_warning(self) -> str | None:
        """While files written by a large save are indexed in the background."""
        files = sorted(self._indexing())
        if not files:
            return None
        more = f" and {len(files) - 2} more" if len(files) > 2 else ""
        return (
            f"{len(files)} file(s) written moments ago are still being indexed "
            f"({', '.join(files[:2])}{more}); results may miss them"
        )

    async def context(
        self,
        query: str,
        limit: int = 3,
        filters: SearchFilters | None = None,
        min_score: float | None = None,
        caller: Caller = LOCAL,
    ) -> str:
        """A "## Relevant Memories" block for a prompt: the best ``limit`` hits that clear
        the relevance floor (``search.context_min_score`` unless ``min_score``); an empty
        string when none does. Conversation turns only when ``filters`` ask for them
        (``include_turns``; the default filters leave them out). Every memory put in the
        block counts as used: one FSRS review each."""
        floor = self.settings.search.context_min_score if min_score is None else min_score
        filters = filters or SearchFilters(include_turns=False)
        result = await self.search(
            query, limit=limit, filters=filters, min_score=floor, caller=caller
        )
        await self.memories.reinforce_hits(result.hits)
        return relevant_memories(result.hits)

    async def warm(self) -> None:
        """Load models and dictionaries off the event loop before the first query needs them."""
        await self.searcher.warm()

    async def status_document(self) -> dict[str, object]:
        """The one status document (`memcore status --json`, /api/status, MCP ``status``):
        the vault, what the index holds, and how far the catch-up is. The fronts add the
        daemon's own state (``daemon``) where they know it. No credential is in it."""
        document: dict[str, object] = {
            "vault": str(self.settings.vault),
            "memory": self.memory_kind,
            "indexed": True,
            **(await self.status()).to_dict(),
            "readiness": self.readiness.to_dict(),
            # reads whose review (a use, for strength) could not be written: a full disk
            "reviews_skipped": self.recall.log.skipped,
            # a shared index's live nodes, each saying whether it holds the node roles
            "nodes": [n.to_dict() for n in await self.store.nodes()],
        }
        return dict(redacted(document))

    @property
    def metrics(self) -> Metrics:
        """What ``GET /metrics`` serves, counted by the searcher, the embedder and the HTTP app
        from when a front first asks (an HTTP app is built with them): a one-shot command
        never does, and never imports prometheus_client (~25 ms of its start)."""
        if self._metrics is None:
            from memcore.core.metrics import Metrics

            self._metrics = Metrics()
            self.searcher.metrics = self.embedder.metrics = self._metrics
        return self._metrics

    async def metrics_text(self) -> bytes:
        """The metrics in Prometheus' text format, the gauges read now (see core/metrics.py)."""
        document = await self.status_document()
        async with self.store.snapshot() as reader:
            generation = await reader.begun()
            memories = await reader.count_memories(MemoryQuery(include_turns=False))
        last = document.get("last_indexed")
        age = None
        if isinstance(last, str):
            since = dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(last)
            age = max(0.0, since.total_seconds())
        self.metrics.observe_status(
            {**document, "generation": generation, "memories": memories,
             "indexing": len(self._indexing())},
            age,
        )  # fmt: skip
        return self.metrics.exposition()

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
