"""Commands that write and list memories: add, get, list, update, forget, history, count."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated

import typer

from memcore.cli.app import app, fail
from memcore.cli.output import history_line, record_line
from memcore.cli.scope import (
    AgentOpt,
    AppOpt,
    CategoryOpt,
    MetaOpt,
    RunOpt,
    UserOpt,
    metadata_of,
)
from memcore.cli.service_use import with_service
from memcore.core.models import MemoryRecord
from memcore.core.settings import Settings

if TYPE_CHECKING:
    from memcore.service import MemoryService

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON")]


def show_records(records: list[MemoryRecord], as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps([r.to_dict() for r in records], ensure_ascii=False, indent=2))
        return
    for r in records:
        held = (r.strength.tier, r.strength.retrievability) if r.strength else None
        scope = (r.user_id, r.agent_id, r.run_id, r.app_id)
        typer.echo(record_line(r.id, r.category, scope, r.key, held, r.text))


ShowExpiredOpt = Annotated[
    bool, typer.Option("--show-expired", help="Memories past their expiration date too")
]


@app.command()
def add(
    ctx: typer.Context,
    content: Annotated[
        str | None, typer.Argument(help="What to remember ('-' reads stdin)")
    ] = None,
    from_file: Annotated[
        str | None,
        typer.Option(
            "--file",
            help='Add many: JSON lines, one memory each ({"memory": ..., "user_id": ...}); '
            "'-' reads stdin. Bad lines are named and skipped",
        ),
    ] = None,
    user: UserOpt = None,
    agent: AgentOpt = None,
    run_id: RunOpt = None,
    app: AppOpt = None,
    category: CategoryOpt = None,
    key: Annotated[
        str | None, typer.Option("--key", help="Replace the memory under this key")
    ] = None,
    meta: MetaOpt = None,
    infer: Annotated[
        bool, typer.Option("--infer", help="Let the LLM (llm.provider) extract and reconcile facts")
    ] = False,
    idempotency_key: Annotated[
        str | None,
        typer.Option(
            "--idempotency-key", help="A retry with the same key adds nothing and prints the first"
        ),
    ] = None,
    from_line: Annotated[
        int,
        typer.Option("--from-line", min=1, help="With --file: start at this line (to resume)"),
    ] = 1,
    from_part: Annotated[
        str | None,
        typer.Option(
            "--from-part", help="With --file: resume at this part (N:DIGEST, as a failure names)"
        ),
    ] = None,
    timestamp: Annotated[
        str | None,
        typer.Option("--timestamp", help="When it was made: Unix seconds or an ISO time"),
    ] = None,
    expires: Annotated[
        str | None,
        typer.Option("--expires", help="Hide it after this day (YYYY-MM-DD, UTC)"),
    ] = None,
    immutable: Annotated[
        bool, typer.Option("--immutable", help="Refuse updates to it (delete still works)")
    ] = False,
    as_json: JsonOpt = False,
) -> None:
    """Remember something: written to the vault's Markdown, searchable at once."""
    if (content is None) == (from_file is None):
        raise fail("give the text to remember, or --file with JSON lines (not both)", 2)
    if from_file is not None:
        from memcore.cli.add_file import add_file

        scope = (user, agent, run_id, app)
        add_file(ctx, from_file, scope, category, as_json, from_line, from_part)
        return
    text = typer.get_text_stream("stdin").read() if content == "-" else str(content)
    metadata = metadata_of(meta)
    made: str | int | None = int(timestamp) if timestamp and timestamp.isdigit() else timestamp
    body = {
        "content": text, "user_id": user, "agent_id": agent, "run_id": run_id, "app_id": app,
        "metadata": metadata, "category": category or "core", "key": key, "infer": infer,
        "timestamp": made, "expiration_date": expires, "immutable": immutable,
    }  # fmt: skip

    async def through_daemon(settings: Settings) -> list[MemoryRecord] | None:
        """A running daemon adds it with the model it has loaded (the command then neither
        loads a model nor opens the index); None when there is none to ask."""
        from memcore.fronts import remote
        from memcore.fronts.daemon_state import local_daemon

        plain_key = idempotency_key is None or (
            idempotency_key.isascii() and idempotency_key.isprintable()
        )
        sock = local_daemon(settings) if plain_key else None
        if sock is None:
            return None
        try:
            return await remote.add(sock, body, idempotency_key)
        except remote.DaemonGone:  # nothing was sent: add it here
            return None

    records = with_service(
        ctx,
        lambda s: s.memories.add(
            text, user_id=user, agent_id=agent, run_id=run_id, app_id=app, metadata=metadata,
            category=category or "core", key=key, infer=infer,
            idempotency_key=idempotency_key, created=made, expiration_date=expires,
            immutable=immutable,
        ),
        first=through_daemon,
        embeds=True,
    )  # fmt: skip
    if infer and not as_json:
        for r in records:
            typer.echo(f"{r.event:<6} {r.id}  {r.text}")
        if not records:
            typer.echo("nothing new to remember")
        return
    show_records(records, as_json)


