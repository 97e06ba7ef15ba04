"""The SQLite store's vector graphs and their files: reading a model's vectors into a graph and
its float16 copies (``exact_vectors``), and comparing a graph's keys with the index's chunks.

Kept apart from store.py, which decides when a graph is loaded, built, swapped in and saved."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from memcore.core.vectors import Matrix, normalize_rows
from memcore.storage.exact_vectors import ExactWriter
from memcore.storage.sqlite.queries import SqliteReader

if TYPE_CHECKING:
    from memcore.storage.ann import AnnIndex

# Vectors read at a time: bounds a build's memory. Each batch is held ~6 times over while
# it is read, ordered, normalized, copied and added (~300 MB at 50,000 256-d vectors).
FETCH = 8_192


async def copy_vectors(
    reader: SqliteReader,
    ids: npt.NDArray[np.uint64],
    copies: Path,
    each: Callable[[npt.NDArray[np.uint64], Matrix], Awaitable[None]] | None = None,
    *,
    short_reads: bool = False,
) -> None:
    """Write the float16 copies of these chunks' vectors (``ids`` ascending) to ``copies``,
    FETCH at a time, handing each batch of unit vectors to ``each`` as well (a build adds them
    to its graph): the copies are streamed to the file, never all held. ``short_reads``: each
    batch in a read transaction of its own on the reader's connection (a build's connection,
    so that writes and WAL checkpoints go on meanwhile)."""
    writer: ExactWriter | None = None
    try:
        for i in range(0, len(ids), FETCH):
            if short_reads:
                await reader.conn.execute("BEGIN")
            got, mat = await reader.vectors_of(ids[i : i + FETCH])
            if short_reads:
                await reader.conn.execute("ROLLBACK")
            if not got:
                continue
            found = np.asarray(got, dtype=np.uint64)
            order = np.argsort(found, kind="stable")
            keys, unit = found[order], normalize_rows(mat[order])
            if writer is None:
                writer = ExactWriter(copies, unit.shape[1])
            await asyncio.to_thread(writer.write, keys, unit)
            if each is not None:
                await each(keys, unit)
        if writer is not None:
            await asyncio.to_thread(writer.finish)
    finally:
        if writer is not None:
            writer.abandon()


def differences(
    ids: npt.NDArray[np.uint64], graph: AnnIndex
) -> tuple[npt.NDArray[np.uint64], list[int]]:
    """The chunk ids missing from a saved graph, and its keys no longer chunks."""
    keys = graph.keys()
    missing = np.setdiff1d(ids, keys, assume_unique=True)
    return missing, np.setdiff1d(keys, ids, assume_unique=True).tolist()


def absent_from(ids: npt.NDArray[np.uint64], graph: AnnIndex) -> npt.NDArray[np.uint64]:
    """The chunk ids the graph does not hold alive."""
    return np.setdiff1d(ids, graph.alive_keys(), assume_unique=True)


def changes_to(
    graph: AnnIndex, ids: npt.NDArray[np.uint64], got: Sequence[int]
) -> tuple[npt.NDArray[np.bool_], list[int]]:
    """Which of the fetched vectors the graph still lacks, and which of its keys are gone.
    Its keys are read again: other tasks ran while the vectors were fetched."""
    alive = graph.alive_keys()
    fresh = ~np.isin(np.asarray(got, dtype=np.uint64), alive)
    return fresh, np.setdiff1d(alive, ids, assume_unique=True).tolist()
