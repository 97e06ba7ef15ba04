"""Float32 vector encoding and an in-memory cosine index that is updated incrementally. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
import numpy.typing as npt

Vector = npt.NDArray[np.float32]
Matrix = npt.NDArray[np.float32]


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


def top_k(scores: npt.NDArray[np.float32], k: int) -> npt.NDArray[np.intp]:
    """Indices of the k largest scores, best first."""
    if k <= 0 or scores.size == 0:
        return np.empty(0, dtype=np.intp)
    part = np.argpartition(-scores, k - 1)[:k] if k < scores.size else np.arange(scores.size)
    return part[np.argsort(-scores[part], kind="stable")]


class VectorIndex:
    """Unit vectors keyed by chunk id in one growable float32 matrix.

    Adds append (amortised O(1)); removals move the last row into the hole, so the matrix
    never needs rebuilding and a search is one matrix-vector product.
    """

    def __init__(self, dim: int | None = None) -> None:
        self._dim = dim
        self._mat: Matrix = np.zeros((0, dim or 0), dtype=np.float32)
        self._ids: npt.NDArray[np.int64] = np.zeros(0, dtype=np.int64)
        self._row: dict[int, int] = {}
        self._n = 0

    def __len__(self) -> int:
        return self._n

    def __contains__(self, chunk_id: int) -> bool:
        return chunk_id in self._row

    @property
    def dim(self) -> int | None:
        return self._dim

    def add(self, ids: Sequence[int], vectors: Matrix) -> None:
        """Insert or replace vectors (normalised here) for the given chunk ids."""
        if len(ids) == 0:
            return
        vecs = normalize_rows(vectors)
        if self._dim is None:
            self._dim = vecs.shape[1]
            self._mat = np.zeros((0, self._dim), dtype=np.float32)
        if vecs.shape[1] != self._dim:
            raise ValueError(f"vector has {vecs.shape[1]} dimensions, index has {self._dim}")
        self.remove(ids)
        need = self._n + len(ids)
        if need > self._mat.shape[0]:
            cap = max(need, 2 * self._mat.shape[0], 256)
            mat = np.zeros((cap, self._dim), dtype=np.float32)
            mat[: self._n] = self._mat[: self._n]
            idv = np.zeros(cap, dtype=np.int64)
            idv[: self._n] = self._ids[: self._n]
            self._mat, self._ids = mat, idv
        self._mat[self._n : need] = vecs
        self._ids[self._n : need] = ids
        for offset, chunk_id in enumerate(ids):
            self._row[int(chunk_id)] = self._n + offset
        self._n = need

    def remove(self, ids: Iterable[int]) -> None:
        for chunk_id in ids:
            row = self._row.pop(int(chunk_id), None)
            if row is None:
                continue
            last = self._n - 1
            if row != last:
                moved = int(self._ids[last])
                self._mat[row] = self._mat[last]
                self._ids[row] = moved
                self._row[moved] = row
            self._n = last

    def scores(self, query: Vector) -> npt.NDArray[np.float32]:
        q = normalize_rows(query)[0]
        result: npt.NDArray[np.float32] = self._mat[: self._n] @ q
        return result

    def search(
        self, query: Vector, k: int, allowed: set[int] | None = None
    ) -> list[tuple[int, float]]:
        """The k chunk ids with highest cosine to query, optionally only among allowed ids."""
        if self._n == 0 or self._dim is None:
            return []
        if query.shape[-1] != self._dim:
            raise ValueError(f"query has {query.shape[-1]} dimensions, index has {self._dim}")
        scores = self.scores(query)
        if allowed is not None:
            mask = np.isin(self._ids[: self._n], np.fromiter(allowed, dtype=np.int64))
            scores = np.where(mask, scores, -np.inf).astype(np.float32)
        best = top_k(scores, k)
        return [(int(self._ids[i]), float(scores[i])) for i in best if np.isfinite(scores[i])]

    def similarity(self, query: Vector, ids: Iterable[int]) -> dict[int, float]:
        """Cosine of query against the named chunks that have a vector."""
        rows = [(cid, self._row[cid]) for cid in ids if cid in self._row]
        if not rows:
            return {}
        q = normalize_rows(query)[0]
        sims = self._mat[[r for _, r in rows]] @ q
        return {cid: float(s) for (cid, _), s in zip(rows, sims, strict=True)}
