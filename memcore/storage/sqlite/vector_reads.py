"""A snapshot's vector reads: the vector half of a search (scored in memory, in the matrix or
graph the store keeps for the snapshot's generation), the vectors a load or a graph reads,
and the chunks still waiting for one."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from memcore.core.models import SearchFilters
from memcore.core.vectors import VectorIndex, decode_vector
from memcore.storage.base import PendingChunk, Vector, scan
from memcore.storage.sqlite.file_rows import BATCH, marks
from memcore.storage.sqlite.snapshot import Snapshot, pending_count

if TYPE_CHECKING:  # usearch loads only for a vault that needs the graph
    from memcore.storage.ann import AnnIndex

_LOAD_BATCH = 4096  # rows per fetch when loading the vector matrix
_FETCH_IDS = 65536

# Pending = no vector, or a vector from another model. embedding and embedding_model are
# always NULL together, so the embedding_model index answers this without reading the
# rows (a scan over rows carrying 1.5 KB vectors took 238 ms at 100k chunks; this, 0.03 ms).
_PENDING = "(embedding_model IS NULL OR embedding_model < ? OR embedding_model > ?)"


def embedded_hashes_sql(paths: int) -> str:
    """The chunk hashes of some files holding a vector of one model. The ``+`` keeps the
    planner off the embedding_model index, which it picked without statistics: every chunk of
    the model read, 1.5 s a write at 1.19M chunks, instead of the files' few by source_file."""
    return (
        "SELECT source_file, content_hash FROM memory_chunks WHERE +embedding_model = ? "
        f"AND source_file IN ({marks(paths)})"
    )


