"""`memcore serve`: HTTP API (memcore's own and Mem0's) plus the watcher, in one process."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Annotated
from urllib.parse import unquote

import typer

from memcore.cli.app import app, fail, run, settings_of
from memcore.cli.watch import _configure_logging
from memcore.compose import open_service
from memcore.core.errors import InputError
from memcore.core.ids import check_id
from memcore.core.models import SCOPE_KEYS
from memcore.core.redact import keep_secret
from memcore.fronts.daemon import Daemon, install_signal_handlers


@app.command(name="serve")
def serve_command(
    ctx: typer.Context,
    host: Annotated[str, typer.Option("--host", help="Address to bind")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535)] = 8765,
    token: Annotated[
        str | None,
        typer.Option("--token", envvar="MEMCORE_TOKEN", help="Require 'Authorization: Bearer T'"),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file", help="Read the token from this file (not shown by `ps`, unlike --token)"
        ),
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
            help="TOKEN=user_id:alice[,app_id:crm]: a token held to one scope (repeatable; "
            "`ps` shows it: prefer --scoped-token-file or MEMCORE_SCOPED_TOKENS)",
        ),
    ] = None,
    scoped_token_file: Annotated[
        Path | None,
        typer.Option(
            "--scoped-token-file",
            help="Scoped tokens from this file, one TOKEN=user_id:alice[,agent_id:bot] a line "
            "(blank lines and # comments skipped)",
        ),
    ] = None,
) -> None:
    """Serve every front on one port, 127.0.0.1:8765 by default (another address needs
    --token), and watch the vault: memcore's HTTP API (/api, /openapi.json), Mem0's REST API
    (/v1, /v2, /v3: the official mem0ai clients work unchanged), MCP over HTTP (/mcp) and the
    web page (/)."""
    from memcore.fronts.serve import check_binding, serve  # uvicorn, starlette, mcp: only here

    _configure_logging(ctx.obj.verbose, False)
    token = _token(ctx, token, token_file)

    scoped = _parse_scoped(_scoped_specs(scoped_tokens or [], scoped_token_file))
    for secret in (token, *scoped):
        keep_secret(secret)  # masked in every log line, status and error

    async def job() -> None:
        check_binding(host, token, scoped)
        settings = settings_of(ctx)
        stop = asyncio.Event()
        install_signal_handlers(stop, settings.server.stop_timeout_s)
        while not stop.is_set():  # again after .memcore/ was deleted under it: a new index
            async with open_service(settings, catch_up=False) as service:
                daemon = (
                    Daemon(settings, service, stop, kind="serve", url=f"http://{host}:{port}")
                    if watch
                    else None
                )
                await serve(
                    service, host, port, token, stop, daemon, scoped=scoped,
                    allowed_hosts=allowed_hosts or (),
                )  # fmt: skip
            if daemon is None or not daemon.lost:
                break

    run(ctx, job)


def _token(ctx: typer.Context, token: str | None, token_file: Path | None) -> str | None:
    """The bearer token: --token-file, MEMCORE_TOKEN or --token (which `ps` shows to every user
    of the machine, so it warns)."""
    source = ctx.get_parameter_source("token")
    on_command_line = source is not None and source.name == "COMMANDLINE"
    if token_file is not None:
        if on_command_line:
            raise fail("give --token or --token-file, not both", 2)
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise fail(f"cannot read --token-file {token_file}: {exc}", 2) from None
        if not token:
            raise fail(f"--token-file {token_file} is empty", 2)
        return token
    if token and on_command_line:
        typer.echo(
            "memcore: warning: --token is visible to every user of this machine in `ps`; "
            "prefer MEMCORE_TOKEN or --token-file",
            err=True,
        )
    return token


SCOPED_ENV = "MEMCORE_SCOPED_TOKENS"  # TOKEN=user_id:alice[,agent_id:bot], whitespace apart


def _scoped_specs(given: list[str], path: Path | None) -> list[str]:
    """Scoped-token specs from the command line (warned of: `ps` shows them to every user),
    --scoped-token-file (one a line) and MEMCORE_SCOPED_TOKENS (separated by white space)."""
    if given:
        typer.echo(
            "memcore: warning: --scoped-token is visible to every user of this machine in "
            f"`ps`; prefer --scoped-token-file or {SCOPED_ENV}",
            err=True,
        )
    specs = list(given) + os.environ.get(SCOPED_ENV, "").split()
    if path is not None:
        try:
            lines = path.read_text(encoding="utf-8").split("\n")
        except (OSError, UnicodeDecodeError) as exc:
            raise fail(f"cannot read --scoped-token-file {path}: {exc}", 2) from None
        specs += [
            line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")
        ]
    return specs


def _parse_scoped(specs: list[str]) -> dict[str, dict[str, str]]:
    out: dict[str, dict[str, str]] = {}
    for spec in specs:
        token, sep, rest = spec.partition("=")
        # an id holding ',' or '%' is written %-escaped (user_id:a%2Cb for "a,b")
        scope = {k: unquote(v) for k, _, v in (p.partition(":") for p in rest.split(",") if p)}
        if not sep or not token or not scope or not set(scope) <= set(SCOPE_KEYS):
            shown = f"...={rest}" if sep else "a spec without '='"  # never echo the token
            raise fail(f"--scoped-token takes TOKEN=user_id:ID[,app_id:ID], got {shown}", 2)
        for key, name in scope.items():
            try:
                check_id(name, key)
            except InputError as exc:
                raise fail(str(exc), 2) from None
        out[token] = scope
    return out
