"""Float32 vector encoding and an in-memory cosine index that is updated incrementally. Pure."""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Concatenate, ParamSpec, Protocol, TypeVar

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]
Matrix = npt.NDArray[np.float32]
# a vector as a caller gives it: numbers in a list, or an array
VectorLike = Sequence[float] | npt.NDArray[np.floating[Any]]
T = TypeVar("T", bound=np.generic)


def encode_vector(vec: Vector) -> bytes:
    """Little-endian float32 bytes, the on-disk form of an embedding."""
    return np.ascontiguousarray(vec, dtype="<f4").tobytes()


def decode_vector(blob: bytes) -> Vector:
    return np.frombuffer(blob, dtype="<f4").astype(np.float32, copy=False)


def normalize_rows(mat: npt.ArrayLike) -> Matrix:
    """Rows scaled to unit length (zero rows stay zero), as float32."""
    arr = np.asarray(mat, dtype=np.float32)
    if arr.ndim == 1:
        arr = arr[None, :]
    norms = np.linalg.norm(arr, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    out: Matrix = (arr / norms).astype(np.float32, copy=False)
    return out


def cosines(mat: Matrix, q: Vector) -> npt.NDArray[np.float32]:
    """Each row of ``mat`` dotted with ``q`` (cosines, for unit rows), on the calling thread.

    Not ``mat @ q``: that is BLAS's gemv, which OpenBLAS splits over one thread per core whose
    workers then spin, waiting for more work, for a while after each call. A server scanning
    once a search kept them spinning: past ~1,000 vectors one of them took 70% of a core of
    two, and 12 clients' search p99 in the last 20 s of a 60 s run was 118-139 ms, against
    76-87 without BLAS's threads (bench/http_api.py). ``vecdot`` is one short dot product a
    row, on this thread with the GIL released: 1.7k x 384 in ~50 us (gemv on one thread ~40,
    einsum ~100), 16k in ~0.6 ms (gemv ~1.0 on one thread, ~0.5 on two spinning ones). A row's
    cosine does not depend on the rows around it, so a chunk's vector score is the same in a
    full scan and in ``similarity``."""
    out: npt.NDArray[np.float32] = np.vecdot(mat, q)
    return out


def top_k(scores: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.intp]:
    """Indices of the k largest scores, best first."""
    if k <= 0 or scores.size == 0:
        return np.empty(0, dtype=np.intp)
    part = np.argpartition(-scores, k - 1)[:k] if k < scores.size else np.arange(scores.size)
    return part[np.argsort(-scores[part], kind="stable")]


_ALIVE = np.iinfo(np.int64).max
FEW_ALLOWED = 8  # a filter allowing under 1/8 of the rows scores only those
P = ParamSpec("P")
R = TypeVar("R")


class _Locked(Protocol):
    _lock: threading.RLock


L = TypeVar("L", bound=_Locked)


def locked(method: Callable[Concatenate[L, P], R]) -> Callable[Concatenate[L, P], R]:
    """Run the method holding the index's lock: a search may run in a worker thread (the
    scan releases the GIL, so the event loop and SQLite's thread carry on meanwhile) while the
    loop applies a commit; neither ever sees the other half done."""

    @functools.wraps(method)
    def run(self: L, *args: P.args, **kwargs: P.kwargs) -> R:
        with self._lock:
            return method(self, *args, **kwargs)

    return run  # type: ignore[return-value]  # mypy reads wraps' result as another type


class VectorIndex:
    """Unit vectors keyed by chunk id in one growable float32 matrix, versioned.

    Each row remembers the generation it was added at and the one it was removed at, so a
    reader holding an older snapshot of the database keeps seeing exactly that snapshot's
    vectors while newer ones are applied (``apply``). ``compact`` drops rows that no open
    snapshot can see any more. Rows are moved, never copied wholesale: adds append (amortised
    O(1)), a physical removal moves the last row into the hole, and a search is one
    matrix-vector product.
    """

    def __init__(self, dim: int | None = None, generation: int = 0) -> None:
        self._dim = dim
        self._mat: Matrix = np.zeros((0, dim or 0), dtype=np.float32)
        self._ids: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._born: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._dead: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._row: dict[int, int] = {}  # live chunk id -> row
        self._n = 0
        self._dead_rows = 0
        self.generation = generation  # the newest state applied
        self.floor = generation  # the oldest state it can still answer for
        self._lock = threading.RLock()

    def __len__(self) -> int:
        return len(self._row)

    def __contains__(self, chunk_id: int) -> bool:
        return chunk_id in self._row

    @locked
    def live_ids(self) -> npt.NDArray[np.int64]:
        """The ids of the newest state, ascending."""
        return np.sort(np.fromiter(self._row, dtype=np.int64, count=len(self._row)))

    @property
    def cells(self) -> int:
        """Stored rows times dimensions: what a scan multiplies."""
        return self._n * (self._dim or 0)

    @property
    def dim(self) -> int | None:
        return self._dim

    def serves(self, generation: int) -> bool:
        """Whether a snapshot at this generation can be answered exactly."""
        return self.floor <= generation <= self.generation

    @locked
    def reserve(self, rows: int, dim: int) -> None:
        """Make room for ``rows`` vectors up front, so loading them never copies the matrix."""
        if self._dim is None:
            self._dim = dim
            self._mat = np.zeros((0, dim), dtype=np.float32)
        if rows > self._mat.shape[0]:
            self._mat = _grow(self._mat, self._n, (rows, self._dim))
            self._ids = _grow(self._ids, self._n, (rows,))
            self._born = _grow(self._born, self._n, (rows,))
            self._dead = _grow(self._dead, self._n, (rows,))

    @locked
    def add(self, ids: Sequence[int], vectors: Matrix) -> None:
        """Insert or replace vectors (normalised here) at the current generation."""
        self.remove(ids)
        self._append(ids, vectors, self.generation)

    @locked
    def remove(self, ids: Iterable[int]) -> None:
        """Drop chunk ids at once (no snapshot keeps seeing them)."""
        for chunk_id in ids:
            row = self._row.pop(int(chunk_id), None)
            if row is not None:
                self._drop_row(row)

    @locked
    def apply(
        self,
        generation: int,
        removed: Iterable[int],
        added_ids: Sequence[int] = (),
        added: Matrix | None = None,
    ) -> None:
        """Advance to ``generation``: ``removed`` (and replaced) ids die there, ``added`` are
        born there. Snapshots at earlier generations still see the previous state."""
        if generation <= self.generation:
            raise ValueError(f"generation {generation} is not after {self.generation}")
        for chunk_id in [*removed, *added_ids]:
            row = self._row.pop(int(chunk_id), None)
            if row is not None:
                self._dead[row] = generation
                self._dead_rows += 1
        self.generation = generation
        if len(added_ids) and added is not None:
            self._append(added_ids, added, generation)

    @locked
    def compact(self, oldest_reader: int | None = None) -> None:
        """Physically drop rows dead at or before ``oldest_reader`` (default: the current
        generation, when no reader is open); snapshots older than that are no longer served."""
        cutoff = self.generation if oldest_reader is None else min(oldest_reader, self.generation)
        self.floor = max(self.floor, cutoff)
        if not self._dead_rows:
            return
        rows = np.flatnonzero(self._dead[: self._n] <= cutoff)
        for row in rows[::-1]:  # from the end, so moved rows are never ones still to drop
            self._drop_row(int(row))
            self._dead_rows -= 1

    def _drop_row(self, row: int) -> None:
        last = self._n - 1
        if row != last:
            self._mat[row] = self._mat[last]
            self._ids[row] = self._ids[last]
            self._born[row] = self._born[last]
            self._dead[row] = self._dead[last]
            if self._dead[row] == _ALIVE:
                self._row[int(self._ids[row])] = row
        self._n = last

    def _append(self, ids: Sequence[int], vectors: Matrix, born: int) -> None:
        if len(ids) == 0:
            return
        vecs = normalize_rows(vectors)
        if self._dim is None:
            self._dim = vecs.shape[1]
            self._mat = np.zeros((0, self._dim), dtype=np.float32)
        if vecs.shape[1] != self._dim:
            raise ValueError(f"vector has {vecs.shape[1]} dimensions, index has {self._dim}")
        need = self._n + len(ids)
        if need > self._mat.shape[0]:
            self.reserve(max(need, 2 * self._mat.shape[0], 256), self._dim)
        self._mat[self._n : need] = vecs
        self._ids[self._n : need] = ids
        self._born[self._n : need] = born
        self._dead[self._n : need] = _ALIVE
        for offset, chunk_id in enumerate(ids):
            self._row[int(chunk_id)] = self._n + offset
        self._n = need

    def _visible(self, generation: int | None) -> npt.NDArray[np.bool_] | None:
        """Row mask for a snapshot (None when every stored row is visible to it)."""
        if generation is None or (generation >= self.generation and not self._dead_rows):
            return None
        if not self.serves(generation):
            raise ValueError(
                f"generation {generation} is not served ({self.floor}..{self.generation})"
            )
        n = self._n
        mask: npt.NDArray[np.bool_] = (self._born[:n] <= generation) & (self._dead[:n] > generation)
        return mask

    def scores(self, query: Vector) -> npt.NDArray[np.float32]:
        q = normalize_rows(query)[0]
        return cosines(self._mat[: self._n], q)

    @locked
    def search(
        self,
        query: Vector,
        k: int,
        allowed: set[int] | None = None,
        generation: int | None = None,
    ) -> list[tuple[int, float]]:
        """The k chunk ids with highest cosine to query, optionally only among allowed ids,
        as a snapshot at ``generation`` sees them (default: the newest state)."""
        if self._n == 0 or self._dim is None:
            return []
        if query.shape[-1] != self._dim:
            raise ValueError(f"query has {query.shape[-1]} dimensions, index has {self._dim}")
        mask = self._visible(generation)
        if allowed is not None and mask is None and len(allowed) * FEW_ALLOWED < self._n:
            # a scope's few rows (a user's among a fleet's): score those, not every row
            rows = np.fromiter(
                (r for c in allowed if (r := self._row.get(c)) is not None), dtype=np.intp
            )
            part = cosines(self._mat[rows], normalize_rows(query)[0])
            best = top_k(part, k)
            return list(zip(self._ids[rows[best]].tolist(), part[best].tolist(), strict=True))
        scores = self.scores(query)
        if allowed is not None:
            keep = np.isin(self._ids[: self._n], np.fromiter(allowed, dtype=np.int64))
            mask = keep if mask is None else mask & keep
        if mask is not None:
            scores = np.where(mask, scores, -np.inf).astype(np.float32)
        best = top_k(scores, k)
        found = scores[best]
        ok = np.isfinite(found)  # (whole arrays: a numpy scalar a result cost ~2 us)
        return list(zip(self._ids[best][ok].tolist(), found[ok].tolist(), strict=True))

    @locked
    def similarity(
        self, query: Vector, ids: Iterable[int], generation: int | None = None
    ) -> dict[int, float]:
        """Cosine of query against the named chunks that have a vector (in that snapshot)."""
        wanted = list(ids)
        if not wanted or self._n == 0:
            return {}
        mask = self._visible(generation)
        if mask is None:
            rows = [self._row[cid] for cid in wanted if cid in self._row]
        else:
            mask &= np.isin(self._ids[: self._n], np.asarray(wanted, dtype=np.int64))
            rows = np.flatnonzero(mask).tolist()
        if not rows:
            return {}
        q = normalize_rows(query)[0]
        sims = cosines(self._mat[rows], q)
        return dict(zip(self._ids[rows].tolist(), sims.tolist(), strict=True))


def _grow(arr: npt.NDArray[T], used: int, shape: tuple[int, ...]) -> npt.NDArray[T]:
    out = np.zeros(shape, dtype=arr.dtype)
    out[:used] = arr[:used]
    return out
