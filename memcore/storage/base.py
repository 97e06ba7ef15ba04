"""The Store port: what the service needs from an index database, nothing more."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Protocol, Self

import numpy as np
import numpy.typing as npt

from memcore.models import Chunk, FileState, SearchFilters


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


@dataclass(frozen=True, slots=True)
class PendingChunk:
    """A chunk whose vector is missing or from another model; embed_text is what to embed."""

    chunk_id: int
    content_hash: str
    embed_text: str


@dataclass(frozen=True, slots=True)
class StoreStats:
    files: int
    chunks: int
    vectors_pending: int
    other_models: Mapping[str, int]
    db_bytes: int
    last_indexed: str | None


class Store(Protocol):
    """An index database. All methods are coroutines; each write is one transaction."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def file_states(self) -> dict[str, FileState]: ...

    async def replace_file(
        self,
        state: FileState,
        chunks: Sequence[Chunk],
        fts_texts: Sequence[str],
        vectors: Sequence[npt.NDArray[np.float32] | None],
        model_id: str,
    ) -> list[int]:
        """Atomically replace a file's chunks; returns the new chunk ids in chunk order."""
        ...

    async def touch_file(self, state: FileState) -> None:
        """Record a new size/mtime for a file whose content did not change."""
        ...

    async def chunk_ids_of(self, paths: Sequence[str]) -> list[int]: ...

    async def delete_files(self, paths: Sequence[str]) -> list[int]:
        """Remove files and their chunks; returns the removed chunk ids."""
        ...

    async def cached_vectors(
        self, hashes: Sequence[str], model_id: str
    ) -> dict[str, npt.NDArray[np.float32]]: ...

    async def cache_vectors(
        self, vectors: Mapping[str, npt.NDArray[np.float32]], model_id: str
    ) -> None: ...

    async def load_vectors(
        self, model_id: str
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.float32]]:
        """Every chunk vector of this model: ids and an (n, dim) matrix."""
        ...

    async def pending_chunks(self, model_id: str, limit: int) -> list[PendingChunk]: ...

    async def count_pending(self, model_id: str) -> int: ...

    async def set_vectors(
        self, vectors: Mapping[int, npt.NDArray[np.float32]], model_id: str
    ) -> list[int]:
        """Store vectors for chunks that still exist; returns the ids that were updated."""
        ...

    async def keyword_search(
        self, match: str, limit: int, filters: SearchFilters
    ) -> list[tuple[int, float]]:
        """(chunk id, BM25 score, higher is better) for a safe MATCH expression."""
        ...

    async def filtered_ids(self, filters: SearchFilters) -> set[int]: ...

    async def chunk_rows(self, ids: Sequence[int]) -> dict[int, ChunkRow]: ...

    async def stats(self, model_id: str) -> StoreStats: ...

    async def get_meta(self, key: str) -> str | None: ...

    async def set_meta(self, key: str, value: str) -> None: ...
