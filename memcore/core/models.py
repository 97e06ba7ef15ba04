"""Frozen value types shared by every layer: chunks, file states, hits and reports."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, TypedDict

from memcore.core.words import plural

SearchMode = Literal["hybrid", "vector", "keyword"]
Tier = Literal["core", "decaying"]


SCOPE_KEYS = ("user_id", "agent_id", "run_id", "app_id")


class ScopeIds(TypedDict):
    """A scope as keyword arguments: ``memories.get_all(**ids)``."""

    user_id: str | None
    agent_id: str | None
    run_id: str | None
    app_id: str | None


def scope_ids(values: Mapping[str, str | None]) -> ScopeIds:
    """The scope keys of ``values`` (missing ones None)."""
    return ScopeIds(
        user_id=values.get("user_id"), agent_id=values.get("agent_id"),
        run_id=values.get("run_id"), app_id=values.get("app_id"),
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Caller:
    """Who makes a call, as every front hands it to the service: ``identity`` names the
    caller for idempotency keys (``local`` for the vault's owner: the CLI, the daemon's
    socket, a server without tokens; ``token:<digest>`` for a bearer token) and ``binding``
    is the scope a scoped token holds it to (empty: every scope)."""

    identity: str = "local"
    binding: tuple[tuple[str, str], ...] = ()

    @classmethod
    def of_token(cls, token: str, binding: Mapping[str, str] | None = None) -> Caller:
        """The caller holding ``token`` (never the token itself: a digest names it)."""
        import hashlib

        digest = hashlib.sha256(token.encode("utf-8")).hexdigest()[:16]
        return cls(f"token:{digest}", tuple(sorted((binding or {}).items())))

    @property
    def bound(self) -> dict[str, str]:
        return dict(self.binding)

    def describe(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in self.binding) or "every scope"


LOCAL = Caller()


@dataclass(frozen=True, slots=True)
class Chunk:
    """One indexed piece of a memory file.

    Lines are 1-based and inclusive. ``text`` is the chunk's own Markdown (with the overlap
    carried from the previous window prepended); ``content_hash`` identifies what gets embedded.
    """

    path: str
    index: int
    heading_path: tuple[str, ...]
    start_line: int
    end_line: int
    text: str
    content_hash: str
    tags: tuple[str, ...] = ()
    date: str | None = None
    metadata: Mapping[str, object] = field(default_factory=dict)

    @property
    def heading(self) -> str:
        return " > ".join(self.heading_path)

    @property
    def embed_text(self) -> str:
        """What the embedder sees: the heading path gives a short paragraph its context."""
        return f"{self.heading}\n{self.text}" if self.heading_path else self.text


@dataclass(frozen=True, slots=True)
class FileState:
    """What the index knows about one memory file (size in bytes, mtime in ns)."""

    path: str
    content_hash: str
    size: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A memory file that could not be indexed, as it was on disk when it was tried."""

    path: str
    reason: str
    size: int
    mtime_ns: int


@dataclass(frozen=True, slots=True)
class DiskFile:
    """A memory file as seen on disk by a scan, before it is read."""

    path: str
    size: int
    mtime_ns: int


# The category of a session's transcript (memory/conversations.py): its items are chat turns,
# which counts, listings and context blocks leave out unless asked.
TURNS_CATEGORY = "conversation"


@dataclass(frozen=True, slots=True)
class Hit:
    """One search result: where it is, why it matched, and its text."""

    chunk_id: int
    path: str
    start_line: int
    end_line: int
    heading: str
    score: float
    text: str
    vector_score: float | None = None
    keyword_score: float | None = None
    date: str | None = None
    tags: tuple[str, ...] = ()
    id: str = ""  # the memory's id, or a note's key (note:path#Lstart-end)

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "path": self.path,
            "start_line": self.start_line,
            "end_line": self.end_line,
            "heading": self.heading,
            "score": self.score,
            "text": self.text,
            "vector_score": self.vector_score,
            "keyword_score": self.keyword_score,
            "date": self.date,
            "tags": list(self.tags),
        }


