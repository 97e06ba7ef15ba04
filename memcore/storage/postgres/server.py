"""What memcore needs to know of a PostgreSQL server: whether its pgvector is recent enough
(and has the iterative scan), how a driver error reads as memcore's, and the advisory lock a
namespace's writers take turns on."""

from __future__ import annotations

import hashlib
import re

import psycopg
from psycopg import errors as pg_errors

from memcore.core.errors import StorageBusy, StorageError, StorageFull

MIN_PGVECTOR = (0, 5, 0)  # HNSW
ITERATIVE_SCAN = (0, 8, 0)  # hnsw.iterative_scan


def translate(exc: psycopg.Error, what: str) -> StorageError:
    """A driver error as a one-line StorageError (StorageBusy when a lock wait timed out)."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    if isinstance(exc, pg_errors.LockNotAvailable | pg_errors.QueryCanceled):
        return StorageBusy(f"index is busy ({what}): {text}; another process is writing to it")
    if isinstance(exc, pg_errors.DiskFull):  # SQLSTATE 53100, the database server's disk
        return StorageFull(f"index {what} failed: the database server's disk is full ({text})")
    return StorageError(f"index {what} failed: {text}")


def parse_version(text: str) -> tuple[int, int, int]:
    """ "0.6.2" -> (0, 6, 2); missing or non-numeric parts count as 0 ("16.2 (Debian)")."""
    parts = [int(m.group()) if (m := re.match(r"\d+", p)) else 0 for p in text.split(".")]
    major, minor, patch = (*parts, 0, 0, 0)[:3]
    return major, minor, patch


def uses_iterative_scan(created: str, shipped: str, where: str) -> bool:
    """Whether pgvector ``shipped`` (the library) has the iterative index scan. ``created`` is
    the version the extension's SQL objects were created at in the database: below 0.5 it has
    no HNSW, a StorageError that says what to do."""
    if parse_version(created) < MIN_PGVECTOR:
        raise StorageError(
            f"pgvector {created} in {where} is too old: memcore needs pgvector >= 0.5 (HNSW); "
            "install a newer one and run ALTER EXTENSION vector UPDATE"
        )
    return parse_version(shipped) >= ITERATIVE_SCAN


def lock_key(namespace: str) -> int:
    """The advisory lock that one namespace's writers take turns on (a signed 64-bit key)."""
    return int.from_bytes(hashlib.sha256(namespace.encode()).digest()[:8], "big", signed=True)
