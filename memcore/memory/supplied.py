"""Vectors a caller brings with a memory: a platform that embeds its texts with one model for
its whole stack gives memcore the vector instead of having memcore's model make another.

Where it lives: the Markdown is the truth for text, and a vector is not text a person should
read or edit, so the vector lives in the index, keyed like every vector memcore makes: by the
hash of the memory's chunk text and the index's model. It goes into the embedding cache before
the memory is written (so the index run that takes the new memory finds it there and never
runs the model for it) and into every chunk that already holds that text. A reindex keeps it,
as it keeps every vector whose text did not change. What changes it: a new vector for the same
text, a person editing the text (the new text is embedded by the model, as any edit is), or a
new model (the index is re-embedded). Deleting the index folder loses it, with the rest of
the index; the caller supplies it again.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import numpy as np

from memcore.core.errors import EmbedderUnavailable, InputError
from memcore.core.vectors import Vector
from memcore.vault.chunker import memory_embed_text
from memcore.vault.files import text_hash

if TYPE_CHECKING:
    from memcore.embedders.base import EmbeddingRunner
    from memcore.storage.base import Store

MAX_DIMENSION = 8192


def checked_vector(values: object, model: object = None) -> Vector:
    """A caller's vector as float32 of length 1 (cosine is what the index compares).
    ``model``, when given, names the model that made it. Raises InputError for a vector that
    is not a non-empty, finite, non-zero list of at most MAX_DIMENSION numbers."""
    if model is not None and (not isinstance(model, str) or not model.strip()):
        raise InputError("vector_model must be the name of the model that made the vector")
    if isinstance(values, np.ndarray):
        items: list[object] = values.reshape(-1).tolist()
    elif isinstance(values, list | tuple):
        items = list(values)
    else:
        raise InputError("vector must be a list of numbers")
    if not items or len(items) > MAX_DIMENSION:
        raise InputError(f"vector must hold 1-{MAX_DIMENSION} numbers (got {len(items)})")
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in items):
        raise InputError("vector must be a list of numbers")
    vec = np.asarray(items, dtype=np.float32)
    norm = float(np.linalg.norm(vec))
    if not np.isfinite(norm) or norm == 0:
        raise InputError("vector must be finite and not all zeros")
    out: Vector = vec / norm
    return out


def own_vector(values: object | None, model: object = None) -> Vector | None:
    """``checked_vector`` of a vector that may not be there (None: none); a model named
    without a vector is an InputError."""
    if values is None:
        if model is not None:
            raise InputError("vector_model names the model of a vector: give the vector too")
        return None
    return checked_vector(values, model)


def memory_hash(category: str, text: str) -> str:
    """The content hash the chunker gives the chunk of a memory holding ``text``."""
    return text_hash(memory_embed_text(category, text))


async def supply(
    store: Store,
    embedder: EmbeddingRunner,
    items: Iterable[tuple[str, str, Vector, str | None]],
) -> None:
    """Store (category, text, vector, model or None) for the index's model, after checking
    each vector's model and size against it. Raises InputError for a mismatch (naming both)
    and EmbedderUnavailable when the index's vector size cannot be known yet."""
    vectors: dict[str, Vector] = {}
    for category, text, vector, model in items:
        if model is not None and model not in (embedder.model_id, embedder.embedder.model_id):
            raise InputError(
                f"vector_model {model!r} is not the index's model {embedder.model_id!r}: "
                "a vector of another model cannot be compared with the index's"
            )
        vectors[memory_hash(category, text)] = vector
    if not vectors:
        return
    expected = await embedder.dimension()
    if expected is None:
        raise EmbedderUnavailable(
            f"cannot check the vector's size: {embedder.model_id} is down "
            f"({embedder.down_reason or 'no vector made yet'}); try again"
        )
    for vector in vectors.values():
        if len(vector) != expected:
            raise InputError(
                f"vector has {len(vector)} dimensions; the index's model "
                f"{embedder.model_id} makes vectors of {expected}"
            )
    async with store.transaction() as tx:
        await tx.supply_vectors(vectors, embedder.model_id)
