"""memcore: a local-first memory layer for AI agents. Markdown is the truth, SQLite the index.

The Python API is the service itself::

    import asyncio
    from memcore import load_settings, open_service

    async def main() -> None:
        async with open_service(load_settings("path/to/vault")) as memory:
            await memory.index()
            result = await memory.search("render engine")

    asyncio.run(main())
"""

from __future__ import annotations

import importlib

from memcore.core.version import __version__
from memcore.storage.sqlite.library import without_memory_statistics

without_memory_statistics()  # first, before anything imports sqlite3 (see that module)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers read it)

if TYPE_CHECKING:
    from memcore.compose import open_service
    from memcore.core.errors import MemcoreError
    from memcore.core.models import Hit, IndexReport, SearchFilters, SearchResult
    from memcore.core.settings import Settings, load_settings

# Each name of the public API and its module, imported when first asked for: the command line
# (memcore.cli, inside this package) answers through a running daemon without any of them.
_EXPORTS = {
    "open_service": "memcore.compose",
    "MemcoreError": "memcore.core.errors",
    "Hit": "memcore.core.models",
    "IndexReport": "memcore.core.models",
    "SearchFilters": "memcore.core.models",
    "SearchResult": "memcore.core.models",
    "Settings": "memcore.core.settings",
    "load_settings": "memcore.core.settings",
}

__all__ = [
    "Hit",
    "IndexReport",
    "MemcoreError",
    "SearchFilters",
    "SearchResult",
    "Settings",
    "__version__",
    "load_settings",
    "open_service",
]


def __getattr__(name: str) -> object:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'memcore' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
