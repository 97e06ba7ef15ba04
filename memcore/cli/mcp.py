"""`memcore mcp`: the MCP server over stdio, for Claude Desktop, Claude Code, Cursor..."""

from __future__ import annotations

import asyncio
import logging

import typer

from memcore.cli.app import app, run, settings_of
from memcore.compose import open_service
from memcore.core.heap import freeze_after

log = logging.getLogger(__name__)


@app.command(name="mcp")
def mcp_command(ctx: typer.Context) -> None:
    """Serve memory tools over MCP on stdin/stdout (the vault is indexed in the background
    first; run `memcore watch` beside it to follow later edits)."""
    from memcore.fronts.mcp import build_mcp  # the MCP SDK takes 0.5 s to import: only here

    async def job() -> None:
        async with open_service(settings_of(ctx), catch_up=False) as service:
            service.readiness.phase = "starting"  # until the catch-up below is done
            catch_up = asyncio.create_task(freeze_after(service.catch_up()))
            try:
                await build_mcp(service).run_stdio_async()
            finally:
                if not catch_up.done():
                    catch_up.cancel()
                try:
                    await catch_up
                except (asyncio.CancelledError, Exception) as exc:  # reported, never fatal
                    log.warning("catching up with the vault stopped: %s", exc)

    run(ctx, job)
