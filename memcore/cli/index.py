"""Commands that build and inspect the index: init, index, reindex, status."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from memcore.app import ensure_state_dir, open_service
from memcore.cli import app, run, settings_of
from memcore.daemon import daemon_status
from memcore.models import IndexReport
from memcore.settings import VAULT_CONFIG, load_settings

MEMORY_TEMPLATE = """# Memory

Long-term memory for this workspace. Agents and people both edit this file; memcore indexes it.

## Facts

## Preferences

## Projects
"""

CONFIG_TEMPLATE = """# memcore settings for this vault. Every key is optional; defaults are shown.
# Endpoints, API keys and the database location belong in your user config
# (~/.config/memcore/config.toml) or the environment, never in a vault file.

[index]
# include = ["MEMORY.md", "memory.md", "memory/**/*.md"]
# exclude = []
# chunk_tokens = 200
# overlap_tokens = 25
# split = "window"     # window: pack paragraphs up to chunk_tokens; paragraph: one chunk each

[embedder]
# provider = "local"   # local (MiniLM int8 ONNX), static (model2vec), ollama

[search]
# fusion = "adaptive"  # adaptive, rrf, weighted, linear, vector, keyword
# limit = 5
"""


def _progress_bar(enabled: bool) -> Progress | None:
    if not enabled or not sys.stderr.isatty():
        return None
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=Console(stderr=True),
        transient=True,
    )


def _print_report(report: IndexReport, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps(report.to_dict(), ensure_ascii=False, indent=2))
    else:
        typer.echo(report.summary())
    for failure in report.failed:
        typer.echo(f"memcore: skipped {failure.path}: {failure.reason}", err=True)
    for warning in report.warnings:
        typer.echo(f"memcore: warning: {warning}", err=True)


def _index(ctx: typer.Context, full: bool, as_json: bool) -> None:
    async def job() -> IndexReport:
        settings = settings_of(ctx)
        bar = _progress_bar(not as_json)
        tasks: dict[str, TaskID] = {}

        def progress(phase: str, done: int, total: int) -> None:
            if bar is None:
                return
            if phase not in tasks:
                label = "Indexing files" if phase == "files" else "Embedding chunks"
                tasks[phase] = bar.add_task(label, total=total)
            bar.update(tasks[phase], completed=done, total=total)

        async with open_service(settings) as service:
            if bar is not None:
                bar.start()
            try:
                return await service.index(full=full, progress=progress)
            finally:
                if bar is not None:
                    bar.stop()

    _print_report(run(ctx, job), as_json)


@app.command()
def index(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON")] = False,
) -> None:
    """Bring the index up to date with the vault (only changed files are read)."""
    _index(ctx, full=False, as_json=as_json)


@app.command()
def reindex(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON")] = False,
) -> None:
    """Rebuild the index from the Markdown (cached embeddings are reused)."""
    _index(ctx, full=True, as_json=as_json)


@app.command()
def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON")] = False,
) -> None:
    """Show what is indexed: files, chunks, pending vectors, model, size, daemon."""

    async def job() -> dict[str, object]:
        settings = settings_of(ctx)
        async with open_service(settings) as service:
            info = (await service.status()).to_dict()
        info["vault"] = str(settings.vault)
        info["daemon"] = daemon_status(settings)
        return info

    info = run(ctx, job)
    if as_json:
        typer.echo(json.dumps(info, ensure_ascii=False, indent=2))
        return
    table = Table(show_header=False, box=None)
    for key, value in info.items():
        table.add_row(key, str(value))
    Console().print(table)


@app.command()
def init(
    ctx: typer.Context,
    directory: Annotated[Path, typer.Argument(help="Vault folder to create")] = Path("."),
) -> None:
    """Create a vault skeleton: MEMORY.md, memory/, memcore.toml and the .memcore index folder."""

    async def job() -> list[str]:
        directory.mkdir(parents=True, exist_ok=True)
        created = []
        for rel, content in (("MEMORY.md", MEMORY_TEMPLATE), (VAULT_CONFIG, CONFIG_TEMPLATE)):
            target = directory / rel
            if not target.exists():
                target.write_text(content, encoding="utf-8")
                created.append(rel)
        if not (directory / "memory").exists():
            (directory / "memory").mkdir()
            created.append("memory/")
        ensure_state_dir(load_settings(directory, ctx.obj.overrides))
        return created

    created = run(ctx, job)
    where = directory.resolve()
    typer.echo(f"vault ready at {where}" + (f" (created {', '.join(created)})" if created else ""))
