"""Plain `search`, `context` and `add`, and the reads `list`, `count`, `get`, `history`,
`entities` and `status`, answered without typer: through the vault's running daemon
before asyncio, numpy, the settings or the models are imported (little more than starting
Python), and a search or context with no daemon in this process, by the calls the typer
command makes (cli/reads.py), with the model loading in a thread from the moment the settings
are read.

It answers only when it can answer exactly as the typer command would, and returns None
otherwise, for the command to run on typer as always (cli/app.py):
- the command line is a plain form: one text argument and only the options below (no other
  global option than --vault, no stdin, no repeated option);
- through the daemon: a daemon holds the vault, and its settings were read from the same
  inputs as this command's would be (places.config_inputs: the same config files unchanged,
  MEMCORE_* variables and flags), so it searches the same index with the same model;
- the answer is a success. An error (the daemon's or the index's), or a search the daemon
  found nothing for (the typer command tells an empty index from no match), is left to the
  typer command, which asks again and words it; only an add that reached the daemon and was
  not refused (the exchange broke off, the daemon failed or answered something unreadable) is
  reported here, as the typer command would report it, because repeating it could add twice.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from urllib.parse import quote

from memcore.cli import configure_logging
from memcore.cli.output import (
    entity_line,
    history_line,
    hit_text,
    out,
    print_context,
    print_status,
    record_line,
    warn,
)
from memcore.core.errors import MemcoreError
from memcore.core.places import config_inputs, inputs_digest, resolve_vault
from memcore.fronts.daemon_state import vault_daemon
from memcore.fronts.unix_http import DaemonGone, error_message, get_unix, post_unix

SCOPES = {"--user": "user_id", "--agent": "agent_id", "--run": "run_id", "--app": "app_id"}
# The options each command's plain form may carry: option -> the field it sets (--json, a flag)
FORMS: dict[str, dict[str, str]] = {
    "search": {**SCOPES, "--limit": "limit", "-n": "limit", "--json": "json"},
    "context": {**SCOPES, "--limit": "limit", "-n": "limit"},
    "add": dict(SCOPES),
    "list": {**SCOPES, "--category": "category", "--limit": "limit", "-n": "limit",
             "--offset": "offset", "--json": "json"},
    "count": {**SCOPES, "--category": "category", "--json": "json"},
    "get": {"--json": "json"},
    "history": {"--json": "json"},
    "entities": {"--json": "json"},
    "status": {},  # the table (--json is left to typer: its document, keys in its order)
}  # fmt: skip
TEXTS = {"list": 0, "count": 0, "entities": 0, "status": 0}  # text arguments (else one)
MAX_LIMIT = {"search": 1000, "context": 50, "list": 10_000}
FLAGS = frozenset({"--json"})

Options = dict[str, object]
Parsed = tuple[str | None, str, str, Options]

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers read it)
if TYPE_CHECKING:
    from memcore.core.models import SearchResult
    from memcore.core.settings import Settings
    from memcore.embedders.base import Embedder
    from memcore.embedders.helper import Helper


def answer(argv: list[str], helper: Helper | None = None) -> int | None:
    """The exit code of a command answered here (through the daemon, or for a search or
    context by opening the index), or None: not answered (nothing printed, nothing written),
    run it on typer. ``helper``: a process started for the local model (cli.model_helper),
    used by a search or context answered here, ended here when a daemon answers (the caller
    ends it in any case: Helper.discard is once only)."""
    parsed = parse(argv)
    if parsed is None:
        return None
    vault_flag, command, text, options = parsed
    sock = daemon_socket(vault_flag)
    if sock is not None:
        if helper is not None:
            helper.discard()  # the daemon embeds: its other core is the daemon's
        try:
            return ANSWERS[command](sock, text, options)
        except Unanswered:  # a read the daemon did not answer: from the index, as typer would
            if command not in ("search", "context"):
                return None  # the typer command reads it
            return answer_here(vault_flag, command, text, options, ask_daemon=False)
    if command in ("search", "context"):
        return answer_here(vault_flag, command, text, options, helper=helper)
    return None


class Unanswered(Exception):
    """A read's exchange with the daemon broke off or never started (a daemon gone or hung
    until the time-out): asking it again, as the typer command would, could wait as long."""


def parse(argv: list[str]) -> Parsed | None:
    """(--vault value, command, its text argument, options) of a plain form, else None."""
    vault: str | None = None
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        name, eq, value = _split(argv[i])
        if name not in ("--vault", "-V") or vault is not None:
            return None
        if not eq:
            i += 1
            value = argv[i] if i < len(argv) else ""
        if not value:
            return None
        vault, i = value, i + 1
    if i >= len(argv) or argv[i] not in FORMS:
        return None
    command = argv[i]
    read = _arguments(FORMS[command], argv[i + 1 :])
    if read is None or len(read[0]) != TEXTS.get(command, 1):
        return None
    text = read[0][0] if read[0] else ""
    if not _fits(command, text, read[1]):
        return None
    return vault, command, text, read[1]


def _arguments(form: dict[str, str], rest: list[str]) -> tuple[list[str], dict[str, object]] | None:
    """The text arguments and the options of a command's words, or None: not a plain form."""
    texts: list[str] = []
    options: dict[str, object] = {}
    j = 0
    while j < len(rest):
        name, eq, value = _split(rest[j])
        if not name.startswith("-"):
            texts.append(rest[j])
        elif name in FLAGS and name in form and not eq:
            options[form[name]] = True
        elif name in form and name not in FLAGS:
            if not eq:
                j += 1
                value = rest[j] if j < len(rest) else ""
            if not value or value.startswith("-") or form[name] in options:
                return None  # missing, option-like or repeated: typer says how it reads it
            options[form[name]] = value
        else:
            return None  # another option (or "-", "--"): the typer command has it
        j += 1
    return texts, options


