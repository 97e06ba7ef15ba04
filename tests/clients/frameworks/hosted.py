"""The override docs/mem0.md gives for an integration that builds mem0's ``MemoryClient``
itself, with no way to name a host: give the integration's module a MemoryClient that defaults
to memcore's address. Every call the integration makes then reaches ``memcore serve``."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import mem0


def aim(integration: ModuleType, url: str) -> None:
    class MemoryClient(mem0.MemoryClient):  # type: ignore[misc]
        def __init__(self, *args: Any, host: str | None = None, **kwargs: Any) -> None:
            super().__init__(*args, host=host or url, **kwargs)

    integration.MemoryClient = MemoryClient  # type: ignore[attr-defined]