class VectorReads(Snapshot):
    """What a snapshot reads of vectors (the rest of SqliteReader is in sqlite/queries.py)."""

    async def search_vectors(
        self, vector: Vector, model_id: str, k: int, filters: SearchFilters
    ) -> list[tuple[int, float]]:
        allowed = await self._filtered_ids(filters)
        index = await self._vectors(model_id)
        return await scan(index, index.search, vector, k, allowed, self.generation)

    async def vectors_ready(self, model_id: str) -> None:
        await self._vectors(model_id)

    async def vector_similarity(
        self, vector: Vector, model_id: str, ids: Sequence[int]
    ) -> dict[int, float]:
        index = await self._vectors(model_id)
        return await scan(index, index.similarity, vector, ids, self.generation)

    async def _vectors(self, model_id: str) -> VectorIndex | AnnIndex:
        """The store's vectors of ``model_id`` for this snapshot (loaded on first use)."""
        return await self._store.vectors_at(self.conn, await self.begun(), model_id)

    async def has_vectors(self, model_id: str) -> bool:
        sql = "SELECT 1 FROM memory_chunks WHERE embedding_model = ? LIMIT 1"
        return bool(await self._all(sql, (model_id,)))

    async def vector_ids(self, model_id: str) -> npt.NDArray[np.uint64]:
        """Ids of the chunks holding a vector of this model, ascending (from the index alone)."""
        sql = "SELECT id FROM memory_chunks WHERE embedding_model = ? ORDER BY id"
        out: list[npt.NDArray[np.uint64]] = []  # not one list of 1M Python ints (36 MB)
        await self.begun()  # a cursor's fetches are hand-offs of their own
        async with self.conn.execute(sql, (model_id,)) as cur:
            while rows := list(await cur.fetchmany(_FETCH_IDS)):
                out.append(np.fromiter((r[0] for r in rows), dtype=np.uint64, count=len(rows)))
        return np.concatenate(out) if out else np.empty(0, dtype=np.uint64)

    async def release_cache(self) -> None:
        """Give back the pages this snapshot's connection keeps cached (``vector_ids`` reads a
        whole index through it: ~35 MB at 1M chunks, held for nothing by a batch job's build
        that reads the vectors on a connection of its own)."""
        await self._all("PRAGMA shrink_memory")

    async def vectors_of(self, ids: npt.NDArray[np.uint64]) -> tuple[list[int], Vector]:
        """(ids found, their vectors as one float32 matrix) of the named chunks."""
        got: list[int] = []
        blobs: list[bytes] = []
        for i in range(0, len(ids), BATCH):
            part = ids[i : i + BATCH].tolist()
            sql = (
                "SELECT id, embedding FROM memory_chunks WHERE embedding IS NOT NULL "
                f"AND id IN ({marks(len(part))})"
            )
            for r in await self._all(sql, part):
                got.append(r[0])
                blobs.append(r[1])
        if not got:
            return [], np.zeros((0, 0), dtype=np.float32)
        flat = np.frombuffer(b"".join(blobs), dtype="<f4").astype(np.float32, copy=False)
        return got, flat.reshape(len(got), -1)

    async def vector_batches(
        self, model_id: str, size: int
    ) -> AsyncIterator[tuple[list[int], Vector]]:
        """Every vector of this model, ``size`` at a time: (ids, float32 matrix)."""
        sql = "SELECT id, embedding FROM memory_chunks WHERE embedding_model = ?"
        await self.begun()
        async with self.conn.execute(sql, (model_id,)) as cur:
            while rows := list(await cur.fetchmany(size)):
                flat = np.frombuffer(b"".join(r[1] for r in rows), dtype="<f4")
                yield [r[0] for r in rows], flat.astype(np.float32).reshape(len(rows), -1)

    async def load_vectors(self, model_id: str, count: int) -> VectorIndex:
        """Every vector of this model in this snapshot (``count`` of them), as a fresh matrix
        at its generation. Read in batches into a matrix sized once: peak memory is the matrix
        and one batch, not every row's bytes as well."""
        index = VectorIndex(generation=self.generation)
        async for ids, mat in self.vector_batches(model_id, _LOAD_BATCH):
            index.reserve(count, mat.shape[1])
            index.add(ids, mat)
        return index

    async def cached_vectors(self, hashes: Sequence[str], model_id: str) -> dict[str, Vector]:
        out: dict[str, Vector] = {}
        unique = list(dict.fromkeys(hashes))
        for i in range(0, len(unique), BATCH):
            part = unique[i : i + BATCH]
            rows = await self._all(
                f"SELECT content_hash, embedding FROM embedding_cache "
                f"WHERE model = ? AND content_hash IN ({marks(len(part))})",
                [model_id, *part],
            )
            out.update({h: decode_vector(b) for h, b in rows})
            held = [h for h in part if h not in out]  # a chunk's row holds the rest
            if held:
                rows = await self._all(  # "+": by the hashes' index, never by the model's
                    "SELECT content_hash, embedding FROM memory_chunks WHERE "
                    f"content_hash IN ({marks(len(held))}) AND +embedding_model = ? "
                    "AND embedding IS NOT NULL",
                    [*held, model_id],
                )
                out.update({h: decode_vector(b) for h, b in rows})
        return out

    async def pending_chunks(self, model_id: str, limit: int) -> list[PendingChunk]:
        rows = await self._all(
            f"SELECT id, content_hash, heading_path, content FROM memory_chunks "
            f"WHERE {_PENDING} LIMIT ?",
            (model_id, model_id, limit),
        )
        return [PendingChunk(r[0], r[1], f"{r[2]}\n{r[3]}" if r[2] else r[3]) for r in rows]

    async def count_pending(self, model_id: str) -> int:
        # Every search asks; one snapshot generation always has the same answer (and the
        # start of a snapshot at a newer one counts for the model asked last: see _begun_with).
        memo = self._store.pending_memo
        key = (await self.begun(), model_id)
        if key not in memo:
            count = await self._on_thread(pending_count, model_id)
            memo.clear()  # only the newest generation is asked for again
            memo[key] = count
        return memo[key]

    async def embedded_hashes(self, paths: Sequence[str], model_id: str) -> set[tuple[str, str]]:
        out: set[tuple[str, str]] = set()
        for i in range(0, len(paths), BATCH):
            part = list(paths[i : i + BATCH])
            rows = await self._all(embedded_hashes_sql(len(part)), [model_id, *part])
            out.update((r[0], r[1]) for r in rows)
        return out
