"""Running a command on the vault's service: opened for it (or a running daemon asked
first), closed after it, a batch's graph owed handed on (cli/app.py)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any

import typer

from memcore.cli.app import run, settings_of, use_batch
from memcore.compose import open_service
from memcore.core.settings import Settings

if TYPE_CHECKING:
    from memcore.service import MemoryService


def with_service(
    ctx: typer.Context,
    use: Callable[[MemoryService], Coroutine[Any, Any, Any]],
    *,
    writes: bool = True,
    first: Callable[[Settings], Coroutine[Any, Any, Any]] | None = None,
    embeds: bool = False,
) -> Any:
    """Run ``use`` on the vault's service. A command that only reads never creates an index;
    one that writes to a vault never indexed indexes all of it first; with no daemon keeping
    the index current, either catches it up with the files changed since, first. ``first``:
    a way to answer without opening the service (the running daemon); None from it: open.
    ``embeds``: the command embeds what it writes (an add): the local model runs in the
    helper process forked for it (cli.model_helper), when there is one."""

    async def job() -> Any:
        from memcore.compose import build_embedder
        from memcore.fronts.daemon_state import daemon_status

        settings = settings_of(ctx)
        helper = ctx.obj.take_helper() if embeds else None
        if first is not None and (done := await first(settings)) is not None:
            if helper is not None:
                helper.discard()
            return done
        fresh = daemon_status(settings) is None
        embedder = build_embedder(settings, helper=helper) if helper is not None else None
        async with open_service(settings, embedder, create=writes, fresh=fresh) as service:
            return await use_batch(ctx, service, use)

    return run(ctx, job)
