"""The storage ports: what the service needs from an index, in the domain's words.

A ``Store`` hands out read snapshots and write transactions. A reader sees one consistent
state of the index for as long as it is open (many may be open at once); a writer is one short
transaction (one at a time, never spanning an embedder call). Nearest-neighbour and keyword
search happen inside the adapter, so a database that can do them itself (pgvector) does.
Every failure of the backend surfaces as a ``StorageError`` with a one-line message.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from types import TracebackType
from typing import Protocol, Self, TypeVar, overload

import numpy as np
import numpy.typing as npt

from memcore.core import segmenter
from memcore.core.lru import LRU
from memcore.core.models import (
    Chunk,
    Entity,
    FileState,
    MemoryQuery,
    MemoryRecord,
    SearchFilters,
    SkippedFile,
)
from memcore.core.nodes import NodeCard, NodeInfo
from memcore.core.own_words import NO_WORDS, Words
from memcore.core.tokenize import cuts_quickly, query_terms
from memcore.core.vectors import VectorIndex

Vector = npt.NDArray[np.float32]
A = TypeVar("A")
B = TypeVar("B")
R = TypeVar("R")


async def both(first: Awaitable[A], second: Awaitable[B]) -> tuple[A, B]:
    """Two reads at once; the first starts before the second takes the event loop. Two
    queries of one snapshot queue on its connection back to back: one wait for the loop, not
    two. An error in either propagates as itself (no ExceptionGroup), the other one
    cancelled."""
    task = asyncio.ensure_future(first)
    try:
        await asyncio.sleep(0)  # let the first hand its query to the database
        other = await second
        return await task, other
    finally:
        await settled(task)  # also when both failed: the first's error is seen


# A matrix up to this many cells (rows x dimensions: 16k vectors of 384) is scanned on the
# event loop, in under a millisecond (vectors.cosines); under load a hop to a worker thread and
# back costs several. A bigger one, and an HNSW graph, is searched in a worker: the scan
# releases the GIL, so the keyword query started beside it keeps going (Searcher.candidates).
INLINE_SCAN_CELLS = 16_384 * 384


async def scan(index: object, fn: Callable[..., R], *args: object) -> R:
    """``fn`` (a vector index's search or similarity, with ``args``) here when the index is a
    small exact matrix, else in a worker thread."""
    if isinstance(index, VectorIndex) and index.cells <= INLINE_SCAN_CELLS:
        return fn(*args)
    return await asyncio.to_thread(fn, *args)


# The terms of recent queries: a search asks for them twice (its keyword list, then the words
# its best keyword hit holds), and cutting a Chinese query takes ~0.1 ms each time.
_TERMS: LRU[tuple[str, int, bool], tuple[Words, tuple[str, ...]]] = LRU(1024)
_TERMS_LOCK = threading.Lock()  # one memo for every event loop of the process
_KEPT_QUERY_CHARS = 1024  # a pasted page is not kept


async def search_terms(query: str, own: Words = NO_WORDS) -> list[str]:
    """The query's search terms (``own``: the vault's own words); loading jieba (the first
    Chinese query: about a second) is never on the event loop. A query's terms are kept for
    the next ask with the same words, the same way of cutting (jieba's whole dictionary
    loaded or not)."""
    key = (query, id(own), segmenter.loaded())
    with _TERMS_LOCK:
        kept = _TERMS.get(key)
    if kept is not None and kept[0] is own:
        return list(kept[1])
    if cuts_quickly(query):
        terms = query_terms(query, own)
    else:
        terms = await asyncio.to_thread(query_terms, query, own)
    if len(query) <= _KEPT_QUERY_CHARS:
        with _TERMS_LOCK:
            _TERMS.put(key, (own, tuple(terms)))
    return terms


async def settled(task: asyncio.Future[A]) -> None:
    """Wait for a read this caller started and no longer needs (cancelled if it still runs),
    its error seen, never left unread: the caller raised it already, or had no use for it."""
    if not task.done():
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """A stored chunk as search results need it."""

    chunk_id: int
    path: str
    start_line: int
    end_line: int
    heading: str
    text: str
    date: str | None
    tags: tuple[str, ...]
    metadata: Mapping[str, object] = field(default_factory=dict)  # the file's front matter


@dataclass(frozen=True, slots=True)
class PendingChunk:
    """A chunk whose vector is missing or from another model; embed_text is what to embed."""

    chunk_id: int
    content_hash: str
    embed_text: str


@dataclass(frozen=True, slots=True)
class StoredFile:
    """A file as the index holds it, with each chunk's vector and the model that made it:
    enough to copy an index to another backend without reading the vault or embedding."""

    state: FileState
    chunks: tuple[Chunk, ...]
    vectors: tuple[Vector | None, ...]
    models: tuple[str | None, ...]


@dataclass(frozen=True, slots=True)
class FileRows:
    """One file's new chunks for ``IndexWriter.replace_files`` (see ``replace_file``). With
    ``chunks`` a ``ChunkTail`` (an append), the file is written only if it is stored as
    ``stored_hash`` with exactly ``unchanged`` rows; otherwise it is left for the caller to
    read again (``replace_files`` names it)."""

    state: FileState
    chunks: Sequence[Chunk]
    vectors: Sequence[Vector | None]
    unchanged: int = 0
    stored_hash: str | None = None

    @property
    def appended(self) -> bool:
        return isinstance(self.chunks, ChunkTail)


class ChunkTail(Sequence[Chunk]):
    """A file's chunks from number ``head`` on, the ones an append added: the first ``head``
    are stored already and not known here. Asking for one of those (or going through them
    all) is an error, not an empty answer."""

    __slots__ = ("head", "tail")

    def __init__(self, head: int, tail: Sequence[Chunk]) -> None:
        self.head = head
        self.tail = tail

    def __len__(self) -> int:
        return self.head + len(self.tail)

    @overload
    def __getitem__(self, at: int) -> Chunk: ...

    @overload
    def __getitem__(self, at: slice) -> Sequence[Chunk]: ...

    def __getitem__(self, at: int | slice) -> Chunk | Sequence[Chunk]:
        if isinstance(at, slice):
            start, stop, step = at.indices(len(self))
            if step != 1 or (start < self.head and start < stop):
                raise LookupError(f"chunks before {self.head} are not here")
            return self.tail[max(start - self.head, 0) : max(stop - self.head, 0)]
        n = at + len(self) if at < 0 else at
        if not self.head <= n < len(self):
            raise LookupError(f"chunk {at} is not here (the tail starts at {self.head})")
        return self.tail[n - self.head]

    def __iter__(self) -> Iterator[Chunk]:
        raise LookupError(f"chunks before {self.head} are not here")


@dataclass(frozen=True, slots=True)
class StoreStats:
    files: int
    chunks: int
    vectors_pending: int
    other_models: Mapping[str, int]
    db_bytes: int
    last_indexed: str | None


class IndexReader(Protocol):
    """One consistent snapshot of the index: every call sees the same committed state, the
    one its first query (or ``begun``) found, as in a database's own transactions."""

    @property
    def generation(self) -> int:
        """Which committed state: every write transaction moves it on. Known once the
        snapshot has started (see ``begun``)."""
        ...

    async def begun(self) -> int:
        """The snapshot's generation. A backend may start a snapshot with its first query (one
        hand-off for both, not two); this starts it now unless a query already did (or is)."""
        ...

    async def file_states(self, paths: Sequence[str] | None = None) -> dict[str, FileState]:
        """What the index knows of every file, or only of ``paths`` (those it holds)."""
        ...

    async def search_text(
        self,
        query: str,
        k: int,
        filters: SearchFilters,
        vector: tuple[Vector, str] | None = None,
    ) -> list[tuple[int, float]]:
        """Keyword search for the words of ``query`` (any text; nothing in it is syntax).
        (chunk id, score) best first, higher is better; [] when the query has no words.
        ``vector`` (the query's vector and model): the search's ``vector_similarity`` of the
        hits will be asked for next, and a reader that reads the hits' rows anyway may note
        their cosine as it goes."""
        ...

    async def keyword_coverage(self, query: str, ids: Sequence[int]) -> dict[int, float]:
        """For each named chunk, the share of the query's words, weighed by their IDF, that it
        holds (``tokenize.coverage``): 1.0 with every word, 0.0 with none (or for a chunk the
        index does not hold); {} when the query has no words. The IDF is over the whole index,
        or over the scope when this snapshot's keyword search ranked a small scope on its
        own (as that ranking weighed the words)."""
        ...

    async def search_vectors(
        self, vector: Vector, model_id: str, k: int, filters: SearchFilters
    ) -> list[tuple[int, float]]:
        """The ``k`` chunks of this model nearest to ``vector``: (chunk id, cosine), best first."""
        ...

    async def newest_matching(
        self, filters: SearchFilters, limit: int, offset: int = 0
    ) -> list[int]:
        """Ids of the chunks the filters let through, newest first (undated last)."""
        ...

    async def vector_similarity(
        self, vector: Vector, model_id: str, ids: Sequence[int]
    ) -> dict[int, float]:
        """Cosine of ``vector`` to the named chunks that have a vector of this model."""
        ...

    async def has_vectors(self, model_id: str) -> bool: ...

    async def vectors_ready(self, model_id: str) -> None:
        """Have this snapshot's vectors of ``model_id`` at hand for ``search_vectors`` (a
        first search loads them while its query is embedded; nothing to do where the
        database scores vectors itself)."""
        ...

    async def holds_chinese(self) -> bool | None:
        """Whether any chunk holds a Chinese word (None: this index cannot tell cheaply).
        A process that will index or search only such text loads jieba's whole dictionary."""
        ...

    async def chunk_rows(self, ids: Sequence[int]) -> dict[int, ChunkRow]: ...

    async def cached_vectors(self, hashes: Sequence[str], model_id: str) -> dict[str, Vector]:
        """Cached embeddings by (content hash, model)."""
        ...

    async def pending_chunks(self, model_id: str, limit: int) -> list[PendingChunk]: ...

    async def count_pending(self, model_id: str) -> int: ...

    async def stats(self, model_id: str) -> StoreStats: ...

    async def skipped_files(self) -> dict[str, SkippedFile]:
        """Files that could not be indexed, by path."""
        ...

    async def memory_copies(self) -> dict[str, list[str]]:
        """Memory ids found in more than one file: id -> the paths of the copies (the home,
        the smallest path, is the memory's ``path``)."""
        ...

    async def embedded_hashes(self, paths: Sequence[str], model_id: str) -> set[tuple[str, str]]:
        """(path, content hash) of chunks of these files that hold a vector of ``model_id``:
        replace_file keeps those rows and their vectors, so nobody needs to look them up."""
        ...

    async def memories(self, query: MemoryQuery) -> list[MemoryRecord]:
        """Memories matching a query, oldest first (ties in file order). Raises InputError for a
        bad filter."""
        ...

    async def count_memories(self, query: MemoryQuery) -> int: ...

    async def entities(self) -> list[Entity]:
        """Every user, agent and run that holds a memory, with how many (turns included),
        ordered by kind then name."""
        ...

    async def memories_of_chunks(self, ids: Sequence[int]) -> dict[int, MemoryRecord]:
        """The memory each of these chunks holds (chunks of plain notes are left out)."""
        ...

    async def hit_rows(
        self, ids: Sequence[int]
    ) -> tuple[dict[int, ChunkRow], dict[int, MemoryRecord]]:
        """``chunk_rows`` and ``memories_of_chunks`` of the same chunks, together: what a
        search shows of its hits (a backend may fetch both in one hand-off)."""
        ...

    async def memory_texts(self, path: str) -> dict[str, str]:
        """Id -> text of the memories one file holds (what a diff of its memories needs,
        without reading their every field)."""
        ...

    async def get_meta(self, key: str) -> str | None: ...

    async def stored_files(self, paths: Sequence[str]) -> list[StoredFile]:
        """These files as stored (chunks in order, vectors included); unknown paths are left
        out."""
        ...


