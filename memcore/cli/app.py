"""The memcore command line on typer: global options, error-to-exit-code mapping, and the run of
one command (memcore/cli/__init__.py picks which, or answers through the daemon first)."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import os
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import typer

from memcore.cli import COMMANDS, GROUPS, command_of, configure_logging, leave_now
from memcore.core.errors import ConfigError, InputError, MemcoreError, VaultNotFound
from memcore.core.settings import Settings, load_settings

if TYPE_CHECKING:
    from memcore.embedders.helper import Helper
    from memcore.service import MemoryService

T = TypeVar("T")

app = typer.Typer(
    name="memcore",
    help="Local-first memory for AI agents: Markdown is the truth, SQLite is the index. "
    "Global options (--vault, --db, --embedder, --verbose) may also follow the command.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

# typer bundles its own click: reach its exception classes through typer's public ones.
_UsageError: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"
)
_ClickException: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


def _version(value: bool) -> None:
    if value:
        from memcore.core.version import __version__

        typer.echo(f"memcore {__version__}")
        raise typer.Exit()


@dataclass
class CliState:
    vault: Path | None = None
    overrides: dict[str, object] = field(default_factory=dict)
    verbose: bool = False
    own_process: bool = False  # the process is this command (not main() called by a program)
    graph_owed: int = 0  # vectors the command's batch left a graph owed over (finish_command)
    helper: Helper | None = None  # a process forked for the local model (cli.model_helper)

    def take_helper(self) -> Helper | None:
        """The model's helper process, for the one embedder that uses it (None: none, or
        taken already)."""
        helper, self.helper = self.helper, None
        return helper

    def global_options(self) -> list[str]:
        """The global options this command was given, to give a command it hands work to."""
        words = ["--vault", str(self.vault)] if self.vault is not None else []
        for option, key in (("--db", "storage.db"), ("--embedder", "embedder.provider"),
                            ("--memory", "memory.adapter")):  # fmt: skip
            if self.overrides.get(key):
                words += [option, str(self.overrides[key])]
        return words + (["--verbose"] if self.verbose else [])


# The command line this process runs (main: own_process; root: the options given).
_state = CliState()


@app.callback()
def root(
    ctx: typer.Context,
    vault: Annotated[
        Path | None,
        typer.Option(
            "--vault",
            "-V",
            help="Vault folder (default: $MEMCORE_VAULT, else the nearest folder at or above "
            "this one with memcore.toml, .memcore/ or MEMORY.md)",
        ),
    ] = None,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            help="Index database: a file (default: <vault>/.memcore/index.db) or a "
            "postgresql:// URL",
        ),
    ] = None,
    embedder: Annotated[
        str | None, typer.Option("--embedder", help="local, static, ollama or openai")
    ] = None,
    memory: Annotated[
        str | None,
        typer.Option("--memory", help="Where memories live: markdown (the vault), mem0 or none"),
    ] = None,
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log what memcore does (to stderr)")
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version"),
    ] = False,
) -> None:
    _state.vault = vault
    _state.overrides = {
        "storage.db": db or None,
        "embedder.provider": embedder,
        "memory.adapter": memory,
    }
    _state.verbose = verbose
    ctx.obj = _state
    configure_logging(verbose)


def settings_of(ctx: typer.Context, **extra: object) -> Settings:
    """The command's settings. With memory switched off (memory.adapter = none, or
    memory.enabled = false) every command says so in one line and ends, successfully."""
    state: CliState = ctx.obj
    settings = load_settings(state.vault, {**state.overrides, **extra})
    if settings.memory.kind == "none":
        typer.echo("memcore: memory is disabled (memory.adapter = none); nothing to do")
        raise typer.Exit(0)
    return settings


def start_batch(ctx: typer.Context) -> None:
    """A batch command (add --file, import, index) starts: run as its own process, before any
    thread starts, it keeps malloc to two arenas (``few_malloc_arenas``: less memory, faster).
    A model helper forked for a plain add is ended: a batch embeds in its own process."""
    state: CliState = ctx.obj
    helper = state.take_helper()
    if helper is not None:
        helper.discard()
    if state.own_process:
        from memcore.core.heap import few_malloc_arenas

        few_malloc_arenas()


async def use_batch(
    ctx: typer.Context,
    service: MemoryService,
    use: Callable[[MemoryService], Coroutine[Any, Any, T]],
) -> T:
    """``use(service)``; run as its own process, the command leaves a vector graph its batch
    owes to a fresh process (``finish_command``) instead of building it beside the batch."""
    state: CliState = ctx.obj
    service.builds_graph_here = not state.own_process
    try:
        return await use(service)
    finally:
        state.graph_owed = max(state.graph_owed, service.graph_owed)


def fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"memcore: {message}", err=True)
    return typer.Exit(code)


def run(ctx: typer.Context, job: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Run one command's coroutine; every error becomes one line on stderr and an exit code."""
    verbose = bool(ctx.obj and ctx.obj.verbose)
    try:
        return asyncio.run(job())
    except (VaultNotFound, InputError) as exc:
        raise fail(str(exc), 2) from None
    except ConfigError as exc:
        raise fail(f"config error: {exc}", 2) from None
    except MemcoreError as exc:
        raise fail(str(exc)) from None
    except KeyboardInterrupt:
        raise fail("interrupted", 130) from None
    except BrokenPipeError:  # what reads the output went away (`| head`): end as quietly
        _stdout_to_devnull()  # so that the interpreter's last flush does not fail again
        raise typer.Exit(128 + 13) from None  # as a tool ended by SIGPIPE does
    except (typer.Exit, typer.Abort):
        raise
    except Exception as exc:
        if verbose:
            raise
        raise fail(
            f"internal error: {type(exc).__name__}: {exc} (rerun with --verbose for details)"
        ) from None