@dataclass(frozen=True, slots=True)
class SearchFilters:
    """Restrictions on which chunks may match; dates are ISO ``YYYY-MM-DD`` strings."""

    path_prefix: str | None = None
    tag: str | None = None
    date_from: str | None = None
    date_to: str | None = None
    # A scope keeps everything of other users, agents and runs out: their memories and the
    # notes under their folders (memory/users/<u>/, memory/agents/<a>/, memory/runs/<r>/). It
    # holds its own memories and notes; shared context (notes outside every scope's folder,
    # memories with no scope) joins only with ``include_shared``.
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    app_id: str | None = None
    include_shared: bool = False
    include_turns: bool = True  # conversation turns (TURNS_CATEGORY) may match
    category: str | None = None  # only memories of this category
    metadata: Mapping[str, object] | None = None  # Mem0-style: {"k": v, "k2": {"in": [..]}},
    # {"AND": [...]}, {"OR": [...]}; only memories whose metadata match
    memories_only: bool = False  # no notes (Mem0's routes: a memory API answers memories)
    show_expired: bool = False  # memories past their expiration date too

    @property
    def scoped(self) -> bool:
        return any((self.user_id, self.agent_id, self.run_id, self.app_id))

    @property
    def about_memories(self) -> bool:
        return self.scoped or self.category is not None or bool(self.metadata) or self.memories_only

    @property
    def active(self) -> bool:
        return any((self.path_prefix, self.tag, self.date_from, self.date_to)) or (
            self.about_memories or not self.include_turns
        )


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    """One memory as the index knows it: its text, scope, fields and where it is written."""

    id: str
    text: str
    path: str
    start_line: int
    end_line: int
    category: str
    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    app_id: str | None = None
    key: str | None = None
    created: str = ""
    updated: str = ""
    metadata: Mapping[str, object] = field(default_factory=dict)
    score: float | None = None
    event: str | None = None  # what add(..., infer=True) did: ADD, UPDATE or DELETE
    strength: Strength | None = None  # FSRS-6 state now (see strength.py), when asked for
    expiration_date: str | None = None  # an ISO date: reads leave it out after that day
    immutable: bool = False  # updates through the API are refused

    def to_dict(self) -> dict[str, object]:
        return {
            "id": self.id,
            "memory": self.text,
            **({"event": self.event} if self.event else {}),
            "user_id": self.user_id,
            "agent_id": self.agent_id,
            "run_id": self.run_id,
            "app_id": self.app_id,
            "category": self.category,
            "key": self.key,
            "metadata": dict(self.metadata),
            "created_at": self.created,
            "updated_at": self.updated,
            "path": self.path,
            "start_line": self.start_line,
            "end_line": self.end_line,
            **({"score": self.score} if self.score is not None else {}),
            **({"strength": self.strength.to_dict()} if self.strength is not None else {}),
            **({"expiration_date": self.expiration_date} if self.expiration_date else {}),
            **({"immutable": True} if self.immutable else {}),
        }


@dataclass(frozen=True, slots=True)
class Strength:
    """How well a memory is held now. ``stability_days`` and ``difficulty`` are FSRS-6's."""

    tier: Tier
    retrievability: float
    stability_days: float
    difficulty: float
    last_review: str  # ISO 8601, UTC
    reviews: int

    def to_dict(self) -> dict[str, object]:
        return {
            "tier": self.tier,
            "retrievability": round(self.retrievability, 4),
            "stability_days": round(self.stability_days, 3),
            "difficulty": round(self.difficulty, 3),
            "last_review": self.last_review,
            "reviews": self.reviews,
        }


@dataclass(frozen=True, slots=True)
class Entity:
    """A user, agent or run that holds memories (Mem0's entities), with how many."""

    kind: str  # user | agent | run | app
    name: str
    memories: int
    created: str | None  # its first memory's
    updated: str | None  # its latest change's

    def to_dict(self) -> dict[str, object]:
        return {"type": self.kind, "name": self.name, "total_memories": self.memories,
                "created_at": self.created, "updated_at": self.updated}  # fmt: skip


@dataclass(frozen=True, slots=True)
class MemoryQuery:
    """Which memories to list or count (no text query): scope, category, key, metadata."""

    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    app_id: str | None = None
    category: str | None = None
    key: str | None = None
    ids: tuple[str, ...] | None = None
    metadata: Mapping[str, object] | None = None
    tag: str | None = None
    path: str | None = None  # only memories written in this file
    include_turns: bool = True  # False: leave out conversation turns unless category asks
    # with ``today`` (an ISO date): False leaves out memories that expired before it, True
    # keeps only those; None ignores expiry
    expired: bool | None = None
    today: str = ""
    limit: int = 100
    offset: int = 0
    # only the memories after this one in list order, (created, path, start_line, id): a page
    # that starts where the last one ended costs the same at the millionth memory as at the first
    after: tuple[str, str, int, str] | None = None


