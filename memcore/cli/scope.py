"""The scope and filter options the reading and writing commands share."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Annotated

import typer

from memcore.cli.app import fail

UserOpt = Annotated[str | None, typer.Option("--user", help="user_id scope")]
AgentOpt = Annotated[str | None, typer.Option("--agent", help="agent_id scope")]
RunOpt = Annotated[str | None, typer.Option("--run", help="run_id scope")]
AppOpt = Annotated[str | None, typer.Option("--app", help="app_id scope")]
CategoryOpt = Annotated[
    str | None, typer.Option("--category", help="core, daily, conversation or your own name")
]
MetaOpt = Annotated[
    list[str] | None, typer.Option("--meta", help="Metadata as key=value (repeatable)")
]
IncludeSharedOpt = Annotated[
    bool,
    typer.Option(
        "--include-shared",
        help="With a scope: shared notes and unscoped memories may match too",
    ),
]


@dataclass(frozen=True, slots=True)
class ScopeArgs:
    user: str | None = None
    agent: str | None = None
    run: str | None = None
    category: str | None = None
    meta: list[str] | None = None
    include_shared: bool = False
    app: str | None = None


def metadata_of(pairs: list[str] | None) -> dict[str, object] | None:
    """--meta key=value pairs as a metadata object (values read as JSON when they are)."""
    if not pairs:
        return None
    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise fail(f"--meta takes key=value, got {pair!r}", 2)
        try:
            out[key] = json.loads(raw)  # numbers, true/false, JSON lists stay typed
        except ValueError:
            out[key] = raw
    return out
