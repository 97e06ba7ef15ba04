"""The MemcoreError tree: every failure memcore reports on purpose is one of these."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers read it)
if TYPE_CHECKING:
    from typing import Any


class MemcoreError(Exception):
    """Root of all memcore errors; str(err) is a one-line message for a person."""


class ConfigError(MemcoreError):
    """A configuration file, key, value or environment variable is wrong."""


class VaultError(MemcoreError):
    """The vault folder is missing or a path points outside it."""


class VaultWriteError(VaultError):
    """A file of the vault could not be written (disk full, read-only, permissions); nothing
    was changed."""


class VaultNotFound(VaultError):
    """No vault where one was asked for: a missing folder, a file, or none above the cwd."""


class StorageError(MemcoreError):
    """The index database cannot be opened, migrated, read or written."""


class StorageBusy(StorageError):
    """Another writer held the index for too long; retrying later may work."""


class StorageFull(StorageError):
    """The index's disk (or the database server's) is full: HTTP 507, as a full vault disk."""


class EmbedderError(MemcoreError):
    """The embedder failed in a way retrying will not fix (bad model, bad key)."""


class EmbedderUnavailable(EmbedderError):
    """The embedder is unreachable or overloaded right now; retrying later may work."""


class DaemonError(MemcoreError):
    """The watch daemon cannot start (for example, another one holds the vault)."""


class InputError(MemcoreError):
    """A caller's request is invalid (empty content, a path-like scope, bad metadata); nothing
    was changed."""


class KeyReused(InputError):
    """An idempotency key given again with another request (HTTP 422, as the IETF
    Idempotency-Key draft answers)."""


class NotSupported(InputError):
    """The configured memory adapter cannot do this (a Mem0 server keeps no FSRS strength,
    memory switched off keeps nothing); nothing was changed."""


class Forbidden(MemcoreError):
    """The caller's token is held to another scope than the call names; nothing was changed."""


class NotFound(MemcoreError):
    """No memory has that id (or key); nothing was changed."""


class WriteConflict(MemcoreError):
    """A memory file kept changing under a write (a person editing it); nothing was written."""


class ImmutableMemory(WriteConflict):
    """An update of a memory added as immutable: refused (409), never applied."""

    def __init__(self, memory_id: str) -> None:
        super().__init__(
            f"memory {memory_id} is immutable: it cannot be updated (delete it and add a new "
            "one, or edit its file by hand)"
        )


class LLMError(MemcoreError):
    """The chat model behind infer=True failed or answered something unusable."""


def validation_message(errors: Sequence[Mapping[str, Any]]) -> str:
    """One line from a validator's complaints (pydantic's ``errors()``): the first, as
    ``field.path: what is wrong``, and how many more there are."""
    if not errors:
        return "invalid input"
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ())) or "the input"
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    said = {"extra_forbidden": "unknown field", "missing": "missing field"}.get(
        str(first.get("type"))
    )
    if said is not None:
        return f"{said}(s): {where}{more}"
    return " ".join(f"{where}: {first.get('msg', 'invalid')}{more}".split())
