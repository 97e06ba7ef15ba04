"""The Embedder protocol and EmbeddingRunner: batching, bounded concurrency and retries."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np
import numpy.typing as npt

from memcore.core.errors import EmbedderUnavailable, MemcoreError
from memcore.core.lru import LRU

if TYPE_CHECKING:
    from memcore.core.metrics import Metrics

log = logging.getLogger(__name__)

Matrix = npt.NDArray[np.float32]
DOWN_FOR_S = 30.0  # how long callers skip an embedder that failed before trying it again
QUERY_CACHE = 2048  # query vectors kept: a query asked again is not embedded again
AHEAD = 256  # document vectors made ahead (embed_ahead) and kept until an index run asks


class Embedder(Protocol):
    """Turns texts into L2-normalised float32 vectors, one row per text, in order.

    ``model_id`` names the vector space ("local:minilm-l6-v2-int8"); vectors from two ids are
    never compared. Raises EmbedderUnavailable for transient faults, EmbedderError otherwise.
    """

    @property
    def model_id(self) -> str: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def concurrency(self) -> int: ...

    @property
    def reads_cjk(self) -> bool:
        """False for models that cannot read Chinese/Japanese (search trusts keywords more)."""
        ...

    @property
    def in_process(self) -> bool:
        """A model run in this process: a query's vector comes in milliseconds, never after a
        network wait, so a search may open its snapshot while it is made."""
        ...

    async def embed(self, texts: Sequence[str]) -> Matrix: ...

    async def aclose(self) -> None: ...


class EmbeddingRunner:
    """Embeds any number of texts through an Embedder in batches, several batches in flight.

    Transient failures (EmbedderUnavailable) are retried with exponential backoff; after
    ``retries`` attempts the last one propagates. ``embed`` is for what gets indexed and
    ``embed_queries`` for what gets searched: asymmetric models (nomic-embed-text, e5) want a
    different task prefix on each (see ``prefixes``).
    """

    metrics: Metrics | None = None  # the service's (GET /metrics), once it has one

    def __init__(
        self,
        embedder: Embedder,
        retries: int = 3,
        backoff_s: float = 0.5,
        query_prefix: str = "",
        document_prefix: str = "",
    ) -> None:
        self.embedder = embedder
        self.retries = retries
        self.backoff_s = backoff_s
        self.query_prefix = query_prefix
        self.document_prefix = document_prefix
        self._sem = asyncio.Semaphore(max(1, embedder.concurrency))
        self._down_until = 0.0
        self.down_reason = ""  # the error that marked it down, for logs and reports
        self._dimension: int | None = None  # learned from the first vectors made
        self._queries: LRU[str, npt.NDArray[np.float32]] = LRU(QUERY_CACHE)
        # queries waiting for the model: whoever arrives while a batch runs goes in the next
        self._waiting: list[tuple[str, asyncio.Future[npt.NDArray[np.float32]]]] = []
        self._flusher: asyncio.Task[None] | None = None
        # documents embedded ahead of the index run that stores them (see embed_ahead)
        self._ahead: LRU[str, asyncio.Future[npt.NDArray[np.float32]]] = LRU(AHEAD)
        self._ahead_tasks: set[asyncio.Task[None]] = set()

    @property
    def down(self) -> bool:
        """True for a while after a failure: indexing stores text now, vectors come later."""
        return time.monotonic() < self._down_until

    def mark_down(self, reason: str, seconds: float = DOWN_FOR_S) -> None:
        self._down_until = time.monotonic() + seconds
        self.down_reason = reason

    def mark_up(self) -> None:
        self._down_until = 0.0

    @property
    def model_id(self) -> str:
        """The vector space: the model, plus the document prefix when there is one (vectors
        made with another prefix are not comparable, so changing it re-embeds)."""
        if self.document_prefix:
            return f"{self.embedder.model_id}[{self.document_prefix.strip()}]"
        return self.embedder.model_id

    @property
    def reads_cjk(self) -> bool:
        return self.embedder.reads_cjk

    @property
    def in_process(self) -> bool:
        return self.embedder.in_process

    async def dimension(self) -> int | None:
        """The size of this model's vectors (one probe embedding the first time it is asked
        before any was made); None while the embedder is down."""
        if self._dimension is None and not self.down:
            try:
                await self.embed_queries(["dimension"])
            except MemcoreError:
                return None
        return self._dimension

    async def embed(
        self, texts: Sequence[str], progress: Callable[[int], None] | None = None
    ) -> Matrix:
        """Vectors for texts to index (document prefix applied), one row per text, in order.
        Texts embedded ahead (``embed_ahead``) are taken from there, waiting for them if
        they are still being made; a failed one is embedded again here."""
        if self.document_prefix:
            texts = [self.document_prefix + t for t in texts]
        ahead = {t: f for t in dict.fromkeys(texts) if (f := self._ahead.pop(t)) is not None}
        if not ahead:
            return await self._embed(texts, progress)
        await asyncio.wait(ahead.values())  # (waiting never cancels them)
        done = {
            t: f.result() for t, f in ahead.items() if not f.cancelled() and f.exception() is None
        }
        rest = [t for t in dict.fromkeys(texts) if t not in done]
        if progress is not None and done:
            progress(sum(1 for t in texts if t in done))
        if rest:
            done |= dict(zip(rest, await self._embed(rest, progress), strict=True))
        return np.stack([done[t] for t in texts])

    def embed_ahead(self, texts: Sequence[str]) -> None:
        """Start embedding texts that an index run will soon ask ``embed`` for (a memory
        being added, while its write waits for the one in progress on its file): the model
        runs while the write waits, not after it. A failure is left for that run to meet.
        At most AHEAD texts are kept; nothing starts while the embedder is down."""
        if self.down:
            return
        wanted = [self.document_prefix + t for t in dict.fromkeys(texts)]
        wanted = [t for t in wanted if self._ahead.get(t) is None][:AHEAD]
        if not wanted:
            return
        loop = asyncio.get_running_loop()
        futures = {t: loop.create_future() for t in wanted}
        for text, future in futures.items():
            self._ahead.put(text, future)

        async def run() -> None:
            try:
                vectors = await self._embed(wanted, None)
            except BaseException as exc:
                for future in futures.values():
                    if isinstance(exc, asyncio.CancelledError):
                        future.cancel()
                    elif not future.done():
                        future.set_exception(exc)
                        future.exception()  # read: nobody may ever ask for it
                if isinstance(exc, asyncio.CancelledError):
                    raise
                return
            for future, vector in zip(futures.values(), vectors, strict=True):
                if not future.done():
                    future.set_result(vector.copy())  # not a view that keeps the batch

        task = asyncio.create_task(run())
        self._ahead_tasks.add(task)
        task.add_done_callback(self._ahead_tasks.discard)

    async def embed_queries(self, queries: Sequence[str]) -> Matrix:
        """Vectors for search queries (query prefix applied), one row per query, in order.

        A query asked before comes from a cache (a model's vector for a text never changes).
        Queries that arrive together, from concurrent searches, are embedded in one batch:
        one model call for eight short queries costs little more than one, so under load a
        search waits for the model far less than it would in a queue of single calls."""
        texts = [self.query_prefix + q for q in queries]
        rows: list[npt.NDArray[np.float32] | None] = [self._queries.get(t) for t in texts]
        missing = [t for t, row in zip(texts, rows, strict=True) if row is None]
        if missing:
            loop = asyncio.get_running_loop()
            asked = {t: loop.create_future() for t in dict.fromkeys(missing)}
            self._waiting += list(asked.items())
            if self._flusher is None or self._flusher.done():
                self._flusher = asyncio.ensure_future(self._embed_waiting())
            got: dict[str, npt.NDArray[np.float32]] = {}
            if len(asked) == 1:  # a search's one query: no gather's turn of the loop
                ((text, future),) = asked.items()
                got[text] = await future
            else:
                answers = await asyncio.gather(*asked.values(), return_exceptions=True)
                for text, answer in zip(asked, answers, strict=True):
                    if isinstance(answer, BaseException):
                        raise answer
                    got[text] = answer
            rows = [got[t] if row is None else row for t, row in zip(texts, rows, strict=True)]
        return np.stack([row for row in rows if row is not None])

    async def _embed_waiting(self) -> None:
        """Embed the waiting queries, a batch at a time, until none waits."""
        while self._waiting:
            size = max(1, self.embedder.batch_size)
            batch, self._waiting = self._waiting[:size], self._waiting[size:]
            try:
                vectors = await self._embed([t for t, _ in batch], None)
            except BaseException as exc:
                fail = batch + (self._waiting if isinstance(exc, asyncio.CancelledError) else [])
                for _, future in fail:
                    if not future.done():
                        future.set_exception(exc)
                if isinstance(exc, asyncio.CancelledError):
                    self._waiting = []
                    raise
                continue
            for (text, future), vector in zip(batch, vectors, strict=True):
                self._queries.put(text, vector.copy())  # not a view that keeps the batch
                if not future.done():
                    future.set_result(vector)

    async def _embed(self, texts: Sequence[str], progress: Callable[[int], None] | None) -> Matrix:
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        size = max(1, self.embedder.batch_size)
        # Similar lengths in one batch waste less padding in transformer models.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        batches = [order[i : i + size] for i in range(0, len(order), size)]

        async def run(batch: list[int]) -> Matrix:
            if self.metrics is not None:
                self.metrics.embed_waiting.inc()
            try:
                await self._sem.acquire()
            finally:
                if self.metrics is not None:
                    self.metrics.embed_waiting.dec()
            try:
                out = await self._with_retries([texts[i] for i in batch])
            finally:
                self._sem.release()
            if progress is not None:
                progress(len(batch))
            return out

        if len(batches) == 1:  # run here: a task of its own costs a turn of the loop each way
            results = [await run(batches[0])]
        else:
            results = await self._run_all([run(b) for b in batches])
        dim = results[0].shape[1]
        self._dimension = dim
        out = np.zeros((len(texts), dim), dtype=np.float32)
        for batch, vecs in zip(batches, results, strict=True):
            out[batch] = vecs
        return out

    @staticmethod
    async def _run_all(runs: list[Coroutine[Any, Any, Matrix]]) -> list[Matrix]:
        """The batches' runs side by side (as many at once as the semaphore lets in)."""
        tasks = [asyncio.ensure_future(r) for r in runs]
        try:
            results = await asyncio.gather(*tasks)
        except BaseException:
            # one batch failed for good (or we were cancelled): stop its siblings too
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        return results

    async def _with_retries(self, texts: list[str]) -> Matrix:
        for attempt in range(self.retries + 1):
            started = time.perf_counter()
            try:
                vecs = await self.embedder.embed(texts)
            except EmbedderUnavailable as exc:
                if self.metrics is not None:
                    self.metrics.embed_batches.labels("failed").inc()
                if attempt >= self.retries:
                    raise
                delay = self.backoff_s * 2**attempt
                log.debug("embedder unavailable (%s); retry in %.1fs", exc, delay)
                await asyncio.sleep(delay)
                continue
            if vecs.shape[0] != len(texts):
                raise EmbedderUnavailable(
                    f"embedder returned {vecs.shape[0]} vectors for {len(texts)} texts"
                )
            if self.metrics is not None:
                self.metrics.embed_batches.labels("ok").inc()
                self.metrics.embed_texts.inc(len(texts))
                self.metrics.embed_seconds.observe(time.perf_counter() - started)
            return vecs
        raise AssertionError("unreachable")

    async def aclose(self) -> None:
        for task in list(self._ahead_tasks):
            task.cancel()
        await asyncio.gather(*self._ahead_tasks, return_exceptions=True)
        await self.embedder.aclose()
