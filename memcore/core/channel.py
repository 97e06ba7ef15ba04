"""Which front a change came through, for the history's attribution: ``web`` (the page),
``cli``, ``api`` (HTTP, Mem0 REST, the Python library), ``agent`` (MCP). A change a person
made in the Markdown says ``person`` in its actor instead. Each front sets it for the work it
does (a context variable: concurrent requests keep their own)."""

from __future__ import annotations

from contextvars import ContextVar
from typing import Literal

Via = Literal["web", "cli", "api", "agent"]
VIAS: tuple[Via, ...] = ("web", "cli", "api", "agent")
VIA: ContextVar[Via] = ContextVar("memcore_via", default="api")


def via() -> Via:
    return VIA.get()
