"""`memcore serve`: HTTP API (memcore's own and Mem0's) plus the watcher, in one process."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from memcore.cli import app, fail, run, settings_of
from memcore.cli.watch import _configure_logging
from memcore.compose import open_service
from memcore.core.errors import InputError
from memcore.fronts.daemon import Daemon, install_signal_handlers
from memcore.vault.memory_format import check_name


@app.command(name="serve")
def serve_command(
    ctx: typer.Context,
    host: Annotated[str, typer.Option("--host", help="Address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535)] = 8765,
    token: Annotated[
        str | None,
        typer.Option("--token", envvar="MEMCORE_TOKEN", help="Require 'Authorization: Bearer T'"),
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch/--no-watch", help="Also keep the index current")
    ] = True,
    allowed_hosts: Annotated[
        list[str] | None,
        typer.Option(
            "--allow-host",
            help="A name clients reach this server by, besides 127.0.0.1, localhost and [::1] "
            "(repeatable; requests naming another host are refused)",
        ),
    ] = None,
    scoped_tokens: Annotated[
        list[str] | None,
        typer.Option(
            "--scoped-token",
            help="TOKEN=user_id:alice[,agent_id:bot]: a token held to one scope (repeatable)",
        ),
    ] = None,
) -> None:
    """Serve the HTTP API on 127.0.0.1 (another address needs --token) and watch the vault."""
    from memcore.fronts.serve import check_binding, serve  # uvicorn, starlette, mcp: only here

    _configure_logging(ctx.obj.verbose, False)

    scoped = _parse_scoped(scoped_tokens or [])

    async def job() -> None:
        check_binding(host, token, scoped)
        settings = settings_of(ctx)
        stop = asyncio.Event()
        install_signal_handlers(stop)
        while not stop.is_set():  # again after .memcore/ was deleted under it: a new index
            async with open_service(settings, catch_up=False) as service:
                daemon = Daemon(settings, service, stop, kind="serve") if watch else None
                await serve(
                    service, host, port, token, stop, daemon, scoped=scoped,
                    allowed_hosts=allowed_hosts or (),
                )  # fmt: skip
            if daemon is None or not daemon.lost:
                break

    run(ctx, job)


def _parse_scoped(specs: list[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for spec in specs:
        token, sep, rest = spec.partition("=")
        scope = dict(part.partition(":")[::2] for part in rest.split(",") if part)
        if not sep or not token or not scope or not set(scope) <= {"user_id", "agent_id", "run_id"}:
            raise fail(f"--scoped-token takes TOKEN=user_id:NAME[,agent_id:NAME], got {spec!r}", 2)
        for key, name in scope.items():
            try:
                check_name(name, key)
            except InputError as exc:
                raise fail(str(exc), 2) from None
        out[token] = scope
    return out
