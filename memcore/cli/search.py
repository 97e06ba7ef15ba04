"""Commands that read memory: search and context."""

from __future__ import annotations

from typing import Annotated

import typer

from memcore.cli import reads
from memcore.cli.app import app, fail, run, settings_of
from memcore.cli.output import print_context
from memcore.cli.scope import (
    AgentOpt,
    AppOpt,
    CategoryOpt,
    IncludeSharedOpt,
    MetaOpt,
    RunOpt,
    ScopeArgs,
    UserOpt,
    metadata_of,
)
from memcore.core.errors import InputError
from memcore.core.models import SearchFilters, SearchResult
from memcore.core.settings import FUSIONS, SearchSettings
from memcore.core.tokenize import has_words
from memcore.fronts import remote
from memcore.search.filters import read_filters


def _filters(
    path: str | None = None,
    tag: str | None = None,
    since: str | None = None,
    until: str | None = None,
    scope: ScopeArgs | None = None,
    include_turns: bool = True,
) -> SearchFilters:
    """The read filters of a command line, checked as every front checks them."""
    sc = scope or ScopeArgs()
    try:
        return read_filters(
            user_id=sc.user, agent_id=sc.agent, run_id=sc.run, app_id=sc.app,
            include_shared=sc.include_shared,
            include_turns=include_turns, category=sc.category, metadata=metadata_of(sc.meta),
            tag=tag, path=path, since=since, until=until,
        )  # fmt: skip
    except InputError as exc:
        raise fail(str(exc), 2) from None


_DEFAULTS = SearchSettings()
LimitOpt = Annotated[
    int | None,
    typer.Option(
        "--limit", "-n", min=1, max=1000,
        help=f"How many results (default: search.limit = {_DEFAULTS.limit})",
    ),
]  # fmt: skip
TagOpt = Annotated[str | None, typer.Option("--tag", help="Only chunks with this #tag (any case)")]
PathOpt = Annotated[
    str | None,
    typer.Option("--path", help="Only files under this path (vault-relative, ./ or absolute)"),
]
SinceOpt = Annotated[
    str | None, typer.Option("--since", help="Only memories dated on or after YYYY-MM-DD")
]
UntilOpt = Annotated[
    str | None, typer.Option("--until", help="Only memories dated on or before YYYY-MM-DD")
]


RemoteOpt = Annotated[
    str | None,
    typer.Option("--remote", help="Ask a running `memcore serve` at this URL instead"),
]
TokenOpt = Annotated[
    str | None, typer.Option("--token", envvar="MEMCORE_TOKEN", help="Token for --remote")
]


def _check_query(query: str) -> None:
    if not has_words(query):
        raise fail("the query needs at least one word to search for", 2)


@app.command()
def search(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="What to look for, in plain words")],
    limit: LimitOpt = None,
    tag: TagOpt = None,
    path: PathOpt = None,
    since: SinceOpt = None,
    until: UntilOpt = None,
    fusion: Annotated[
        str | None,
        typer.Option(
            "--fusion",
            help=f"How to combine meaning and keywords: {', '.join(FUSIONS)} "
            f"(default: search.fusion = {_DEFAULTS.fusion})",
        ),
    ] = None,
    min_score: Annotated[
        float | None,
        typer.Option(
            "--min-score",
            min=0.0,
            max=1.0,
            help="Drop hits scoring below this (0-1; default: search.min_score = "
            f"{_DEFAULTS.min_score})",
        ),
    ] = None,
    user: UserOpt = None,
    agent: AgentOpt = None,
    run_id: RunOpt = None,
    app: AppOpt = None,
    category: CategoryOpt = None,
    meta: MetaOpt = None,
    include_shared: IncludeSharedOpt = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print results as JSON")] = False,
    remote_url: RemoteOpt = None,
    token: TokenOpt = None,
) -> None:
    """Search memory by meaning and by keyword. Scores run from 0 to 1 (higher is more
    relevant). With --user/--agent/--run/--app only that scope's memories and notes come back."""
    scope = ScopeArgs(user, agent, run_id, category, meta, include_shared, app)
    if not (tag and not query.strip()):  # an empty query with --tag lists what carries it
        _check_query(query)
    if fusion is not None and fusion not in FUSIONS:
        raise fail(f"--fusion must be one of {', '.join(FUSIONS)}", 2)
    filters = _filters(path, tag, since, until, scope)

    async def job() -> tuple[SearchResult, bool]:
        if remote_url:
            result = await remote.search(remote_url, token, query, limit, filters, min_score)
            return result, False
        return await reads.search(settings_of(ctx), query, limit, filters, fusion, min_score)

    result, index_empty = run(ctx, job)
    reads.print_search(result, as_json, index_empty)


@app.command()
def context(
    ctx: typer.Context,
    query: Annotated[str, typer.Argument(help="The task or question to find memories for")],
    limit: Annotated[
        int, typer.Option("--limit", "-n", min=1, max=50, help="How many memories")
    ] = 3,
    tag: TagOpt = None,
    path: PathOpt = None,
    user: UserOpt = None,
    agent: AgentOpt = None,
    run_id: RunOpt = None,
    app: AppOpt = None,
    category: CategoryOpt = None,
    meta: MetaOpt = None,
    include_shared: IncludeSharedOpt = False,
    include_turns: Annotated[
        bool, typer.Option("--include-turns", help="Conversation turns may be included too")
    ] = False,
    min_score: Annotated[
        float | None,
        typer.Option(
            "--min-score",
            min=0.0,
            max=1.0,
            help="The relevance floor (0-1; default: search.context_min_score = "
            f"{_DEFAULTS.context_min_score})",
        ),
    ] = None,
    remote_url: RemoteOpt = None,
    token: TokenOpt = None,
) -> None:
    """Print a "## Relevant Memories" block to paste into a prompt: the memories that clear
    the relevance floor, nothing (and a line on stderr) when none does."""
    _check_query(query)
    scope = ScopeArgs(user, agent, run_id, category, meta, include_shared, app)
    filters = _filters(path, tag, None, None, scope, include_turns)

    async def job() -> str:
        if remote_url:
            return await remote.context(remote_url, token, query, limit, filters, None, min_score)
        return await reads.context(settings_of(ctx), query, limit, filters, min_score)

    print_context(run(ctx, job), query)