class IndexWriter(Protocol):
    """One write transaction: everything done through it commits together or not at all."""

    async def file_state(self, path: str) -> FileState | None: ...

    async def replace_file(
        self,
        state: FileState,
        chunks: Sequence[Chunk],
        vectors: Sequence[Vector | None],
        model_id: str,
        unchanged: int = 0,
        stored_hash: str | None = None,
    ) -> list[int]:
        """Replace a file's chunks; the chunk ids in order. A chunk whose text the file
        already held keeps its row and vector; for the others ``None`` = vector pending.

        ``unchanged``: the first chunks are stored exactly as given (the caller wrote them
        when the file was ``stored_hash``): their rows are left as they are, unread, so an
        append to a file of a thousand memories reads and compares only what follows. Taken
        only if the file is stored as ``stored_hash`` with rows for those chunks (checked in
        the transaction); otherwise the whole file is compared as usual."""
        ...

    async def replace_files(self, files: Sequence[FileRows], model_id: str) -> list[str]:
        """``replace_file`` of each of several files (a batch of small files in one go). The
        appends (``FileRows.appended``) whose file is not stored as they claim are left
        unwritten: their paths are returned, for the caller to read whole."""
        ...

    async def touch_file(self, state: FileState) -> None:
        """Record a new size/mtime for a file whose content did not change."""
        ...

    async def set_skipped(self, files: Sequence[SkippedFile]) -> None:
        """Record files that could not be indexed (their indexed chunks, if any, stay). A
        later replace_file, touch_file or delete_files of the path clears the record."""
        ...

    async def delete_files(self, paths: Sequence[str]) -> int:
        """Remove files and their chunks; returns how many chunks went."""
        ...

    async def set_vectors(self, vectors: Sequence[tuple[int, str, Vector]], model_id: str) -> int:
        """Store (chunk id, content hash, vector) for chunks that still hold that content;
        returns how many were updated (a chunk replaced meanwhile is left alone)."""
        ...

    async def cache_vectors(self, vectors: Mapping[str, Vector], model_id: str) -> None: ...

    async def supply_vectors(self, vectors: Mapping[str, Vector], model_id: str) -> int:
        """A caller's vectors (by content hash) for this model: kept in the embedding cache,
        where every later index run finds them before running the model, and given now to
        each chunk that holds that text; returns how many chunks took one."""
        ...

    async def set_meta(self, key: str, value: str) -> None: ...


