"""`memcore write`: seed 003's write_memory on the command line, Markdown appended to a vault
file (MEMORY.md unless --file names another), indexed before it returns."""

from __future__ import annotations

from typing import Annotated

import typer

from memcore.cli.app import app, fail
from memcore.cli.service_use import with_service


@app.command()
def write(
    ctx: typer.Context,
    content: Annotated[str, typer.Argument(help="Markdown to append ('-' reads stdin)")],
    file: Annotated[
        str, typer.Option("--file", help="The vault file (MEMORY.md or memory/**/*.md)")
    ] = "MEMORY.md",
) -> None:
    """Append a block of Markdown to a vault file (created if missing) and index it."""
    text = typer.get_text_stream("stdin").read() if content == "-" else content
    if not text.strip():
        raise fail("nothing to write: the text is blank", 2)
    path = with_service(ctx, lambda s: s.memories.write_memory(text, file))
    typer.echo(f"wrote to {path}")