def _stdout_to_devnull() -> None:
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)


def _import_commands(argv: list[str]) -> None:
    """Import the module of the command in ``argv``; all of them when there is none (help,
    a typo: the whole list is shown, grouped and in one order: GROUPS)."""
    import importlib

    name = command_of(argv)
    modules = [COMMANDS[name]] if name in COMMANDS else sorted(set(COMMANDS.values()))
    for module in modules:
        importlib.import_module(f"memcore.cli.{module}")
    _arrange()


def _arrange() -> None:
    """Each command in its --help panel (Read, Write, Run, Admin), in GROUPS' order, with its
    help text as paragraphs (a docstring's line breaks are not the terminal's)."""
    order = [n for names in GROUPS.values() for n in names]
    panel = {n: group for group, names in GROUPS.items() for n in names}
    for command in app.registered_commands:
        command.rich_help_panel = panel.get(_name(command), "Other")
        command.help = reflow(command.help or inspect.getdoc(command.callback) or "")
    for group in app.registered_groups:
        group.rich_help_panel = panel.get(str(group.name), "Other")
        inner = group.typer_instance.info if group.typer_instance else None
        text = group.help or (inner.help if inner is not None else None)
        group.help = reflow(text) if isinstance(text, str) else text

    def place(name: str) -> int:
        return order.index(name) if name in order else len(order)

    app.registered_commands.sort(key=lambda c: place(_name(c)))
    app.registered_groups.sort(key=lambda g: place(str(g.name)))


def reflow(text: str) -> str:
    """Paragraphs as single lines (a blank line between them stays)."""
    paragraphs = [" ".join(p.split()) for p in text.strip().split("\n\n")]
    return "\n\n".join(p for p in paragraphs if p)