def _split(word: str) -> tuple[str, str, str]:
    """(name, "=", value) of a long option given as ``--name=value``; a short one given so
    is read by click as the value "=value", so it is taken whole here (and matches nothing)."""
    return word.partition("=") if word.startswith("--") else (word, "", "")


def _fits(command: str, text: str, options: dict[str, object]) -> bool:
    """The text, --limit and --offset are ones the typer command takes as they are."""
    if command in ("search", "context") and not any(ch.isalnum() for ch in text):
        return False  # no word to search for: the typer command says so
    for name, high in (("limit", MAX_LIMIT.get(command, 0)), ("offset", 10_000_000)):
        value = options.get(name)
        if value is None:
            continue
        if not isinstance(value, str) or not value.isascii() or not value.isdigit():
            return False
        options[name] = int(value)
        if not (0 if name == "offset" else 1) <= int(value) <= high:
            return False
    return True


def daemon_socket(vault_flag: str | None) -> str | None:
    """The socket of the vault's daemon when its settings came from this command's inputs."""
    try:
        vault = resolve_vault(vault_flag, os.environ)
        status = vault_daemon(vault) or {}
        published = status.get("config")
        if not isinstance(published, dict) or "digest" not in published:
            return None  # no daemon, or one from before daemons published a digest
        cwd = os.getcwd() if published.get("cwd") else None
        mine = inputs_digest(config_inputs(vault, os.environ, None, cwd))
    except (MemcoreError, OSError):
        return None  # the typer command reports it
    if mine != published["digest"] or status.get("memory") not in ("markdown", "mem0"):
        return None
    sock = status.get("socket")
    return sock if isinstance(sock, str) and sock else None


def _ask(sock: str, endpoint: str, body: dict[str, object]) -> object | None:
    """The daemon's JSON answer to a POST (see ``_answer``)."""
    return _answer(lambda: post_unix(sock, endpoint, body))


def _read(sock: str, endpoint: str, params: dict[str, object]) -> object | None:
    """The daemon's JSON answer to a GET with these query parameters (see ``_answer``)."""
    query = "&".join(f"{k}={quote(str(v), safe='')}" for k, v in params.items())
    return _answer(lambda: get_unix(sock, f"{endpoint}?{query}" if query else endpoint))


def _answer(exchange: Callable[[], tuple[int, str, bytes]]) -> object | None:
    """The JSON object the daemon answered, or None when it is not a success (the typer
    command asks again and words any error). Raises Unanswered when the exchange broke off
    or never started."""
    try:
        status, _, raw = exchange()
    except MemcoreError as exc:  # DaemonGone too
        raise Unanswered(str(exc)) from exc
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    return data if status == 200 and isinstance(data, dict) else None


def _scope(options: dict[str, object]) -> dict[str, object]:
    return {field: options[field] for field in SCOPES.values() if field in options}


HIT_FIELDS = ("path", "start_line", "end_line", "heading", "score", "text")


