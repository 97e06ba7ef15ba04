"""Finds the schema files (migrations/<backend>/NNNN_name.sql) and orders them. Pure file I/O."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from memcore.core.errors import StorageError

_NAME = re.compile(r"^(\d{4})_([\w-]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations_dir(backend: str) -> Path:
    """The installed copy (memcore/_migrations in a wheel) or the source tree's migrations/."""
    here = Path(__file__).resolve().parent.parent
    for base in (here / "_migrations", here.parent / "migrations"):
        if (base / backend).is_dir():
            return base / backend
    raise StorageError(f"schema files for {backend} are missing from this installation")


def load_migrations(backend: str) -> list[Migration]:
    found = []
    for path in sorted(migrations_dir(backend).glob("*.sql")):
        m = _NAME.match(path.name)
        if not m:
            raise StorageError(f"migration file {path.name} is not named NNNN_name.sql")
        found.append(Migration(int(m.group(1)), m.group(2), path.read_text(encoding="utf-8")))
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise StorageError(f"two {backend} migrations share a version number")
    return found
