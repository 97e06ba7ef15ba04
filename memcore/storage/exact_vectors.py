"""The exact vectors behind the int8 graph: float16 copies of a model's unit vectors, by chunk id.

The HNSW graph (ann.py) keeps each vector as int8, a quarter of float32: at 1M 256-d vectors it
builds in 198-246 s on two cores instead of 338 (float16) and holds ~250 MB less, but its
cosines are off by a few thousandths, enough to reorder close neighbours (recall@10 0.91 on its
own). So the graph only proposes candidates; their scores, a filter's exact scan and the cosine
of keyword hits come from these copies, in float16 as the graph held them before (recall@10
0.993 with the candidates re-scored and 1.5x as many looked at, against 0.987-0.997 for the
float16 graph alone, in the same time: bench/graph_quant.py).

Saved beside the graph as one file, memory-mapped on load: a 32-byte header (magic, count,
dimensions), the vectors (float16, one row a key, in key order), then the keys (uint64,
ascending). Vectors added since are held in memory until the next save. A chunk's vector of
one model never changes (ids are never reused), so any copy is right for every key it holds:
one saved before or after its graph, or by another process, serves as well; the caller reads
the keys a copy lacks from the database (``missing``).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from memcore.core.vectors import Matrix

MAGIC = b"MCEXACT1"
_HEADER = struct.Struct("<8sQQQ")  # magic, count, dimensions, reserved
_WRITE_ROWS = 65_536  # rows a save copies at a time


class ExactVectors:
    """float16 unit vectors by chunk id: saved ones memory-mapped, newer ones in memory."""

    def __init__(self, dim: int) -> None:
        self._dim = dim
        self._keys: npt.NDArray[np.uint64] = np.empty(0, dtype=np.uint64)
        self._rows: npt.NDArray[np.float16] = np.empty((0, dim), dtype=np.float16)
        self._fresh: dict[int, npt.NDArray[np.float16]] = {}
        self.path: Path | None = None  # the file the saved rows are mapped from

    @classmethod
    def open(cls, path: Path, dim: int) -> ExactVectors | None:
        """The copies saved at ``path``; None if there are none, or of another size."""
        out = cls(dim)
        try:
            with path.open("rb") as fh:
                magic, count, stored_dim, _ = _HEADER.unpack(fh.read(_HEADER.size))
                if magic != MAGIC or stored_dim != dim:
                    return None
                if path.stat().st_size != _HEADER.size + count * (dim * 2 + 8):
                    return None  # cut short (a full disk): not a copy to trust
            if count:
                out._rows = np.memmap(
                    path, dtype=np.float16, mode="r", offset=_HEADER.size, shape=(count, dim)
                )
                keys = np.memmap(
                    path, dtype="<u8", mode="r", offset=_HEADER.size + count * dim * 2,
                    shape=(count,),
                )  # fmt: skip
                out._keys = np.array(keys, dtype=np.uint64)  # 8 MB at 1M: searched each call
        except (OSError, ValueError, struct.error):
            return None
        out.path = path
        return out

    def __len__(self) -> int:
        return len(self._keys) + len(self._fresh)

    @property
    def unsaved(self) -> int:
        return len(self._fresh)

    def put(self, keys: Sequence[int], unit: Matrix) -> None:
        """Keep these unit vectors (rows of ``unit``) until the next save."""
        half = np.asarray(unit, dtype=np.float16)
        for n, key in enumerate(keys):
            self._fresh[int(key)] = half[n]

    def drop(self, keys: Iterable[int]) -> None:
        """Forget unsaved vectors of removed keys (saved ones go at the next save)."""
        if self._fresh:
            for key in keys:
                self._fresh.pop(int(key), None)

    def missing(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
        """Those of ``keys`` held nowhere here."""
        keys = np.asarray(keys, dtype=np.uint64)
        lacking = keys[self._saved_rows(keys) < 0]
        if self._fresh and len(lacking):  # only those the file lacks: not 1M dict lookups
            unsaved = np.fromiter((k in self._fresh for k in lacking.tolist()), bool, len(lacking))
            lacking = lacking[~unsaved]
        return lacking

    def get(self, keys: Sequence[int]) -> tuple[list[int], Matrix]:
        """(the keys held, their vectors as float32 rows), in the order asked."""
        arr = np.asarray(keys, dtype=np.uint64)
        rows = self._saved_rows(arr)
        out = np.zeros((len(arr), self._dim), dtype=np.float32)
        held = rows >= 0
        if held.any():
            out[held] = self._rows[rows[held]]
        if self._fresh:
            for n in np.flatnonzero(~held).tolist():
                found = self._fresh.get(int(arr[n]))
                if found is not None:
                    out[n], held[n] = found, True
        return arr[held].tolist(), out[held]

    def save(self, path: Path, alive: npt.NDArray[np.uint64]) -> None:
        """Write the copies of the ``alive`` keys (those held) to ``path`` atomically, and map
        them from there. Nothing to do when the saved file is that one and holds them all."""
        alive = np.asarray(alive, dtype=np.uint64)
        if self.path == path and not self._fresh and np.array_equal(self._keys, alive):
            return
        writer = ExactWriter(path, self._dim)
        try:
            old = self._saved_rows(alive)
            fresh = np.fromiter(self._fresh, dtype=np.uint64, count=len(self._fresh))
            fresh = fresh[np.isin(fresh, alive)]
            keys = np.concatenate([alive[old >= 0], fresh])
            order = np.argsort(keys, kind="stable")
            source = np.concatenate([old[old >= 0], -1 - np.arange(len(fresh))])
            fresh_rows = (
                np.stack([self._fresh[int(k)] for k in fresh.tolist()])
                if len(fresh)
                else np.empty((0, self._dim), dtype=np.float16)
            )
            for i in range(0, len(order), _WRITE_ROWS):
                part = source[order[i : i + _WRITE_ROWS]]
                block = np.empty((len(part), self._dim), dtype=np.float16)
                saved = part >= 0
                block[saved] = self._rows[part[saved]]
                block[~saved] = fresh_rows[-1 - part[~saved]]
                writer.write(keys[order[i : i + _WRITE_ROWS]], block)
            writer.finish()
        finally:
            writer.abandon()
        reopened = ExactVectors.open(path, self._dim)
        if reopened is not None:
            self._keys, self._rows, self.path = reopened._keys, reopened._rows, path
            self._fresh.clear()

    def _saved_rows(self, keys: npt.NDArray[np.uint64]) -> npt.NDArray[np.intp]:
        """Each key's row among the saved ones, -1 where it has none."""
        if not len(self._keys) or not len(keys):
            return np.full(len(keys), -1, dtype=np.intp)
        at = np.searchsorted(self._keys, keys)
        at[at >= len(self._keys)] = 0
        return np.where(self._keys[at] == keys, at, -1).astype(np.intp)


