"""Copy an index from one store to another (SQLite -> PostgreSQL and back), vectors included.

Only the ports are used, so any pair of backends works. Files go over in batches, each batch
one write transaction on the target; a chunk keeps its vector when the target is told the model
that made it, so nothing is embedded again. Memories, their scopes and metadata come along
because the target derives them from the chunks, as every index does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from memcore.index.tally import CHUNKING_KEY
from memcore.storage.base import Store, StoredFile, Vector

BATCH = 200  # files a target transaction


@dataclass(frozen=True, slots=True)
class CopyReport:
    files: int
    chunks: int
    vectors: int
    skipped: int


async def copy_index(
    source: Store,
    target: Store,
    fallback_model: str,
    progress: Callable[[int, int], None] | None = None,
) -> CopyReport:
    """Copy every indexed file, skipped-file record and the chunking stamp of ``source`` into
    ``target`` (both open). Files already in the target are replaced; others there stay."""
    async with source.snapshot() as reader:
        paths = sorted(await reader.file_states())
        skipped = list((await reader.skipped_files()).values())
        chunking = await reader.get_meta(CHUNKING_KEY)
    files = chunks = vectors = 0
    for i in range(0, len(paths), BATCH):
        async with source.snapshot() as reader:
            stored = await reader.stored_files(paths[i : i + BATCH])
        async with target.transaction() as tx:
            for f in stored:
                model, kept = _vectors_of(f, fallback_model)
                await tx.replace_file(f.state, f.chunks, kept, model)
                files += 1
                chunks += len(f.chunks)
                vectors += sum(v is not None for v in kept)
        if progress:
            progress(min(i + BATCH, len(paths)), len(paths))
    async with target.transaction() as tx:
        await tx.set_skipped(skipped)
        if chunking is not None:
            await tx.set_meta(CHUNKING_KEY, chunking)
    return CopyReport(files, chunks, vectors, len(skipped))


def _vectors_of(f: StoredFile, fallback_model: str) -> tuple[str, list[Vector | None]]:
    """The file's model (the one most of its vectors come from) and its vectors of that
    model; a chunk with another model's vector goes over pending (rare: a half re-embedded
    file)."""
    counts = Counter(m for m in f.models if m is not None)
    model = counts.most_common(1)[0][0] if counts else fallback_model
    return model, [v if m == model else None for v, m in zip(f.vectors, f.models, strict=True)]
