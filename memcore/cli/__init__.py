"""The memcore command line: global options, error-to-exit-code mapping, command registry."""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer

from memcore.errors import ConfigError, MemcoreError
from memcore.settings import Settings, load_settings

T = TypeVar("T")

app = typer.Typer(
    name="memcore",
    help="Local-first memory for AI agents: Markdown is the truth, SQLite is the index.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@dataclass
class CliState:
    vault: Path | None = None
    overrides: dict[str, object] = field(default_factory=dict)
    verbose: bool = False


@app.callback()
def root(
    ctx: typer.Context,
    vault: Annotated[
        Path | None,
        typer.Option("--vault", "-V", help="Vault folder (default: $MEMCORE_VAULT, else .)"),
    ] = None,
    db: Annotated[
        Path | None,
        typer.Option("--db", help="Index database (default: <vault>/.memcore/index.db)"),
    ] = None,
    embedder: Annotated[
        str | None, typer.Option("--embedder", help="local, static, ollama or openai")
    ] = None,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Debug logging")] = False,
) -> None:
    ctx.obj = CliState(
        vault=vault,
        overrides={"storage.db": str(db) if db else None, "embedder.provider": embedder},
        verbose=verbose,
    )
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def settings_of(ctx: typer.Context, **extra: object) -> Settings:
    state: CliState = ctx.obj
    return load_settings(state.vault, {**state.overrides, **extra})


def fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"memcore: {message}", err=True)
    return typer.Exit(code)


def run(ctx: typer.Context, job: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run one command's coroutine; every error becomes one line on stderr and an exit code."""
    verbose = bool(ctx.obj and ctx.obj.verbose)
    try:
        return asyncio.run(job())
    except ConfigError as exc:
        raise fail(f"config error: {exc}", 2) from None
    except MemcoreError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        raise fail("interrupted", 130) from None
    except (typer.Exit, typer.Abort):
        raise
    except Exception as exc:
        if verbose:
            raise
        raise fail(
            f"internal error: {type(exc).__name__}: {exc} (rerun with --verbose for details)"
        ) from None


def main() -> None:
    from memcore.cli import index, search, watch  # noqa: F401 - registers the commands

    app()