@app.command()
def get(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument(help="The memory's id")],
    as_json: JsonOpt = False,
) -> None:
    """Show one memory."""
    show_records([with_service(ctx, lambda s: s.memories.get(memory_id), writes=False)], as_json)


@app.command(name="list")
def list_memories(
    ctx: typer.Context,
    user: UserOpt = None,
    agent: AgentOpt = None,
    run_id: RunOpt = None,
    app: AppOpt = None,
    category: CategoryOpt = None,
    tag: Annotated[str | None, typer.Option("--tag", help="Only memories with this #tag")] = None,
    meta: MetaOpt = None,
    limit: Annotated[int, typer.Option("--limit", "-n", min=1, max=10_000)] = 100,
    offset: Annotated[int, typer.Option("--offset", min=0)] = 0,
    show_expired: ShowExpiredOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """List memories, oldest first (conversation turns only with --category conversation)."""
    records = with_service(
        ctx,
        lambda s: s.memories.get_all(
            user_id=user, agent_id=agent, run_id=run_id, app_id=app, category=category, tag=tag,
            filters=metadata_of(meta), limit=limit, offset=offset, show_expired=show_expired,
        ),
        writes=False,
    )  # fmt: skip
    show_records(records, as_json)


@app.command()
def update(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument(help="The memory's id")],
    content: Annotated[str | None, typer.Argument(help="New text")] = None,
    meta: MetaOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Change a memory's text (and/or replace its metadata); its id stays."""
    metadata = metadata_of(meta)
    record = with_service(ctx, lambda s: s.memories.update(memory_id, content, metadata))
    show_records([record], as_json)


BelowOpt = typer.Option(
    "--below", min=0.0, max=1.0, help="Archive decaying memories whose retrievability is below"
)


@app.command()
def forget(
    ctx: typer.Context,
    targets: Annotated[
        list[str] | None,
        typer.Argument(
            help="Memory ids (all of them go, or none), or one key with --key (not with --below)"
        ),
    ] = None,
    by_key: Annotated[bool, typer.Option("--key", help="TARGET is a key")] = False,
    user: UserOpt = None,
    agent: AgentOpt = None,
    run_id: RunOpt = None,
    app: AppOpt = None,
    below: Annotated[float | None, BelowOpt] = None,
    category: CategoryOpt = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="With --below: only list")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Delete memories (their lines leave the Markdown; their history stays; all the ids
    given go, or none), or with --below R archive the weak ones (restorable with `memcore
    restore ID`)."""
    target = targets[0] if targets else None
    if len(targets or []) > 1 and (by_key or below is not None):
        raise fail("many ids, or one key with --key, or --below R", 2)
    if below is not None:
        if target is not None:
            raise fail("give a memory id or --below, not both", 2)
        weak = with_service(
            ctx,
            lambda s: s.memories.forget_below(
                below, user_id=user, agent_id=agent, run_id=run_id, app_id=app, category=category,
                dry_run=dry_run,
            ),
        )  # fmt: skip
        show_records(weak, as_json)
        if not as_json:
            verb = "would archive" if dry_run else "archived"
            typer.echo(f"{verb} {len(weak)} memories below retrievability {below}", err=True)
        return
    if target is None:
        raise fail("forget needs a memory id, a key with --key, or --below R", 2)

    async def use(s: MemoryService) -> bool:
        assert target is not None
        if by_key:
            return await s.memories.forget(
                target, user_id=user, agent_id=agent, run_id=run_id, app_id=app
            )
        await s.memories.delete_many(targets or [])
        return True

    if not with_service(ctx, use):
        raise fail(f"no memory under key {target!r} in that scope")
    typer.echo(f"forgot {', '.join(targets or [])}")


@app.command()
def restore(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument(help="An archived memory's id")],
    as_json: JsonOpt = False,
) -> None:
    """Bring a memory back to its file, with its id, fields and strength: one that `forget
    --below` (or its expiry) archived, or one that was forgotten (`forget ID`, the API, a
    person deleting its lines)."""
    show_records([with_service(ctx, lambda s: s.memories.restore(memory_id))], as_json)


@app.command()
def reinforce(
    ctx: typer.Context,
    memory_ids: Annotated[list[str], typer.Argument(help="Memory ids")],
    as_json: JsonOpt = False,
) -> None:
    """Count a use of these memories (an FSRS review): they decay more slowly from now on."""
    show_records(with_service(ctx, lambda s: s.memories.reinforce(*memory_ids)), as_json)


@app.command()
def history(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument(help="The memory's id")],
    as_json: JsonOpt = False,
) -> None:
    """What happened to a memory: ADD / UPDATE / DELETE / ARCHIVE / RESTORE, when, by whom."""
    events = with_service(ctx, lambda s: s.memories.history(memory_id), writes=False)
    if as_json:
        typer.echo(json.dumps(events, ensure_ascii=False, indent=2))
        return
    if not events:
        raise fail(f"no history for {memory_id!r}")
    for e in events:
        typer.echo(history_line(e))


@app.command()
def count(
    ctx: typer.Context,
    user: UserOpt = None,
    agent: AgentOpt = None,
    run_id: RunOpt = None,
    app: AppOpt = None,
    category: CategoryOpt = None,
    meta: MetaOpt = None,
    show_expired: ShowExpiredOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """How many memories a scope holds (conversation turns count only with --category
    conversation; expired ones only with --show-expired)."""
    n = with_service(
        ctx,
        lambda s: s.memories.count(
            user_id=user, agent_id=agent, run_id=run_id, app_id=app, category=category,
            filters=metadata_of(meta), show_expired=show_expired,
        ),
        writes=False,
    )  # fmt: skip
    if as_json:
        scope = {"user_id": user, "agent_id": agent, "run_id": run_id, "app_id": app,
                 "category": category}  # fmt: skip
        typer.echo(json.dumps({"count": n, **{k: v for k, v in scope.items() if v}}))
        return
    typer.echo(str(n))


conversation_app = typer.Typer(help="Session transcripts (chat and tool-call turns).")
app.add_typer(conversation_app, name="conversation")


@conversation_app.command("save")
def conversation_save(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="Session id")],
    source: Annotated[str, typer.Argument(help="JSON file of messages ('-' reads stdin)")] = "-",
) -> None:
    """Replace a session's transcript with a JSON list of {role, content, ...} messages."""
    raw = typer.get_text_stream("stdin").read() if source == "-" else _read(source)
    try:
        messages = json.loads(raw)
    except ValueError as exc:
        raise fail(f"the messages are not JSON: {exc}", 2) from None
    if not isinstance(messages, list):
        raise fail("the messages must be a JSON list", 2)
    saved = with_service(ctx, lambda s: s.conversations.save(session, messages))
    typer.echo(f"saved {saved} turns of {session}")


@conversation_app.command("load")
def conversation_load(
    ctx: typer.Context,
    session: Annotated[str, typer.Argument(help="Session id")],
    limit: Annotated[int | None, typer.Option("--limit", "-n", min=1, help="Last N")] = None,
) -> None:
    """Print a session's transcript as JSON chat messages, oldest first."""
    messages = with_service(ctx, lambda s: s.conversations.load(session, limit), writes=False)
    typer.echo(json.dumps(messages, ensure_ascii=False, indent=2))


def _read(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise fail(f"cannot read {path}: {exc}", 2) from None
