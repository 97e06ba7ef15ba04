"""`memcore export` and `memcore import`: every memory as JSON Lines, and back."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from memcore.cli import app, fail
from memcore.cli.memory import with_service


@app.command(name="export")
def export_command(
    ctx: typer.Context,
    out: Annotated[
        Path | None, typer.Argument(help="File to write (default: standard output)")
    ] = None,
    history: Annotated[bool, typer.Option("--history", help="Add each memory's events")] = False,
) -> None:
    """Write every memory (every scope, ids, metadata, categories, timestamps) as JSON Lines;
    `memcore import` reads it back into any vault."""
    from memcore.memory.transfer import export_rows

    async def rows(service: Any) -> list[dict[str, Any]]:
        _markdown_only(service, "export")
        return [row async for row in export_rows(service.writer, history)]

    found = with_service(ctx, rows, writes=False)
    lines = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in found)
    if out is None:
        sys.stdout.write(lines)
        return
    try:
        out.write_text(lines, encoding="utf-8")
    except OSError as exc:
        raise fail(f"cannot write {out}: {exc.strerror or exc}", 2) from None
    typer.echo(f"exported {len(found)} memories to {out}", err=True)


@app.command(name="import")
def import_command(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Argument(
            help="JSON Lines from `memcore export`, Mem0's export ('-': stdin), or with "
            "--from-mem0 a Mem0 server's URL"
        ),
    ],
    from_mem0: Annotated[
        bool,
        typer.Option(
            "--from-mem0", help="SOURCE is a Mem0 server (the platform, or a memcore serve)"
        ),
    ] = False,
    api_key_env: Annotated[
        str, typer.Option("--api-key-env", help="With --from-mem0: the variable with its key")
    ] = "MEM0_API_KEY",
) -> None:
    """Add the memories of an export, keeping their ids, scopes, metadata and timestamps. Ids
    the vault already holds are skipped (importing twice adds nothing); a line that is not a
    memory is named and skipped."""
    from memcore.memory.transfer import import_rows, read_rows

    if from_mem0:
        rows = list(enumerate(_from_mem0(source, api_key_env), 1))
    else:
        try:
            text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise fail(f"cannot read {source}: {exc}", 2) from None
        rows = list(read_rows(text))
    bar = _bar(len(rows))

    async def job(service: Any) -> Any:
        _markdown_only(service, "import")
        return await import_rows(service.writer, rows, bar)

    report = with_service(ctx, job)
    for number, why in report.bad:
        typer.echo(f"memcore: line {number}: {why}", err=True)
    typer.echo(report.summary())
    if report.bad:
        raise typer.Exit(1)


def _markdown_only(service: Any, what: str) -> None:
    """Export and import move the vault's own memories: refused when memories live elsewhere."""
    from memcore.core.errors import NotSupported

    if service.memories.kind != "markdown":
        raise NotSupported(
            f"memory.adapter = {service.memories.kind}: {what} moves the memories of a "
            "markdown vault (use the Mem0 server's own export)"
        )


# every memory that belongs to someone: Mem0 holds none that belongs to nobody
EVERYONE = {"OR": [{"user_id": "*"}, {"agent_id": "*"}, {"run_id": "*"}]}


def _from_mem0(host: str, api_key_env: str) -> list[Any]:
    """Every memory a Mem0 server holds, read a page at a time through the official client
    (``pip install mem0ai``)."""
    import os

    try:
        from mem0 import MemoryClient
    except ImportError:
        raise fail("--from-mem0 needs the official Mem0 client: pip install mem0ai", 2) from None
    key = os.environ.get(api_key_env)
    if not key:
        raise fail(f"--from-mem0 needs the server's API key in ${api_key_env}", 2)
    try:
        client = MemoryClient(api_key=key, host=host)
    except Exception as exc:  # the client's own errors: unreachable, refused key
        raise fail(f"cannot reach Mem0 at {host}: {' '.join(str(exc).split())}", 1) from None
    rows: list[Any] = []
    try:
        page = 1
        while True:
            answer = client.get_all(filters=EVERYONE, page=page, page_size=1000)
            rows += answer.get("results", [])
            if not answer.get("next"):
                return rows
            page += 1
    except Exception as exc:
        raise fail(f"reading Mem0 at {host} failed: {' '.join(str(exc).split())}", 1) from None
    finally:
        client.client.close()


def _bar(total: int) -> Any:
    """A progress callback drawing a bar on a terminal's stderr (nothing otherwise)."""
    if not sys.stderr.isatty() or total < 1000:
        return None
    from rich.progress import Progress

    progress = Progress(transient=True)
    task = progress.add_task("importing", total=total)
    progress.start()

    def advance(n: int) -> None:
        progress.advance(task, n)
        if progress.tasks[0].finished:
            progress.stop()

    return advance