class ExactWriter:
    """Writes a file of copies from rows given in ascending key order (a graph build streams
    the vectors it reads into one, instead of holding them), renamed into place at the end."""

    def __init__(self, path: Path, dim: int) -> None:
        self._path = path
        self._dim = dim
        self._tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self._fh = self._tmp.open("wb")
        self._fh.write(_HEADER.pack(MAGIC, 0, dim, 0))
        self._keys: list[npt.NDArray[np.uint64]] = []
        self._last = -1

    def write(
        self, keys: Sequence[int] | npt.NDArray[np.uint64], unit: npt.NDArray[np.floating[Any]]
    ) -> None:
        arr = np.asarray(keys, dtype=np.uint64)
        if not len(arr):
            return
        if int(arr[0]) <= self._last or not bool(np.all(arr[1:] > arr[:-1])):
            raise ValueError("exact vectors must be written in ascending key order")
        self._last = int(arr[-1])
        self._fh.write(np.ascontiguousarray(unit, dtype=np.float16).tobytes())
        self._keys.append(arr)

    def finish(self) -> None:
        keys = np.concatenate(self._keys) if self._keys else np.empty(0, dtype=np.uint64)
        self._fh.write(keys.astype("<u8").tobytes())
        self._fh.seek(0)
        self._fh.write(_HEADER.pack(MAGIC, len(keys), self._dim, 0))
        self._fh.close()
        os.replace(self._tmp, self._path)

    def abandon(self) -> None:
        """Close and remove the partial file (nothing once ``finish`` renamed it)."""
        if not self._fh.closed:
            self._fh.close()
        self._tmp.unlink(missing_ok=True)
