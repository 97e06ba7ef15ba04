"""`memcore mcp`: the MCP server over stdio, for Claude Desktop, Claude Code, Cursor..."""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import typer

from memcore.cli.app import app, run, settings_of
from memcore.compose import open_service
from memcore.core.heap import freeze_heap

if TYPE_CHECKING:
    from memcore.service import MemoryService

log = logging.getLogger(__name__)


async def caught_up(service: MemoryService) -> None:
    """Catch up with the vault, then leave the warm heap out of later full collections."""
    await service.catch_up()
    freeze_heap()


@app.command(name="mcp")
def mcp_command(ctx: typer.Context) -> None:
    """Serve memory tools over MCP on stdin/stdout (the vault is indexed in the background
    first; run `memcore watch` beside it to follow later edits)."""
    from memcore.fronts.mcp import build_mcp  # the MCP SDK takes 0.5 s to import: only here

    async def job() -> None:
        async with open_service(settings_of(ctx), catch_up=False) as service:
            service.readiness.phase = "starting"  # until the catch-up below is done
            catch_up = asyncio.create_task(caught_up(service))
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