@dataclass(frozen=True, slots=True)
class SearchResult:
    query: str
    hits: tuple[Hit, ...]
    mode: SearchMode
    warnings: tuple[str, ...] = ()
    # the memories among the hits, by chunk id, read in the search's own snapshot (a hit not
    # here is a note); None when not known (a result assembled elsewhere)
    memories: Mapping[int, MemoryRecord] | None = field(default=None, compare=False, repr=False)

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {
            "query": self.query,
            "mode": self.mode,
            "results": [h.to_dict() for h in self.hits],
        }
        if self.warnings:
            out["warnings"] = list(self.warnings)
        return out


@dataclass(frozen=True, slots=True)
class FileFailure:
    """A file that was not indexed. ``transient``: the index was busy; retrying will work."""

    path: str
    reason: str
    transient: bool = False
    busy: bool = False  # another process held the index's write lock
    full: bool = False  # the index's disk is full


@dataclass(frozen=True, slots=True)
class IndexReport:
    """Outcome of one indexing pass. Failures are values here, not exceptions."""

    indexed: tuple[str, ...] = ()
    unchanged: int = 0
    deleted: tuple[str, ...] = ()
    failed: tuple[FileFailure, ...] = ()
    still_skipped: tuple[str, ...] = ()  # skipped before and not changed since (not re-read)
    chunks_embedded: int = 0
    chunks_reused: int = 0
    chunks_pending: int = 0
    elapsed_ms: float = 0.0
    warnings: tuple[str, ...] = ()

    def summary(self) -> str:
        """One line for a person: what was indexed, skipped and embedded, and why vectors wait."""
        files = [plural(len(self.indexed), "file") + " indexed", f"{self.unchanged} unchanged"]
        if self.deleted:
            files.append(f"{len(self.deleted)} deleted")
        if self.failed:
            files.append(f"{len(self.failed)} skipped ({_names(f.path for f in self.failed)})")
        if self.still_skipped:
            files.append(f"{len(self.still_skipped)} still skipped (see `memcore status`)")
        chunks = [plural(self.chunks_embedded, "chunk") + " embedded"]
        if self.chunks_reused:
            chunks.append(f"{self.chunks_reused} reused from cache")
        if self.chunks_pending:
            why = self.embedder_problem
            chunks.append(
                f"{self.chunks_pending} waiting for vectors" + (f" ({why})" if why else "")
            )
        return f"{', '.join(files)}; {', '.join(chunks)} ({self.elapsed_ms / 1000:.1f} s)"

    @property
    def embedder_problem(self) -> str:
        """Why vectors are pending, from the warnings (empty when none says)."""
        return next((w for w in self.warnings if w.startswith("embedder unavailable")), "")

    def to_dict(self) -> dict[str, object]:
        return {
            "files_indexed": len(self.indexed),
            "files_unchanged": self.unchanged,
            "files_deleted": len(self.deleted),
            "files_failed": [
                {"path": f.path, "reason": f.reason, "transient": f.transient} for f in self.failed
            ],
            "files_still_skipped": list(self.still_skipped),
            "chunks_embedded": self.chunks_embedded,
            "chunks_reused": self.chunks_reused,
            "chunks_pending": self.chunks_pending,
            "elapsed_ms": round(self.elapsed_ms, 1),
            "indexed": list(self.indexed),
            "deleted": list(self.deleted),
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True, slots=True)
class IndexStatus:
    files: int
    chunks: int
    vectors_pending: int
    model_id: str
    other_models: Mapping[str, int]
    db_path: str
    db_bytes: int
    last_indexed: str | None
    engine: str = ""  # "SQLite 3.45.1", "PostgreSQL 16.2, pgvector 0.6.2"
    # memory ids in more than one file: id -> the copies' paths (the home is the smallest path)
    duplicate_memories: Mapping[str, Sequence[str]] = field(default_factory=dict)
    skipped: Mapping[str, str] = field(default_factory=dict)  # path -> why it is not indexed

    def to_dict(self) -> dict[str, object]:
        return {
            "files": self.files,
            "chunks": self.chunks,
            "vectors_pending": self.vectors_pending,
            "model_id": self.model_id,
            "other_models": dict(self.other_models),
            "db_path": self.db_path,
            "db_bytes": self.db_bytes,
            "engine": self.engine,
            "duplicate_memories": {k: list(v) for k, v in self.duplicate_memories.items()},
            "last_indexed": self.last_indexed,
            "skipped": dict(self.skipped),
        }


def _names(paths: Iterable[str], most: int = 5) -> str:
    names = list(paths)
    extra = f" and {len(names) - most} more" if len(names) > most else ""
    return ", ".join(names[:most]) + extra
