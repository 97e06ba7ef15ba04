"""`memcore export` and `memcore import`: every memory as JSON Lines, and back."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import IO, Annotated, Any

import typer

from memcore.cli.app import app, fail, start_batch
from memcore.cli.service_use import with_service


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

    async def write(service: Any, sink: IO[str]) -> int:
        _markdown_only(service, "export")
        count = 0
        async for row in export_rows(service.writer, history):
            sink.write(json.dumps(row, ensure_ascii=False) + "\n")
            count += 1
        return count

    if out is None:
        with_service(ctx, lambda service: write(service, sys.stdout), writes=False)
        return
    # written beside OUT and put in its place when whole: a failed export leaves what was there
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as sink:
            count = with_service(ctx, lambda service: write(service, sink), writes=False)
        os.replace(tmp, out)
    except OSError as exc:
        raise fail(f"cannot write {out}: {exc.strerror or exc}", 2) from None
    finally:
        tmp.unlink(missing_ok=True)
    typer.echo(f"exported {count} memories to {out}", err=True)


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
    the vault already holds are skipped (importing twice adds nothing, and a stopped import
    run again adds the rest); a line that is not a memory is named and skipped."""
    from memcore.cli.add_file import CHUNK_LINES
    from memcore.cli.import_file import Source, open_source
    from memcore.core.errors import MemcoreError
    from memcore.memory.transfer import ImportReport, import_rows, in_parts

    start_batch(ctx)
    source_rows: Source | None = None
    if not from_mem0:
        try:
            source_rows = open_source(source)
        except OSError as exc:
            raise fail(f"cannot read {source}: {exc.strerror or exc}", 2) from None
        except MemcoreError as exc:
            raise fail(f"cannot read {source}: {exc}", 2) from None
    key = _api_key(api_key_env) if from_mem0 else ""
    report = ImportReport()

    async def job(service: Any) -> None:
        nonlocal source_rows
        _markdown_only(service, "import")
        if source_rows is None:
            rows = list(enumerate(await _from_mem0(source, key), 1))
            source_rows = Source(in_parts(rows, CHUNK_LINES), len(rows))
        async with service.bulk(source_rows.rows or 0):  # vector indexes and graph after all
            await import_rows(service.writer, source_rows.parts, _bar(source_rows.rows), report)

    try:
        with_service(ctx, job)
    except typer.Exit:
        if report.added:
            typer.echo(
                f"memcore: {report.added} memories went in before the failure; the same import "
                "run again adds the rest (ids already there are skipped)",
                err=True,
            )
        raise
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


def _api_key(variable: str) -> str:
    import os

    key = os.environ.get(variable)
    if not key:
        raise fail(f"--from-mem0 needs the server's API key in ${variable}", 2)
    return key


async def _from_mem0(host: str, key: str) -> list[Any]:
    """Every memory a Mem0 server holds, through the mem0 adapter (the official client)."""
    from memcore.memory.mem0_remote import Mem0Memory
    from memcore.memory.transfer import memory_rows

    remote = Mem0Memory(host, key)
    try:
        return await memory_rows(remote)
    finally:
        await remote.aclose()


def _bar(total: int | None) -> Any:
    """A progress callback drawing a bar on a terminal's stderr (nothing otherwise, or when
    the total is not known: stdin)."""
    if not sys.stderr.isatty() or total is None or total < 1000:
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
