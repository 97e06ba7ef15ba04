"""Approximate nearest neighbours for big vaults: an HNSW graph (usearch) of int8 unit vectors
whose candidates are scored with float16 copies (exact_vectors.py).

``AnnIndex`` answers the same questions as ``VectorIndex`` (search, similarity, versioned
snapshots) where an exact scan gets too slow: at a million 256-dimension vectors the exact
matrix product alone takes ~60 ms and the float32 matrix 1 GB; the graph answers in about a
millisecond from half the memory. Keys are chunk ids. Versioning mirrors ``VectorIndex``: a key
removed by a write stays in the graph, marked dead at that generation, until no open snapshot
can see it; a key added by a write is born at its generation. A snapshot's search therefore asks
the graph for enough extra neighbours to cover the keys hidden from it, and filters them out.

A filter that leaves few chunks is answered exactly over those chunks; a wider one asks the graph
for proportionally more neighbours and falls back to the exact answer if they run short, so a
filter never lets through a chunk it excludes. ``save``/``load`` keep the graph next to the
index, so a restart loads it in well under a second instead of rebuilding it for minutes.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

# onnxruntime (the local embedder's runtime) must be loaded before usearch 2.26: imported after
# it, onnxruntime's import segfaults (usearch 2.26.6, onnxruntime 1.x, measured here).
import onnxruntime  # noqa: F401
from usearch.index import Index

from memcore.core.vectors import Matrix, Vector, cosines, locked, normalize_rows, top_k
from memcore.storage.exact_vectors import ExactVectors

# Graph degree and build effort. At 1M 256-d vectors (bench/graph_quant.py, two cores, ef 3072,
# 266 candidates re-scored): degree 16 with effort 128 built in 156 s for recall@10 0.9875;
# degree 24 with effort 80 in 100-103 s for 0.9905-0.992, searched 5% faster, at ~64 B more a
# vector (~450 B int8). Effort 64 lost recall at either degree (0.959 / 0.980), 96 bought none.
# At 119k chunks (bench/search.py --sizes 100000 --embedder static, three builds each) recall
# against exact was 0.986-0.9955 against 0.9965-0.997, gold hit@10 0.855 in every build.
CONNECTIVITY = 24
EXPANSION_ADD = 80
# Candidates a search looks at, doubling every time the graph doubles past 300k. Measured for
# the float16 graph this replaced, recall@10 against exact with real questions: 0.986 at 119k
# (512; 256 gives 0.968), and at 1.19M 0.932 with 512, 0.972 with 1024, 0.989 with 2048
# (bench/search.py). The int8 graph looks at 1.5x as many for the same recall and time: at 1M
# 256-d vectors (bench/graph_quant.py, three builds) 0.984-0.988 with 2048 and 0.993 with 3072
# in 5.4 ms, against the float16 graph's 0.987-0.997 with 2048 in 5.8 ms.
EXPANSION_SEARCH = 768
EXPANSION_STEP = 300_000
EXACT_BELOW = 20_000  # a filter leaving fewer chunks than this is searched exactly
MAX_ASK = 8192  # neighbours asked of the graph at most; beyond, exact search is cheaper


def over(n: int) -> int:
    """How many candidates of the int8 graph to re-score for a top ``n``: its order is a few
    thousandths off, so a neighbour just past the n-th may belong in."""
    return n + n // 4 + 16


def exact_path(graph: Path) -> Path:
    """Where the float16 copies of a graph's vectors are saved: beside it."""
    return graph.with_suffix(".vec")


