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

from memcore.compose import open_service
from memcore.core.errors import MemcoreError
from memcore.core.models import Hit, IndexReport, SearchFilters, SearchResult
from memcore.core.settings import Settings, load_settings  # all light: the service loads on open
from memcore.core.version import __version__

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