def _command_for(name: str | None) -> Any:
    """The click command to run: only ``name``'s when it is one (typer builds every command
    it knows, each from its signature: ~25 ms for the memory module's), else all of them."""
    if name not in COMMANDS:
        return typer.main.get_command(app)
    only = copy.copy(app)  # the app itself keeps them all (main may run again in-process)
    only.registered_commands = [c for c in app.registered_commands if _name(c) == name]
    only.registered_groups = [g for g in app.registered_groups if g.name == name]
    return typer.main.get_command(only)


def _name(command: Any) -> str:
    """The name typer gives a registered command (its function's, with dashes)."""
    return str(command.name or command.callback.__name__.lower().replace("_", "-"))


def main(argv: list[str], own_process: bool = False, helper: Helper | None = None) -> None:
    """Run the command line ``argv`` (global options hoisted) on typer: every usage error is
    one line on stderr and exit code 2. ``own_process``: the process is this command, and may
    end by becoming another (``finish_command``). ``helper``: a process forked for the local
    model, for an add that embeds (``with_service``); ended when the command is done."""
    global _state
    _state = CliState(own_process=own_process, helper=helper)
    try:
        code = _run_command(argv)
    finally:
        if helper is not None:
            helper.discard()
    if _state.graph_owed:
        finish_command(_state, code)
    if own_process and not _threads_at_work():
        leave_now(code)  # done and closed: tearing the interpreter down only delays the exit
    sys.exit(code)


def _run_command(argv: list[str]) -> int:
    """The exit code of the command line ``argv`` run on typer."""
    _import_commands(argv)
    command = _command_for(command_of(argv))
    try:
        code = command.main(argv, prog_name="memcore", standalone_mode=False)
    except _UsageError as exc:
        ctx = getattr(exc, "ctx", None)
        if type(exc).__name__ == "NoArgsIsHelpError":
            sys.exit(2)  # `memcore` alone (or `memcore service`): typer printed the help
        where = ctx.command_path if ctx is not None else "memcore"
        message = exc.format_message().rstrip(".")  # type: ignore[attr-defined]
        typer.echo(f"memcore: {message} (see `{where} --help`)", err=True)
        code = 2
    except _ClickException as exc:
        typer.echo(f"memcore: {exc.format_message()}", err=True)  # type: ignore[attr-defined]
        code = exc.exit_code  # type: ignore[attr-defined]
    except typer.Abort:
        typer.echo("memcore: interrupted", err=True)
        code = 130
    return code if isinstance(code, int) else 0


def _threads_at_work() -> bool:
    """Threads Python's own exit would wait for (not daemon threads): their work may not be
    done, so the process ends the ordinary way, after them. A command's event loop has
    closed the index and joined its workers by the time it returns, so normally none."""
    import threading

    main = threading.main_thread()
    return any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate())


def finish_command(state: CliState, code: int) -> NoReturn:
    """End a batch command that left a vector graph owed by becoming the process that builds
    it (``memcore prepare-search``, ending with the batch's ``code``): the same process, so
    whoever waits for the command waits for the graph, but a fresh image, so the build's
    memory (~0.6 GB at 1M vectors) never adds to the batch's (~0.8 GB)."""
    import logging
    import os
    import subprocess

    # the same memcore as this process runs (memcore/cli/app.py), wherever it started (-P)
    here = str(Path(__file__).resolve().parents[2])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        [here, *filter(None, [os.environ.get("PYTHONPATH")])])}  # fmt: skip
    argv = [sys.executable, "-P", "-m", "memcore", *state.global_options(), "prepare-search",
            "--exit-code", str(code)]  # fmt: skip
    logging.getLogger("memcore").info("building the vector graph in a fresh process")
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        if os.name == "posix":
            os.execve(sys.executable, argv, env)
        sys.exit(subprocess.call(argv, env=env))  # no exec elsewhere: a child, waited for
    except OSError as exc:
        typer.echo(f"memcore: the vector graph was not built ({exc}): the next search "
                   "or `memcore index` builds it", err=True)  # fmt: skip
        sys.exit(code)