def _search(sock: str, query: str, options: dict[str, object]) -> int | None:
    body = {"query": query, **_scope(options), "include_turns": True}
    if "limit" in options:
        body["limit"] = options["limit"]
    data = _ask(sock, "/api/memory/search", body)
    if not isinstance(data, dict) or not data.get("results"):
        return None  # no matches: the typer command tells an empty index from no match
    try:  # as SearchResult.to_dict() of what remote.search reads from the same answer
        hits = [
            {"id": r.get("id", ""), **{k: r[k] for k in HIT_FIELDS},
             **{k: r.get(k) for k in ("vector_score", "keyword_score", "date")},
             "tags": list(r.get("tags") or ())}
            for r in data["results"]
        ]  # fmt: skip
        warnings = list(data.get("warnings") or ())
        result = {"query": query, "mode": data["mode"], "results": hits}
        plain = "".join(
            hit_text(n, *(h[k] for k in HIT_FIELDS)) + "\n" for n, h in enumerate(hits, 1)
        )
    except (KeyError, TypeError, AttributeError, ValueError):
        return None
    warn(warnings)
    if warnings:
        result["warnings"] = warnings
    out(json.dumps(result, ensure_ascii=False, indent=2) + "\n" if options.get("json") else plain)
    return 0


def _context(sock: str, query: str, options: dict[str, object]) -> int | None:
    body = {"query": query, "limit": options.get("limit", 3), **_scope(options)}
    data = _ask(sock, "/api/memory/context", {**body, "include_turns": False})
    if not isinstance(data, dict) or not isinstance(data.get("context"), str):
        return None
    print_context(data["context"], query)
    return 0


def _add(sock: str, text: str, options: dict[str, object]) -> int | None:
    body = {"content": text, **_scope(options), "category": "core", "infer": False}
    try:
        status, reason, raw = post_unix(sock, "/api/memories", body, {"Memcore-Via": "cli"})
    except DaemonGone:
        return None  # nothing was sent: the typer command adds it
    except MemcoreError as exc:  # sent, and the outcome is unknown: not again
        sys.stderr.write(f"memcore: {exc}\n")
        return 1
    # From here the request reached the daemon: only a refusal (4xx, nothing written) goes
    # to the typer command; any other answer is reported, never sent again.
    try:
        data = json.loads(raw)
    except ValueError:
        sys.stderr.write(f"memcore: the running daemon answered {status} without JSON\n")
        return 1
    if 400 <= status < 500:
        return None  # refused: the typer command checks it and says why
    if status >= 500:
        sys.stderr.write(f"memcore: the running daemon: {error_message(data, reason)}\n")
        return 1
    try:
        lines = []
        for r in data["results"]:
            held = r.get("strength")
            strength = (held["tier"], held["retrievability"]) if isinstance(held, dict) else None
            scope = (r.get("user_id"), r.get("agent_id"), r.get("run_id"), r.get("app_id"))
            lines.append(
                record_line(r["id"], r["category"], scope, r.get("key"), strength, r["memory"])
            )
    except (KeyError, TypeError, AttributeError):
        sys.stderr.write(f"memcore: the running daemon answered {status} without the memories\n")
        return 1
    out("".join(f"{line}\n" for line in lines))
    return 0


def answer_here(
    vault_flag: str | None,
    command: str,
    text: str,
    options: Options,
    *,
    ask_daemon: bool = True,
    helper: Helper | None = None,
) -> int | None:
    """A plain search or context with no daemon to ask (``ask_daemon=False``: none that
    answers), answered in this process by what the typer command runs (cli/reads.py). The
    local model loads from the start beside the imports and the catch-up with the vault: in
    ``helper``, a process forked for it, when there is one, else in a thread from the moment
    the settings are read."""
    configure_logging(verbose=False)
    return _answer_here(helper, vault_flag, command, text, options, ask_daemon)


def _answer_here(
    helper: Helper | None,
    vault_flag: str | None,
    command: str,
    text: str,
    options: Options,
    ask_daemon: bool,
) -> int | None:
    from memcore.core.settings import load_settings
    from memcore.fronts.daemon_state import local_daemon

    try:
        settings = load_settings(vault_flag)
        if settings.memory.kind == "none" or (ask_daemon and local_daemon(settings)):
            return None  # the typer command says so, or asks that daemon
        from memcore.compose import build_embedder

        embedder = build_embedder(settings, preload=True, helper=helper)
    except MemcoreError:
        return None
    import asyncio

    from memcore.cli import reads

    try:
        answer = asyncio.run(_read_here(settings, embedder, command, text, options))
    except KeyboardInterrupt:
        sys.stderr.write("memcore: interrupted\n")
        return 130
    except Exception:
        return None
    if isinstance(answer, str):
        print_context(answer, text)
    else:
        result, index_empty = answer
        reads.print_search(result, bool(options.get("json")), index_empty)
    return 0


