"""How the command line prints a search hit, a memory, warnings and a context block: one place
for the typer commands and for the answers cli/quick.py gives, so both print the same bytes."""

from __future__ import annotations

import os
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
    heading = f"  {_visible(heading)}" if heading else ""
    where = f"{n}. {_visible(path)}:{start}-{end}{heading}  ({score:.3f})"
    body = textwrap.shorten(_visible(" ".join(text.split())), 300, placeholder=" ...")
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
    return _shown(f"{memory_id}  [{tags}]{held}  {text}")


def history_line(event: Mapping[str, Any]) -> str:
    """One event as `memcore history` prints it (the event dicts every front answers)."""
    change = event["new_memory"] if event["new_memory"] is not None else event["old_memory"]
    return _shown(f"{event['created_at']}  {event['event']:<7} by {event['actor']:<6}  {change}")


def entity_line(entity: Mapping[str, Any]) -> str:
    """One entity as `memcore entities` prints it (``Entity.to_dict()``'s keys)."""
    return _shown(f"{entity['type']:<5} {entity['name']}  {entity['total_memories']} memories, "
                  f"last change {entity['updated_at']}")  # fmt: skip


def print_status(info: dict[str, Any]) -> None:
    """What `memcore status` prints: the status document (status --json's) as two columns,
    each value as it is (a path with ``[brackets]`` is a path, not markup), labels in bold
    on a terminal."""
    rows = _status_rows(info)
    width = max(len(label) for label, _ in rows)
    bold = _bold if _styled(sys.stdout) else str
    lines = [f"{bold(label.ljust(width))}  {_visible(value)}".rstrip() for label, value in rows]
    if info.get("skipped"):
        lines.append(bold("skipped files:"))
        lines += [f"  {_visible(f'{path}: {reason}')}" for path, reason in info["skipped"].items()]
    out("\n".join(lines) + "\n")


def _status_rows(info: dict[str, Any]) -> list[tuple[str, str]]:
    """The status document as (label, value) rows, in the order `memcore status` shows them."""
    rows = [("vault", info["vault"])]
    if not info["indexed"]:
        rows.append(("index", f"none yet at {info['db_path']} (run `memcore index`)"))
    else:
        when = (info["last_indexed"] or "never").replace("T", " ")
        rows.append(("index", f"{info['db_path']} ({_size(info['db_bytes'])}, last write {when})"))
        rows.append(("engine", info["engine"]))
        skipped = info["skipped"]
        files = plural(info["files"], "file") + (f", {len(skipped)} skipped" if skipped else "")
        rows.append(("files", files))
        pending = info["vectors_pending"]
        waiting = f" ({pending} waiting for vectors)" if pending else ""
        rows.append(("chunks", f"{info['chunks']}{waiting}"))
        rows.append(("model", info["model_id"]))
        if copies := info.get("duplicate_memories"):
            first = next(iter(copies))
            also = ", ".join(copies[first])
            rows.append(
                (
                    "copies",
                    f"{plural(len(copies), 'memory id')} in more than one file (e.g. {first} also "
                    f"in {also}); each lives in the smallest path",
                )
            )
        for model, count in info["other_models"].items():
            rows.append(("", f"{plural(count, 'chunk')} still embedded with {model}"))
    rows.append(("watcher", _watcher_line(info["daemon"])))
    for node in info.get("nodes") or []:  # a shared index's nodes, on every machine
        role = "holds the watcher" if node["roles"] else "standing by"
        where = f" at {node['url']}" if node["url"] else ""
        rows.append(("node", f"{node['node']} ({node['kind']}{where}): {role}"))
    ready = info["readiness"]
    if ready["phase"] in ("starting", "catching_up"):
        rows.append(("catch-up", f"{ready['files_done']} of {ready['files_total']} files indexed"))
    return rows


def _styled(stream: Any) -> bool:
    """Whether to print bold to ``stream``: a terminal, and NO_COLOR (no-color.org) unset."""
    isatty = getattr(stream, "isatty", None)
    on_terminal = bool(isatty and isatty())
    return on_terminal and not os.environ.get("NO_COLOR") and os.environ.get("TERM") != "dumb"


# What a vault holds (a file's name, a memory's text) may hold an escape sequence, which must
# not restyle or clear the terminal it is shown on: control characters print as their escapes
# (``_shown`` keeps a memory's line breaks and tabs; a search hit's text has none left).
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x20), *range(0x7F, 0xA0))}
_UNSAFE = {c: e for c, e in _CONTROLS.items() if chr(c) not in "\n\t"}


def _visible(text: str) -> str:
    return text.translate(_CONTROLS)


def _shown(text: str) -> str:
    return text.translate(_UNSAFE)


def _bold(text: str) -> str:
    return f"\x1b[1m{text}\x1b[0m"


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