class NodeRoles(Protocol):
    """The roles one node of a shared index holds alone: the watcher with its catch-up,
    expiry archiving and the forgetting loop. They are held through the database every node
    shares, so a node that dies (kill -9, a lost network) loses them within seconds and any
    other node can take them over. Raises nothing: a database it cannot reach is a False."""

    async def take(self) -> bool:
        """Hold the roles unless a live node does; True when this node holds them now."""
        ...

    async def beat(self) -> bool:
        """Tell the others this node is alive. True while it still holds what it took;
        False once it may not (the database cannot be reached: another node may take over,
        so this one must stop acting on the roles)."""
        ...

    async def give_up(self) -> None:
        """Let another node take the roles (on a clean stop, or after ``beat`` said False)."""
        ...

    async def aclose(self) -> None:
        """Give up the roles and leave the list of nodes."""
        ...


class Store(Protocol):
    """An index database. Constructing does no I/O; open it with ``async with``."""

    backend: str
    retokenized: int  # chunks tokenized again at open: the vault's own words had changed
    # Its keyword query takes the query's vector (it scores its hits' cosines in the same
    # round trip): a search then has the vector made before it starts.
    keywords_take_vector: bool

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    def snapshot(self, writing: bool = False) -> AbstractAsyncContextManager[IndexReader]:
        """A read snapshot; many may be open at once, writers never block them. Its state is
        the one its first query finds (``IndexReader.begun`` fixes it sooner). ``writing``:
        a read a write makes (what the index holds of the files it replaces, and the rows it
        confirms): served on a connection kept for writes' reads, so that a write never waits
        behind the searches queued for a reader (one at a time; another write's read meanwhile
        takes a reader as searches do)."""
        ...

    def transaction(self) -> AbstractAsyncContextManager[IndexWriter]:
        """The one write transaction; commits on clean exit, rolls back on an exception."""
        ...

    def bulk(self, expected: int = 0) -> AbstractAsyncContextManager[None]:
        """Many write transactions follow (a batch add, a whole vault; ``expected``: about how
        many chunks, 0 if not known): what the backend can build once after them instead of
        row by row, it builds when the outermost ``bulk`` ends (PostgreSQL: vector indexes
        small next to the load, and the planner's statistics). Writes and reads inside are as
        outside, only slower to search; a no-op where nothing is worth deferring."""
        ...

    def node_roles(self, card: NodeCard) -> NodeRoles | None:
        """The node roles of this index, shared with every process that opens it, for the
        node ``card`` names; None where the index is this machine's own (SQLite: the vault's
        lock file decides, and a second watcher is refused)."""
        ...

    async def nodes(self) -> list[NodeInfo]:
        """The live nodes of this index (empty where it is not shared)."""
        ...

    def holding(self, paths: Sequence[str]) -> AbstractAsyncContextManager[None]:
        """Hold vault files for a read-change-replace, against every process that shares
        this index on any machine (PostgreSQL: advisory locks; SQLite: nothing more than the
        file's own flock, which processes on one machine share). Raises StorageBusy after
        ``storage.busy_timeout_s``."""
        ...

    @property
    def location(self) -> str:
        """Where the index lives, for people (a file path or a URL without its password)."""
        ...

    @property
    def engine(self) -> str:
        """The database software and its version, for people ("SQLite 3.45.1",
        "PostgreSQL 16.2, pgvector 0.6.2"); known once the store is open."""
        ...

    async def prepare_vectors(
        self, model_id: str, started: Callable[[int], None] | None = None, *, here: bool = True
    ) -> int:
        """Make the model's vectors quick to load at the next start, before returning (a
        batch job's last step); ``started(n)`` is called if that means building over n
        vectors. ``here=False``: a build in this process's memory is not done but owed:
        returns over how many vectors (0 when nothing is owed), for a fresh process to
        build (``memcore prepare-search``) once the batch's process has ended."""
        ...
