"""The `memcore` entry point: reads the command line, answers the plain forms of search, context
and add without typer (cli/quick.py: through a running daemon, or a search or context by
opening the index itself), and hands everything else to typer (cli/app.py).

This module imports nothing heavy: a one-shot command that the daemon answers never loads
typer, asyncio, the settings or the models.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Collection

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers read it)
if TYPE_CHECKING:
    from typing import NoReturn

    from memcore.embedders.helper import Helper

# Global options a user may also put after the command (`memcore search x --vault DIR`):
# main() moves them in front of it, where click expects them.
GLOBAL_VALUE_OPTIONS = frozenset({"--vault", "-V", "--db", "--embedder", "--memory"})
GLOBAL_FLAGS = frozenset({"--verbose", "-v"})

# Each command and the module that defines it: a run imports only its command's module (every
# module costs imports and typer's work to build it; tests/test_cli.py keeps this table true).
COMMANDS = {
    **dict.fromkeys(("add", "get", "list", "update", "forget", "restore", "reinforce",
                     "history", "count", "conversation"), "memory"),
    **dict.fromkeys(("entities", "feedback"), "entities"),
    **dict.fromkeys(("init", "index", "reindex", "status", "migrate", "prepare-search"),
                    "index"),
    **dict.fromkeys(("search", "context"), "search"),
    **dict.fromkeys(("watch", "stop", "service"), "watch"),
    **dict.fromkeys(("export", "import"), "transfer"),
    "hook": "hook", "mcp": "mcp", "serve": "serve", "write": "notes",
}  # fmt: skip
# How --help groups the commands, in this order everywhere (`memcore`, `memcore --help`)
GROUPS = {
    "Read": ("search", "context", "list", "get", "count", "history", "entities", "status"),
    "Write": ("add", "update", "forget", "restore", "reinforce", "feedback", "conversation",
              "write", "import", "export"),
    "Run": ("serve", "watch", "stop", "mcp", "service", "hook"),
    "Admin": ("init", "index", "reindex", "migrate"),
}  # fmt: skip


def hoist_global_options(args: list[str], commands: Collection[str] = COMMANDS) -> list[str]:
    """Move global options found after the command in front of it (up to a ``--``)."""
    at, i = None, 0
    while i < len(args) and at is None:
        if args[i] in GLOBAL_VALUE_OPTIONS:
            i += 1  # its value is not a command, even when it reads like one
        elif args[i] in commands:
            at = i
        i += 1
    if at is None:
        return args
    front, rest, tail = list(args[:at]), [args[at]], list(args[at + 1 :])
    i = 0
    while i < len(tail):
        arg = tail[i]
        name = arg.split("=", 1)[0]
        if arg == "--":
            rest += tail[i:]
            break
        if (name in GLOBAL_VALUE_OPTIONS and "=" in arg) or arg in GLOBAL_FLAGS:
            front.append(arg)
        elif arg in GLOBAL_VALUE_OPTIONS and i + 1 < len(tail):
            front += [arg, tail[i + 1]]
            i += 1
        else:
            rest.append(arg)
        i += 1
    return front + rest


def command_of(argv: list[str]) -> str | None:
    """The first word that is not a global option or its value (they come first: hoisted)."""
    i = 0
    while i < len(argv) and argv[i] != "--":
        if argv[i] in GLOBAL_VALUE_OPTIONS:
            i += 2
        elif argv[i].startswith("-"):
            i += 1
        else:
            return argv[i]
    return None


def configure_logging(verbose: bool) -> None:
    """Warnings (and with --verbose memcore's own debug lines) on stderr; the libraries under
    memcore (aiosqlite, asyncio) stay at warnings."""
    import logging

    from memcore.core.redact import redact_log_records

    redact_log_records()
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    logging.getLogger("memcore").setLevel(logging.DEBUG if verbose else logging.WARNING)


READER_GONE = 1  # the exit code of a command whose reader went away (`| head -1`), as click has it


def leave_now(code: int) -> NoReturn:
    """End the process with ``code`` without tearing the interpreter down, for a command run as
    its own process once it is done: its output printed, the index closed, its files written
    and closed. Unloading numpy, onnxruntime and the rest module by module only delays the
    prompt (~35 ms of a one-shot search, ~33 ms of an `add`). Logging and the standard streams
    are flushed first, as an ordinary exit would."""
    logging = sys.modules.get("logging")  # never imported: nothing was logged (~6 ms spared)
    if logging is not None:
        logging.shutdown()
    try:
        sys.stdout.flush()
    except OSError:  # the reader is gone
        code = code or READER_GONE
    with contextlib.suppress(OSError):
        sys.stderr.flush()
    os._exit(code)


def model_helper(argv: list[str]) -> Helper | None:
    """For a search, context or add with no daemon holding the vault, a helper process that
    loads the local model beside this command's own start (embedders/helper.py), forked
    before the rest is imported: a plain search took 228 ms where it took 270 (bench/cli.py's
    case, in turn), an add of a new memory 248 ms where it took 339. With a daemon there is
    none: the daemon embeds, and a helper started and killed would take ~4 ms of a 40 ms
    answer (and more of an add's). The command ends it at once when it does not need it
    (another embedder is set, typer runs another command)."""
    if command_of(argv) not in ("search", "context", "add"):
        return None
    from memcore.core.errors import MemcoreError
    from memcore.core.places import resolve_vault
    from memcore.fronts.daemon_state import vault_daemon

    try:
        if vault_daemon(resolve_vault(_vault_flag(argv), os.environ)):
            return None  # a daemon holds the vault
    except (MemcoreError, OSError):
        return None  # the command says what is wrong
    from memcore.embedders.helper import Helper

    return Helper.start()


def _vault_flag(argv: list[str]) -> str | None:
    """The --vault (-V) value among the global options (hoisted: before the command)."""
    for i, word in enumerate(argv):
        if word in ("--vault", "-V"):
            return argv[i + 1] if i + 1 < len(argv) else None
        if word.startswith("--vault="):
            return word.partition("=")[2]
        if not word.startswith("-") and (i == 0 or argv[i - 1] not in GLOBAL_VALUE_OPTIONS):
            return None  # the command: the global options end here
    return None


def one_blas_thread() -> None:
    """numpy's OpenBLAS in one thread, unless the environment says otherwise; set before
    anything imports numpy. memcore calls nothing that BLAS splits over threads (vector scans
    are ``np.vecdot`` on the calling thread: core/vectors.cosines), and starting the pool took
    ~35 ms of a one-shot `memcore search` on two cores (bench/cli.py: 271-285 ms median
    against 236-241). A program that imports memcore as a library keeps its own setting."""
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def main(args: list[str] | None = None) -> None:
    """The `memcore` command: exits with the command's code (2 for a usage error). A reader
    that stops reading (`memcore search x | head -1`) ends it quietly with code 1, as click
    ends the typer commands."""
    one_blas_thread()
    try:
        _main(args)
    except BrokenPipeError:
        # Python would complain once more flushing stdout on exit: point it at nothing.
        with contextlib.suppress(OSError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(READER_GONE)


def _main(args: list[str] | None) -> None:
    argv = hoist_global_options(list(sys.argv[1:] if args is None else args))
    if command_of(argv) is None and "--version" in argv and not {"--help", "-h"} & set(argv):
        from memcore.core.version import __version__

        sys.stdout.write(f"memcore {__version__}\n")
        sys.exit(0)
    helper = model_helper(argv) if args is None else None
    from memcore.cli import quick

    try:
        code = quick.answer(argv, helper)
    except BaseException:
        if helper is not None:
            helper.discard()
        raise
    if helper is not None and (code is not None or command_of(argv) != "add"):
        helper.discard()  # done with, or typer runs a command that does not use it
        helper = None
    if code is not None:
        if args is None:  # the process is the command: nothing else runs after it
            leave_now(code)
        sys.exit(code)
    from memcore.cli import app
    from memcore.core.channel import VIA

    VIA.set("cli")  # what this command changes, the history attributes to the CLI
    app.main(argv, own_process=args is None, helper=helper)
