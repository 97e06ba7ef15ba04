"""`memcore serve`: HTTP API (memcore's own and Mem0's) plus the watcher, in one process."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from memcore.app import open_service
from memcore.cli import app, run, settings_of
from memcore.cli.watch import _configure_logging
from memcore.daemon import Daemon, install_signal_handlers
from memcore.server import check_binding, serve


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
) -> None:
    """Serve the HTTP API on 127.0.0.1 (another address needs --token) and watch the vault."""
    _configure_logging(ctx.obj.verbose, False)

    async def job() -> None:
        check_binding(host, token)
        settings = settings_of(ctx)
        stop = asyncio.Event()
        async with open_service(settings) as service:
            install_signal_handlers(stop)
            daemon = Daemon(settings, service, stop) if watch else None
            await serve(service, host, port, token, stop, daemon)

    run(ctx, job)