async def _read_here(
    settings: Settings, embedder: Embedder, command: str, text: str, options: Options
) -> str | tuple[SearchResult, bool]:
    from memcore.cli import reads
    from memcore.core.models import scope_ids
    from memcore.search.filters import read_filters

    try:
        given = {f: v if isinstance(v := options.get(f), str) else None for f in SCOPES.values()}
        filters = read_filters(**scope_ids(given), include_turns=command == "search")
        limit = options.get("limit")
        if command == "search":
            n = limit if isinstance(limit, int) else None
            return await reads.search(settings, text, n, filters, embedder=embedder)
        n = limit if isinstance(limit, int) else 3
        return await reads.context(settings, text, n, filters, embedder=embedder)
    finally:
        await embedder.aclose()  # joins the model's loading thread, whatever happened


def _records(rows: object, as_json: bool) -> str | None:
    """Memories as ``memcore list`` / ``get`` print them (cli/memory.py show_records)."""
    if not isinstance(rows, list):
        return None
    if as_json:
        return json.dumps(rows, ensure_ascii=False, indent=2) + "\n"
    lines = []
    for r in rows:
        held = r.get("strength")
        strength = (held["tier"], held["retrievability"]) if isinstance(held, dict) else None
        scope = (r.get("user_id"), r.get("agent_id"), r.get("run_id"), r.get("app_id"))
        lines.append(record_line(r["id"], r["category"], scope, r.get("key"), strength,
                                 r["memory"]) + "\n")  # fmt: skip
    return "".join(lines)


def _show(rows: object, options: dict[str, object]) -> int | None:
    """Print memories as the typer command does; None when the answer is not memories."""
    try:
        text = _records(rows, bool(options.get("json")))
    except (KeyError, TypeError, AttributeError):
        return None
    if text is None:
        return None
    out(text)
    return 0


def _list(sock: str, _: str, options: dict[str, object]) -> int | None:
    params = _scope(options)
    params.update((k, options[k]) for k in ("category", "limit", "offset") if k in options)
    data = _read(sock, "/api/memories", params)
    return _show(data.get("results") if isinstance(data, dict) else None, options)


def _count(sock: str, _: str, options: dict[str, object]) -> int | None:
    params = {**_scope(options), **({"category": options["category"]}
                                    if "category" in options else {})}  # fmt: skip
    data = _read(sock, "/api/memory/count", params)
    if not isinstance(data, dict) or not isinstance(n := data.get("count"), int):
        return None
    if options.get("json"):  # as `count --json`: the count, then the scope given
        out(json.dumps({"count": n, **params}) + "\n")
    else:
        out(f"{n}\n")
    return 0


def _get(sock: str, memory_id: str, options: dict[str, object]) -> int | None:
    data = _read(sock, f"/api/memories/{quote(memory_id, safe='')}", {})
    return _show([data] if isinstance(data, dict) else None, options)


def _history(sock: str, memory_id: str, options: dict[str, object]) -> int | None:
    data = _read(sock, f"/api/memories/{quote(memory_id, safe='')}/history", {})
    events = data.get("results") if isinstance(data, dict) else None
    if not isinstance(events, list) or (not events and not options.get("json")):
        return None  # none to show: the typer command says so
    if options.get("json"):
        out(json.dumps(events, ensure_ascii=False, indent=2) + "\n")
        return 0
    try:
        lines = "".join(history_line(e) + "\n" for e in events)
    except (KeyError, TypeError):
        return None
    out(lines)
    return 0


ENTITY_FIELDS = ("type", "name", "total_memories", "created_at", "updated_at")


def _entities(sock: str, _: str, options: dict[str, object]) -> int | None:
    data = _read(sock, "/api/entities", {})
    rows = data.get("results") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        return None
    try:
        found = [{k: r[k] for k in ENTITY_FIELDS} for r in rows]  # as Entity.to_dict()
    except (KeyError, TypeError):
        return None
    if options.get("json"):
        out(json.dumps(found, ensure_ascii=False, indent=2) + "\n")
    elif not found:
        out("no memories yet\n")
    else:
        out("".join(entity_line(e) + "\n" for e in found))
    return 0


def _status(sock: str, _: str, options: dict[str, object]) -> int | None:
    data = _read(sock, "/api/status", {})
    if not isinstance(data, dict) or not data.get("indexed"):
        return None  # the typer command says what to do
    try:
        print_status(data)  # the daemon's own document: the index it serves, and itself
    except (KeyError, TypeError, AttributeError):
        return None
    return 0


ANSWERS: dict[str, Callable[[str, str, dict[str, object]], int | None]] = {
    "search": _search,
    "context": _context,
    "add": _add,
    "list": _list,
    "count": _count,
    "get": _get,
    "history": _history,
    "entities": _entities,
    "status": _status,
}