class AnnIndex:
    """Unit vectors keyed by chunk id in an HNSW graph, versioned by generation."""

    def __init__(self, dim: int, generation: int = 0, *, threads: int = 0) -> None:
        self._dim = dim
        self._threads = threads
        self._graph = Index(
            ndim=dim,
            metric="cos",
            dtype="i8",
            connectivity=CONNECTIVITY,
            expansion_add=EXPANSION_ADD,
            expansion_search=EXPANSION_SEARCH,
        )
        self._born: dict[int, int] = {}  # keys born after the floor: generation
        self._dead: dict[int, int] = {}  # keys removed, kept for older snapshots: generation
        self.generation = generation
        self.floor = generation
        self.changes = 0  # keys added or dropped since the last save or load
        self._lock = threading.RLock()
        self._mapped: tuple[Path, tuple[int, int, int]] | None = None  # served from this file
        self.exact = ExactVectors(dim)  # what candidates are scored with

    @classmethod
    def load(cls, path: Path, dim: int, generation: int) -> AnnIndex | None:
        """The graph saved at ``path`` (None if missing, unreadable or of another size), as
        the state at ``generation``: the caller reconciles its keys with the database.

        The file is memory-mapped, so searches start at once (0.1 s at 1.19M chunks where
        reading the 790 MB file took 1.4-3.2 s) and touch only the pages they visit; it is
        read into memory before the first change (a mapped graph is read-only)."""
        try:
            stamp = _stamp(path)
            graph = Index.restore(str(path), view=True)
        except (OSError, RuntimeError, ValueError):
            return None
        if graph is None or graph.ndim != dim:
            return None
        index = cls(dim, generation)
        index._graph = graph
        index._mapped = (path, stamp)
        index.exact = ExactVectors.open(exact_path(path), dim) or ExactVectors(dim)
        return index

    @property
    def mapped(self) -> bool:
        return self._mapped is not None

    @locked
    def unmap(self) -> None:
        """Read a memory-mapped graph into memory: what a writer calls, in a worker thread,
        before its first change, which would otherwise do it on the event loop applying a
        commit. It holds the lock throughout: usearch blocks a search of a graph being copied
        (``_read_in``'s fallback), GIL held. Searches wait on the lock instead, in their worker
        threads, and the loop's compaction skips a busy graph (``compact_soon``)."""
        self._writable()

    def _writable(self) -> None:
        """Read a memory-mapped graph into memory (under the lock, before a change)."""
        if self._mapped is not None:
            self._graph, self._mapped = _read_in(self._mapped, self._graph), None

    def compact_soon(self, oldest_reader: int | None = None) -> None:
        """``compact``, unless another thread holds the graph (reading it in, or searching):
        the event loop calls this as each snapshot closes, so a later call does it."""
        if self._lock.acquire(blocking=False):
            try:
                self.compact(oldest_reader)
            finally:
                self._lock.release()

    @locked
    def save(self, path: Path) -> None:
        """Write the graph (all live and not yet compacted keys) atomically, after the copies
        of its vectors (either file is right for the keys it holds, whichever is newer)."""
        self.exact.save(exact_path(path), np.sort(self.keys()))
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            self._graph.save(str(tmp))
            os.replace(tmp, path)
        finally:
            tmp.unlink(missing_ok=True)
        self.changes = 0

    def __len__(self) -> int:
        return len(self._graph) - len(self._dead)

    def __contains__(self, chunk_id: int) -> bool:
        return chunk_id not in self._dead and self._has(chunk_id)

    @property
    def dim(self) -> int:
        return self._dim

    @locked
    def keys(self) -> npt.NDArray[np.uint64]:
        """Every key in the graph, dead ones included."""
        return np.asarray(self._graph.keys, dtype=np.uint64)

    @locked
    def alive_keys(self) -> npt.NDArray[np.uint64]:
        """The keys the newest state sees, ascending."""
        keys = np.sort(self.keys())
        if self._dead:
            keys = keys[~np.isin(keys, np.fromiter(self._dead, dtype=np.uint64))]
        return keys

    def serves(self, generation: int) -> bool:
        return self.floor <= generation <= self.generation

    @locked
    def add(self, ids: Sequence[int], vectors: Matrix, *, copied: bool = False) -> None:
        """Insert vectors at the current generation (visible to every snapshot it serves).
        ``copied``: their float16 copies are being written elsewhere (a build streams them to
        a file, ``ExactWriter``), not to be kept in memory."""
        self.remove(ids)
        self._insert(ids, vectors, self.generation, keep=not copied)

    @locked
    def remove(self, ids: Iterable[int]) -> None:
        """Drop keys at once (no snapshot keeps seeing them)."""
        keys = np.asarray(list(ids), dtype=np.uint64)
        if not len(keys):
            return
        present = keys[self._contains(keys)]
        if self._dead or self._born:
            for k in keys.tolist():
                self._dead.pop(k, None)
                self._born.pop(k, None)
        self.exact.drop(keys.tolist())
        if len(present):
            self._writable()
            self._graph.remove(present)
            self.changes += len(present)

    @locked
    def apply(
        self,
        generation: int,
        removed: Iterable[int],
        added_ids: Sequence[int] = (),
        added: Matrix | None = None,
    ) -> None:
        """Advance to ``generation`` as ``VectorIndex.apply`` does. A chunk's vector of one
        model never changes (ids are never reused), so a key both removed and added stays."""
        if generation <= self.generation:
            raise ValueError(f"generation {generation} is not after {self.generation}")
        readded = {int(k) for k in added_ids}
        for key in (int(k) for k in removed):
            if key not in readded and key not in self._dead and self._has(key):
                self._dead[key] = generation
        self.generation = generation
        if added is None or not len(added_ids):
            return
        fresh = [n for n, k in enumerate(added_ids) if not self._has(int(k))]
        for key in readded:
            self._dead.pop(key, None)  # back before anyone compacted it: the same vector
        if fresh:
            self._insert([int(added_ids[n]) for n in fresh], added[fresh], generation)

    @locked
    def compact(self, oldest_reader: int | None = None) -> None:
        """Physically drop keys dead at or before ``oldest_reader`` (default: now)."""
        cutoff = self.generation if oldest_reader is None else min(oldest_reader, self.generation)
        self.floor = max(self.floor, cutoff)
        gone = [k for k, g in self._dead.items() if g <= cutoff]
        if gone:
            for k in gone:
                del self._dead[k]
            self._writable()
            self._graph.remove(np.asarray(gone, dtype=np.uint64))
            self.exact.drop(gone)
            self.changes += len(gone)
        self._born = {k: g for k, g in self._born.items() if g > cutoff}

    @locked
    def search(
        self,
        query: Vector,
        k: int,
        allowed: set[int] | None = None,
        generation: int | None = None,
    ) -> list[tuple[int, float]]:
        """The k keys nearest to query (cosine, best first) among ``allowed``, as the
        snapshot at ``generation`` sees them. Approximate unless a filter leaves few chunks."""
        if k <= 0 or len(self._graph) == 0:
            return []
        if query.shape[-1] != self._dim:
            raise ValueError(f"query has {query.shape[-1]} dimensions, index has {self._dim}")
        hidden = self._hidden(generation)
        q = normalize_rows(query)[0]
        if allowed is not None and len(allowed) < EXACT_BELOW:
            return self._exact(q, k, [c for c in allowed if c not in hidden])
        share = 1.0 if allowed is None else len(allowed) / len(self._graph)
        want = over(k)
        ask = math.ceil((want + len(hidden)) / max(share, 1e-9) * (1.0 if allowed is None else 2))
        if ask <= MAX_ASK:
            found = self._ask(q, ask, hidden, allowed)
            if len(found) >= want or ask >= len(self._graph):
                return self._rescored(q, found[:want])[:k]
        if allowed is None:
            found = self._ask(q, want + len(hidden), hidden, None, exact=True)
            return self._rescored(q, found[:want])[:k]
        return self._exact(q, k, [c for c in allowed if c not in hidden])

    @locked
    def similarity(
        self, query: Vector, ids: Iterable[int], generation: int | None = None
    ) -> dict[int, float]:
        """Cosine of query against the named keys that this snapshot sees."""
        hidden = self._hidden(generation)
        wanted = [int(c) for c in ids if int(c) not in hidden]
        keys, mat = self._vectors(wanted)
        if not keys:
            return {}
        sims = cosines(mat, normalize_rows(query)[0])
        return {k: float(s) for k, s in zip(keys, sims, strict=True)}

    # ---- internals ----------------------------------------------------------------------------

    def _has(self, key: int) -> bool:
        return bool(self._graph.contains(key))

    def _contains(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.bool_]:
        return np.asarray(self._graph.contains(keys), dtype=bool).reshape(len(keys))

    def _insert(self, ids: Sequence[int], vectors: Matrix, born: int, keep: bool = True) -> None:
        if not len(ids):
            return
        vecs = normalize_rows(vectors)
        if vecs.shape[1] != self._dim:
            raise ValueError(f"vector has {vecs.shape[1]} dimensions, index has {self._dim}")
        self._writable()
        if keep:
            self.exact.put(ids, vecs)
        # In a random order: chunks in id order run through a file's neighbouring paragraphs,
        # and a graph built from them in that order on one thread found 0.968 of the exact
        # top 10 at 119k chunks, against 0.993 shuffled (and 0.985 on two threads in order).
        order = np.random.default_rng(len(ids)).permutation(len(ids))
        keys = np.asarray(ids, dtype=np.uint64)[order]
        self._graph.add(keys, vecs[order], threads=self._threads)
        self.changes += len(ids)
        if born > self.floor:
            self._born.update((int(k), born) for k in ids)

    def _hidden(self, generation: int | None) -> set[int]:
        """Keys in the graph that a snapshot at ``generation`` must not see."""
        if generation is None or generation >= self.generation:
            return set(self._dead)
        if not self.serves(generation):
            raise ValueError(
                f"generation {generation} is not served ({self.floor}..{self.generation})"
            )
        hidden = {k for k, g in self._dead.items() if g <= generation}
        hidden.update(k for k, g in self._born.items() if g > generation)
        return hidden

    def _ask(
        self,
        q: Vector,
        count: int,
        hidden: set[int],
        allowed: set[int] | None,
        *,
        exact: bool = False,
    ) -> list[tuple[int, float]]:
        count = min(count, len(self._graph))
        want = max(count, expansion_for(len(self._graph)))
        if self._graph.expansion_search != want:
            _set_expansion(self._graph, want)
        found = self._graph.search(q, count, threads=1, exact=exact)
        return [
            (int(key), 1.0 - float(dist))
            for key, dist in zip(found.keys, found.distances, strict=True)
            if int(key) not in hidden and (allowed is None or int(key) in allowed)
        ]

    def _vectors(self, keys: Sequence[int]) -> tuple[list[int], Matrix]:
        """The unit vectors of those keys that are in the graph: their float16 copies (the
        graph's own int8 ones only for a key with none, which the store never leaves)."""
        arr = np.asarray(keys, dtype=np.uint64)
        arr = arr[self._contains(arr)] if len(arr) else arr
        if not len(arr):
            return [], np.zeros((0, self._dim), dtype=np.float32)
        present, mat = self.exact.get(arr.tolist())
        if len(present) == len(arr):
            return present, mat
        lacking = np.setdiff1d(arr, np.asarray(present, dtype=np.uint64))
        got = self._graph.get(lacking, dtype="f32")
        rows = [r for r in (got if isinstance(got, tuple) else (got,)) if r is not None]
        approx = normalize_rows(np.stack(rows).reshape(len(lacking), -1))
        return present + lacking.tolist(), np.concatenate([mat, approx])

    def _rescored(self, q: Vector, found: list[tuple[int, float]]) -> list[tuple[int, float]]:
        """The graph's candidates scored with their float16 copies, best first."""
        present, mat = self._vectors([key for key, _ in found])
        if not present:
            return []
        scores = cosines(mat, q)
        return [(present[i], float(scores[i])) for i in top_k(scores, len(present))]

    def _exact(self, q: Vector, k: int, keys: Sequence[int]) -> list[tuple[int, float]]:
        present, mat = self._vectors(keys)
        if not present:
            return []
        scores = cosines(mat, q)
        return [(present[i], float(scores[i])) for i in top_k(scores, k)]


