"""Commands for who holds memories and how they help: entities, feedback (Mem0's users() and
feedback(), on the command line)."""

from __future__ import annotations

import json
from enum import StrEnum
from typing import Annotated

import typer

from memcore.cli.app import app
from memcore.cli.memory import JsonOpt, show_records
from memcore.cli.output import entity_line
from memcore.cli.service_use import with_service


class Feedback(StrEnum):
    positive = "positive"
    negative = "negative"
    very_negative = "very_negative"


@app.command()
def entities(ctx: typer.Context, as_json: JsonOpt = False) -> None:
    """Every user, agent and run that holds memories, with how many."""
    found = with_service(ctx, lambda s: s.memories.entities(), writes=False)
    if as_json:
        typer.echo(json.dumps([e.to_dict() for e in found], ensure_ascii=False, indent=2))
        return
    if not found:
        typer.echo("no memories yet")
    for e in found:
        typer.echo(entity_line(e.to_dict()))


@app.command()
def feedback(
    ctx: typer.Context,
    memory_id: Annotated[str, typer.Argument(help="The memory's id")],
    rating: Annotated[Feedback, typer.Argument(help="Did it help, or is it wrong?")],
    as_json: JsonOpt = False,
) -> None:
    """Rate a memory: positive strengthens it; negative weakens it; very_negative (it is
    wrong) makes it fade within days, after which the forget loop archives it."""
    grade = rating.value.upper()
    show_records([with_service(ctx, lambda s: s.memories.feedback(memory_id, grade))], as_json)
