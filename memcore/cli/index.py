"""Commands that build and inspect the index: init, index, reindex, status, migrate."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.progress import Progress, TaskID

    from memcore.service import MemoryService

from memcore.cli.app import app, fail, run, settings_of, start_batch, use_batch
from memcore.cli.output import print_status
from memcore.compose import ensure_state_dir, index_exists, open_service
from memcore.core.models import IndexReport
from memcore.core.places import VAULT_CONFIG
from memcore.core.settings import load_settings
from memcore.core.words import plural
from memcore.fronts.daemon_state import daemon_status

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
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

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
    start_batch(ctx)

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

        building = _building_bar(bar)

        async def index_all(service: MemoryService) -> IndexReport:
            with _shown(bar):
                report = await service.index(full=full, progress=progress)
                await service.prepare_search(building)  # a big vault's graph, saved for later
                return report

        async with open_service(settings, catch_up=False) as service:
            return await use_batch(ctx, service, index_all)

    _print_report(run(ctx, job), as_json)


def _shown(bar: Progress | None) -> contextlib.AbstractContextManager[object]:
    """The bar on screen while the block runs (rich's Progress starts and stops as one)."""
    return bar if bar is not None else contextlib.nullcontext()


def _building_bar(bar: Progress | None) -> Callable[[int], None]:
    def building(vectors: int) -> None:
        if bar is not None:
            bar.add_task(f"Building the vector graph of {vectors:,} chunks", total=None)

    return building


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


@app.command(name="prepare-search", hidden=True)
def prepare_search(
    ctx: typer.Context,
    exit_code: Annotated[int, typer.Option("--exit-code", hidden=True)] = 0,
) -> None:
    """Build and save the vector graph a big index owes, if it owes one: what `index`, `add
    --file` and `import` become at their end (ending with their exit code), so that the
    build's memory is not added to the batch's."""

    start_batch(ctx)

    async def job() -> None:
        bar = _progress_bar(True)
        async with open_service(settings_of(ctx), create=False, catch_up=False) as service:
            with _shown(bar):
                await service.prepare_search(_building_bar(bar))

    run(ctx, job)
    raise typer.Exit(exit_code)


@app.command()
def migrate(
    ctx: typer.Context,
    to: Annotated[
        str, typer.Option("--to", help="Where to copy: a postgresql:// URL or an index.db path")
    ],
    namespace: Annotated[
        str | None,
        typer.Option("--namespace", help="Namespace in PostgreSQL (default: this vault's)"),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON")] = False,
) -> None:
    """Copy this vault's index to PostgreSQL or a SQLite file, vectors included (nothing is
    embedded again). Then point storage.url (or storage.db) at the copy."""
    from memcore.compose import build_store
    from memcore.core.settings import is_postgres_url
    from memcore.index.migrate import copy_index

    where: dict[str, object] = {"storage.url": to, "storage.db": ""}
    if not is_postgres_url(to):
        path = Path(to).expanduser().resolve()
        where = {"storage.url": "", "storage.db": str(path)}
        if not path.parent.is_dir():
            raise fail(f"folder {path.parent} does not exist", 2)
    if namespace:
        where["storage.namespace"] = namespace

    async def job() -> dict[str, object]:
        settings = settings_of(ctx)
        if not index_exists(settings):
            raise fail(f"no index yet at {settings.index_location}; run `memcore index` first")
        target = settings_of(ctx, **where)
        if target.index_location == settings.index_location:
            raise fail(f"{to} is the index being copied", 2)

        def progress(done: int, total: int) -> None:
            typer.echo(f"copied {done}/{total} files", err=True)

        async with build_store(settings) as source, build_store(target) as dest:
            report = await copy_index(source, dest, "", progress=progress)
        return {"to": target.index_location, **dataclasses.asdict(report)}

    info = run(ctx, job)
    if as_json:
        typer.echo(json.dumps(info, indent=2))
        return
    typer.echo(
        f"Copied {plural(int(str(info['files'])), 'file')} ({info['chunks']} chunks, "
        f"{info['vectors']} vectors, {info['skipped']} skipped-file records) to {info['to']}"
    )


@app.command()
def status(
    ctx: typer.Context,
    as_json: Annotated[bool, typer.Option("--json", help="Print as JSON")] = False,
) -> None:
    """Show what is indexed: files, chunks, pending vectors, model, size, skipped files, watcher."""

    async def job() -> dict[str, object]:
        settings = settings_of(ctx)
        daemon = daemon_status(settings)
        info: dict[str, object] = {"vault": str(settings.vault), "indexed": False}
        if index_exists(settings):
            async with open_service(settings, create=False, catch_up=False) as service:
                info = await service.status_document()
        else:
            info |= {"db_path": str(settings.db_path), "readiness": NOT_INDEXED}
        if daemon and "readiness" in daemon:  # the running watcher's catch-up, live
            info["readiness"] = daemon["readiness"]
        info["daemon"] = daemon
        return info

    info = run(ctx, job)
    if as_json:
        typer.echo(json.dumps(info, ensure_ascii=False, indent=2))
        return
    print_status(info)


NOT_INDEXED = {"phase": "not_indexed", "files_done": 0, "files_total": 0}


@app.command()
def init(
    ctx: typer.Context,
    directory: Annotated[
        Path | None,
        typer.Argument(help="Vault folder to create (default: --vault, else the current folder)"),
    ] = None,
) -> None:
    """Create a vault: MEMORY.md, memory/, memcore.toml and .memcore/ (the index folder)."""
    target = directory or ctx.obj.vault or Path(".")
    if target.exists() and not target.is_dir():
        raise fail(f"{target} is a file; init needs a folder", 2)

    async def job() -> list[str]:
        target.mkdir(parents=True, exist_ok=True)
        created = []
        if not any((target / name).exists() for name in ("MEMORY.md", "memory.md")):
            (target / "MEMORY.md").write_text(MEMORY_TEMPLATE, encoding="utf-8")
            created.append("MEMORY.md")
        if not (target / VAULT_CONFIG).exists():
            (target / VAULT_CONFIG).write_text(CONFIG_TEMPLATE, encoding="utf-8")
            created.append(VAULT_CONFIG)
        if not (target / "memory").exists():
            (target / "memory").mkdir()
            created.append("memory/")
        settings = load_settings(target, ctx.obj.overrides)
        had_state = settings.state_dir.exists()
        ensure_state_dir(settings)
        if not had_state and settings.state_dir.exists():
            created.append(".memcore/")
        return created

    created = run(ctx, job)
    where = target.resolve()
    typer.echo(f"vault ready at {where}" + (f" (created {', '.join(created)})" if created else ""))
