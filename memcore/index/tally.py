"""What an indexing run counts as it goes (``Tally``, its report to be), and the chunking an
index is stamped with (``chunking_signature``): what every run, even one that changes
nothing, needs of indexing; the writing half (index/file_batches.py, index/prepare.py) loads
only for a run with files to write."""

from __future__ import annotations

from dataclasses import dataclass, field

from memcore.core.errors import EmbedderError
from memcore.core.models import FileFailure, FileState
from memcore.core.settings import IndexSettings
from memcore.embedders.base import EmbeddingRunner
from memcore.vault.chunker import CHUNKER_VERSION

CHUNKING_KEY = "chunking"  # meta key: the chunker version and settings the index was built with


def chunking_signature(ix: IndexSettings) -> str:
    """What decides the chunks of an unchanged file; an index built with another must re-chunk."""
    return (
        f"v{CHUNKER_VERSION} {ix.chunk_tokens}/{ix.overlap_tokens} x{ix.chars_per_token} {ix.split}"
    )


@dataclass(slots=True)
class Tally:
    """What one indexing run did so far; becomes its IndexReport."""

    indexed: list[str] = field(default_factory=list)
    unchanged: int = 0
    failed: list[FileFailure] = field(default_factory=list)
    embedded: int = 0
    reused: int = 0
    warnings: list[str] = field(default_factory=list)
    touched: list[FileState] = field(default_factory=list)
    embedder_down: bool = False
    embed: bool = True  # False: chunks without a cached vector stay pending (filled later)
    rebuild: bool = False  # re-chunk and rewrite even files whose content hash is unchanged

    @property
    def failed_transient(self) -> bool:
        return any(f.transient for f in self.failed)

    def without_embedder(self, reason: object) -> None:
        """The run goes on without the embedder: its chunks wait for vectors, and it says why."""
        self.embedder_down = True
        self.warnings.append(f"embedder unavailable, vectors pending: {reason}")


def embedder_down(tally: Tally, embedder: EmbeddingRunner, exc: EmbedderError) -> None:
    """The embedder failed during the run: the run goes on without it, and so do the next
    runs until it answers again (``EmbeddingRunner.mark_down``)."""
    tally.without_embedder(exc)
    embedder.mark_down(str(exc))
