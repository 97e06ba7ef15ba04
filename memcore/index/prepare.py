"""Turning changed memory files into chunk rows: read, hash, chunk, attach vectors."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt

from memcore.core.errors import EmbedderError, VaultError
from memcore.core.models import Chunk, DiskFile, FileFailure, FileState
from memcore.core.settings import IndexSettings
from memcore.embedders.base import EmbeddingRunner
from memcore.index.tails import Appendable, appendable, appended_chunks
from memcore.index.tally import Tally
from memcore.storage.base import ChunkTail, IndexReader, Store
from memcore.vault.chunker import ChunkerConfig, chunk_markdown
from memcore.vault.files import content_hash, read_memory_file


@dataclass(frozen=True, slots=True)
class StoredVersion:
    """A memory file as this process last wrote it to the index: the version (content hash),
    its chunks, and whether every one of them held a vector of ``model_id`` then."""

    content_hash: str
    chunks: Sequence[Chunk]
    model_id: str
    embedded: bool


@dataclass(slots=True)
class PreparedFile:
    """A file's new state and chunks (and, once attached, their vectors).

    ``stored``: the version the index holds, when this process wrote it (every chunk with a
    vector), and ``unchanged`` how many leading chunks it shares with it (the very objects:
    a memory file's parse hands out the same chunk for a memory that did not change or move).
    Those are neither looked up nor re-read: an add to a file of a thousand memories deals
    with the one it adds. ``embedded``: every chunk holds a vector once written."""

    state: FileState
    chunks: Sequence[Chunk]
    vectors: list[npt.NDArray[np.float32] | None] = field(default_factory=list)
    stored: StoredVersion | None = None
    unchanged: int = 0
    embedded: bool = False
    # read as an append to this version (``chunks`` a ChunkTail from ``unchanged`` on)
    base: Appendable | None = None
    appendable: Appendable | None = None  # what this version is, for the next append

    def take_stored(self, stored: StoredVersion) -> None:
        """Build on ``stored``, the version the index holds (the caller checked)."""
        same = 0
        for old, new in zip(stored.chunks, self.chunks, strict=False):
            if old is not new:
                break
            same += 1
        self.stored, self.unchanged = stored, same


def prepare_file(
    vault_dir: Path,
    ix: IndexSettings,
    chunker: ChunkerConfig,
    f: DiskFile,
    state: FileState | None,
    tally: Tally,
    base: Appendable | None = None,
) -> PreparedFile | None:
    """Read, hash and chunk one file (blocking: run it in a worker thread). None when the file
    is unchanged (recorded in ``tally.touched``) or unreadable (``tally.failed``). ``base``:
    the version the index holds, when an append to it can be read by its new lines."""
    try:
        text, data = read_memory_file(vault_dir, f.path, ix.max_file_bytes)
    except VaultError as exc:
        tally.failed.append(FileFailure(f.path, str(exc)))
        return None
    new_state = FileState(f.path, content_hash(data), f.size, f.mtime_ns)
    if not tally.rebuild and state is not None and state.content_hash == new_state.content_hash:
        tally.unchanged += 1
        tally.touched.append(new_state)
        return None
    mdate = dt.datetime.fromtimestamp(f.mtime_ns / 1e9, dt.UTC).date().isoformat()
    added = appended_chunks(text, data, f.path, base, mdate) if base is not None else None
    if base is not None and added is not None:
        item = PreparedFile(new_state, ChunkTail(base.count, added), unchanged=base.count)
        item.base = base
    else:
        chunks, warnings = chunk_markdown(text, f.path, chunker, fallback_date=mdate)
        tally.warnings.extend(f"{f.path}: {w}" for w in warnings)
        item, added = PreparedFile(new_state, chunks), chunks
    item.appendable = appendable(text, added, new_state.content_hash, len(data))
    return item


def prepare_files(
    vault_dir: Path,
    ix: IndexSettings,
    chunker: ChunkerConfig,
    files: Sequence[DiskFile],
    states: Mapping[str, FileState],
    tally: Tally,
    bases: Mapping[str, Appendable] | None = None,
) -> list[PreparedFile]:
    """prepare_file for a batch (blocking: one worker-thread hop for the whole batch)."""
    out = []
    for f in files:
        base = bases.get(f.path) if bases else None
        item = prepare_file(vault_dir, ix, chunker, f, states.get(f.path), tally, base)
        if item is not None:
            out.append(item)
    return out


async def embed_missing(
    store: Store, embedder: EmbeddingRunner, texts: Mapping[str, str], tally: Tally
) -> dict[str, npt.NDArray[np.float32]]:
    """Embed texts (by content hash) and add them to the vector cache. Raises EmbedderError."""
    if not texts:
        return {}
    fresh = await _embedded(embedder, texts, tally)
    async with store.transaction() as tx:
        await tx.cache_vectors(fresh, embedder.model_id)
    return fresh


async def _embedded(
    embedder: EmbeddingRunner, texts: Mapping[str, str], tally: Tally
) -> dict[str, npt.NDArray[np.float32]]:
    """Vectors of texts by content hash, counted in the tally. Raises EmbedderError."""
    vecs = await embedder.embed(list(texts.values()))
    tally.embedded += len(texts)
    return dict(zip(texts, vecs, strict=True))


@dataclass(frozen=True, slots=True)
class KnownVectors:
    """What the index already has for prepared chunks: (file, hash) pairs whose row keeps its
    vector, and cached vectors by content hash."""

    kept: set[tuple[str, str]]
    cached: dict[str, npt.NDArray[np.float32]]
    looked_up: list[str]  # hashes of the chunks not kept by their row (the cache was asked)


async def known_vectors(
    reader: IndexReader, model_id: str, prepared: Sequence[PreparedFile]
) -> KnownVectors:
    """The vectors the index holds for these chunks (read in the caller's snapshot)."""
    # chunks the file already holds with a vector stay as they are (see replace_file); of a
    # version written here, the index holds every chunk with one (an append adds new ones)
    unknown = [p.state.path for p in prepared if p.stored is None and p.base is None]
    kept = await reader.embedded_hashes(unknown, model_id) if unknown else set()
    for p in prepared:
        if p.stored is not None:
            kept |= {(p.state.path, c.content_hash) for c in p.stored.chunks[p.unchanged :]}
    hashes = [
        c.content_hash for p in prepared for c in p.chunks[p.unchanged :]
        if (p.state.path, c.content_hash) not in kept
    ]  # fmt: skip
    return KnownVectors(kept, await reader.cached_vectors(hashes, model_id), hashes)


async def attach_vectors(
    embedder: EmbeddingRunner, prepared: list[PreparedFile], known: KnownVectors, tally: Tally
) -> tuple[EmbedderError | None, dict[str, npt.NDArray[np.float32]]]:
    """Give every chunk its known vector, embedding the rest unless the embedder is down.
    Chunks left without one stay pending. Returns the embedder's error (not raised) and the
    vectors made now, by content hash, for the caller to cache in the transaction that writes
    their file."""
    cached = dict(known.cached)
    total = sum(len(p.chunks) for p in prepared)
    tally.reused += total - len(known.looked_up) + sum(1 for h in known.looked_up if h in cached)
    missing: dict[str, str] = {}
    for p in prepared:
        for c in p.chunks[p.unchanged :]:
            if c.content_hash not in cached and (p.state.path, c.content_hash) not in known.kept:
                missing.setdefault(c.content_hash, c.embed_text)
    error: EmbedderError | None = None
    fresh: dict[str, npt.NDArray[np.float32]] = {}
    if missing and tally.embed and not tally.embedder_down:
        try:
            fresh = await _embedded(embedder, missing, tally)
        except EmbedderError as exc:
            error = exc
        cached |= fresh
    for p in prepared:
        path, start = p.state.path, p.unchanged
        vectors: list[npt.NDArray[np.float32] | None] = [None] * start
        p.vectors = vectors + [cached.get(c.content_hash) for c in p.chunks[start:]]
        p.embedded = all(
            v is not None or (path, c.content_hash) in known.kept
            for c, v in zip(p.chunks[start:], p.vectors[start:], strict=True)
        )
    return error, fresh
