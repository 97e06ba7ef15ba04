"""How the command line prints a search hit, a memory, warnings and a context block: one place
for the typer commands and for the answers cli/quick.py gives, so both print the same bytes."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Iterable, Mapping

from memcore.core.words import plural

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers read it)
if TYPE_CHECKING:
    from typing import Any


def out(text: str) -> None:
    """Text to stdout, flushed (a caller may exit right after)."""
    sys.stdout.write(text)
    sys.stdout.flush()


def warn(warnings: Iterable[str]) -> None:
    for warning in warnings:
        sys.stderr.write(f"memcore: warning: {warning}\n")


def print_context(block: str, query: str) -> None:
    """The "## Relevant Memories" block, or a line on stderr when nothing was relevant."""
    if not block:
        sys.stderr.write(f"memcore: no memories relevant enough to {query!r}\n")
        return
    out(block)


def hit_text(n: int, path: str, start: int, end: int, heading: str, score: float, text: str) -> str:
    """Hit number ``n`` as two lines: where it is and its score, then its text (shortened)."""
    where = f"{n}. {path}:{start}-{end}{f'  {heading}' if heading else ''}  ({score:.3f})"
    body = textwrap.shorten(" ".join(text.split()), 300, placeholder=" ...")
    return f"{where}\n{textwrap.indent(textwrap.fill(body, 96), '   ')}"


def record_line(
    memory_id: str,
    category: str,
    scope: tuple[str | None, ...],
    key: str | None,
    strength: tuple[str, float] | None,
    text: str,
) -> str:
    """A memory in one line: id, [category scope key], strength, text. ``scope``: (user,
    agent, run[, app]); ``strength``: (tier, retrievability) when known."""
    names = " ".join(
        f"{k}={v}" for k, v in zip(("user", "agent", "run", "app"), scope, strict=False) if v
    )
    held = ""
    if strength is not None:  # " core" never decays, else " R=0.87" (retrievability now)
        held = " core" if strength[0] == "core" else f" R={strength[1]:.2f}"
    tags = " ".join(t for t in (category, names, f"key={key}" if key else "") if t)
    return f"{memory_id}  [{tags}]{held}  {text}"


def history_line(event: Mapping[str, Any]) -> str:
    """One event as `memcore history` prints it (the event dicts every front answers)."""
    change = event["new_memory"] if event["new_memory"] is not None else event["old_memory"]
    return f"{event['created_at']}  {event['event']:<7} by {event['actor']:<6}  {change}"


def entity_line(entity: Mapping[str, Any]) -> str:
    """One entity as `memcore entities` prints it (``Entity.to_dict()``'s keys)."""
    return (f"{entity['type']:<5} {entity['name']}  {entity['total_memories']} memories, "
            f"last change {entity['updated_at']}")  # fmt: skip


def print_status(info: dict[str, Any]) -> None:
    """What `memcore status` prints: a table of the status document (status --json's)."""
    from rich.console import Console  # rich loads only for output that needs it
    from rich.table import Table

    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    table.add_row("vault", info["vault"])
    if not info["indexed"]:
        table.add_row("index", f"none yet at {info['db_path']} (run `memcore index`)")
    else:
        when = (info["last_indexed"] or "never").replace("T", " ")
        table.add_row("index", f"{info['db_path']} ({_size(info['db_bytes'])}, last write {when})")
        table.add_row("engine", info["engine"])
        skipped = info["skipped"]
        files = plural(info["files"], "file") + (f", {len(skipped)} skipped" if skipped else "")
        table.add_row("files", files)
        pending = info["vectors_pending"]
        table.add_row(
            "chunks",
            f"{info['chunks']}" + (f" ({pending} waiting for vectors)" if pending else ""),
        )
        table.add_row("model", info["model_id"])
        if copies := info.get("duplicate_memories"):
            first = next(iter(copies))
            table.add_row(
                "copies",
                f"{plural(len(copies), 'memory id')} in more than one file (e.g. {first} also in "
                f"{', '.join(copies[first])}); each lives in the smallest path",
            )
        for model, count in info["other_models"].items():
            table.add_row("", f"{plural(count, 'chunk')} still embedded with {model}")
    table.add_row("watcher", _watcher_line(info["daemon"]))
    for node in info.get("nodes") or []:  # a shared index's nodes, on every machine
        role = "holds the watcher" if node["roles"] else "standing by"
        where = f" at {node['url']}" if node["url"] else ""
        table.add_row("node", f"{node['node']} ({node['kind']}{where}): {role}")
    ready = info["readiness"]
    if ready["phase"] in ("starting", "catching_up"):
        table.add_row("catch-up", f"{ready['files_done']} of {ready['files_total']} files indexed")
    console = Console()
    console.print(table)
    if info.get("skipped"):
        console.print("skipped files:", style="bold")
        for path, reason in info["skipped"].items():
            console.print(f"  {path}: {reason}", highlight=False)


def _watcher_line(daemon: dict[str, Any] | None) -> str:
    if not daemon:
        return "not running (`memcore watch --detach` starts it)"
    state = (
        "standing by (another node watches)"
        if daemon.get("role") == "standby"
        else "watching"
        if daemon.get("watching")
        else "catching up"
    )
    mode = ", polling" if daemon.get("polling") else ""
    retrying = daemon.get("retrying") or {}
    extra = f", {len(retrying)} retrying" if retrying else ""
    return f"running (pid {daemon.get('pid')}), {state}{mode}{extra}"


def _size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"