def _read_in(mapped: tuple[Path, tuple[int, int, int]], view: Index) -> Index:
    """A memory-mapped graph read into memory: from its file when that is still the one mapped,
    else (another process saved a new one since) copied from the mapping in use.

    Measured at 1.19M chunks (bench/first_write.py, 790 MB): whichever thread runs it, the
    event loop pauses 0.8-1.7 s, as usearch keeps the GIL while loading. Copying the mapping
    paused it 1.2-3.2 s; loading from a second mapping 0.5-1.1 s, but peaked 750 MB higher."""
    path, stamp = mapped
    try:
        if _stamp(path) == stamp:
            graph = Index.restore(str(path))
            if graph is not None:
                return graph
    except (OSError, RuntimeError, ValueError):
        pass
    return view.copy()


def _stamp(path: Path) -> tuple[int, int, int]:
    """Which file is at path: (inode, size, mtime); a save replaces it with another inode."""
    st = path.stat()
    return st.st_ino, st.st_size, st.st_mtime_ns


def expansion_for(size: int) -> int:
    """How many candidates a search of a graph this big looks at (see EXPANSION_SEARCH)."""
    doublings = max(0, math.ceil(math.log2(max(size, 1) / EXPANSION_STEP)))
    return int(EXPANSION_SEARCH * 2 ** min(doublings, 3))


def _set_expansion(graph: Index, value: int) -> None:
    # usearch declares the setter apart from its property, which mypy reads as read-only
    graph.expansion_search = value  # type: ignore[misc]
