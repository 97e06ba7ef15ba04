"""`memcore add --file`: the memories of a JSON-lines file, a part at a time (bounded memory,
each part one write a file it touches, applied or refused whole). A file's lines are planned
into parts of whole lists (memory/batch_plan.py: a user's page written once, not once a part);
stdin or a pipe, read once, is cut in line order. A failure says what went in and how to resume."""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Generator, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

import typer

from memcore.cli.app import fail, start_batch
from memcore.cli.service_use import with_service

if TYPE_CHECKING:
    from memcore.memory.batch import BadLine
    from memcore.memory.batch_plan import Plan
    from memcore.service import MemoryService

CHUNK_LINES = 100_000  # lines of --file one write takes (applied or refused whole)
CHUNK_BYTES = 64 << 20  # ... or this much of the file, whichever comes first

Lines = list[tuple[int, str | None]]  # (number, text; None: not UTF-8)


@dataclass(slots=True)
class Applied:
    """What went in so far: memories, parts, and the lines before ``through`` all of them."""

    start: int
    added: int = 0
    parts: int = 0  # parts applied, counting those a resumed run skips
    first: int = 0  # the part this run began with
    lines: int = 0  # lines of the parts applied
    through: int = 0  # every line up to this one is in (a prefix of the file)
    done: bytearray | None = None  # a plan's lines applied, by place (to find the prefix)

    def took(self, numbers: Iterable[int], added: int) -> None:
        self.added += added
        self.parts += 1
        if self.done is None:  # line order: the part ends the prefix
            self.through = max(numbers)
            return
        self.mark(numbers)

    def mark(self, numbers: Iterable[int]) -> None:
        assert self.done is not None
        for n in numbers:
            self.done[n - self.start] = 1
            self.lines += 1
        while (
            self.through - self.start + 1 < len(self.done)
            and self.done[self.through - self.start + 1]
        ):
            self.through += 1

    @property
    def a_prefix(self) -> bool:
        """Whether what went in is every line from the start up to ``through``."""
        return self.done is None or self.lines == self.through - self.start + 1


def add_file(
    ctx: typer.Context,
    source: str,
    scope: tuple[str | None, str | None, str | None, str | None],
    category: str | None,
    as_json: bool,
    from_line: int = 1,
    from_part: str | None = None,
) -> None:
    """Add the memories of a JSON-lines file, a part at a time."""
    import dataclasses

    from rich.progress import Progress  # rich and the write path load only when used

    from memcore.core.errors import MemcoreError
    from memcore.memory.batch import BadLine, parse_numbered
    from memcore.vault.memory_format import Scope

    start_batch(ctx)
    try:
        defaults = Scope(*scope)
        plan, done = _planned(source, from_line, from_part)
    except OSError as exc:
        raise fail(f"cannot read {source}: {exc.strerror or exc}", 2) from None
    except MemcoreError as exc:
        raise fail(str(exc), 2) from None
    first_part = done.first
    bad: list[BadLine] = []

    async def job(service: MemoryService) -> None:
        # every part of the file is one load: a vector index is built once, after the last
        expected = plan.lines if plan is not None else 0
        async with service.bulk(expected):  # and the vector graph saved after it
            await add_all(service)

    async def add_all(service: MemoryService) -> None:
        total = sum(plan.sizes[first_part:]) if plan is not None else None
        with Progress(transient=True, disable=as_json) as bar:
            task = bar.add_task("adding", total=total)
            for numbered, read in _parts(source, plan, first_part, from_line):
                memories, skipped = parse_numbered(numbered, defaults, category)
                skipped += [BadLine(n, "not UTF-8 text") for n, text in numbered if text is None]
                skipped.sort(key=lambda b: b.number)
                for b in skipped:
                    typer.echo(f"{source}:{b.number}: skipped: {b.reason}", err=True)
                bad.extend(skipped)
                added = await service.memories.load(memories)
                done.took((n for n, _ in numbered), added)
                bar.update(task, advance=read)

    try:
        with_service(ctx, job)
    except typer.Exit:
        if done.parts > first_part:
            typer.echo(f"memcore: {_resume(done, plan)}", err=True)
        raise
    if plan is not None:
        done.through = from_line + plan.lines - 1
    bad.sort(key=lambda b: b.number)
    if as_json:
        typer.echo(json.dumps({"added": done.added, "through_line": done.through,
                               "skipped": [dataclasses.asdict(b) for b in bad]},
                              ensure_ascii=False, indent=2))  # fmt: skip
    else:
        typer.echo(f"added {done.added} memories from {source}, skipped {len(bad)} lines")
    if bad and not done.added:
        raise typer.Exit(1)


def _planned(source: str, from_line: int, from_part: str | None) -> tuple[Plan | None, Applied]:
    """The plan of a file (None for stdin or a pipe) and what a resumed run finds applied
    already."""
    from memcore.core.errors import InputError
    from memcore.memory.batch_plan import plan_parts

    done = Applied(from_line, through=from_line - 1)
    if read_once(source):
        if from_part is not None:
            raise InputError("--from-part needs a regular file: a pipe is added in line order")
        return None, done
    plan = plan_parts(source, from_line, CHUNK_LINES, CHUNK_BYTES)
    first = _first_part(from_part, plan)
    done.done = bytearray(plan.lines)
    done.parts = done.first = first
    for n in range(first):  # the parts a resumed run skips went in before
        done.mark(plan.start + i for i in plan.parts[n])
    return plan, done


def _first_part(from_part: str | None, plan: Plan) -> int:
    """The part (0-based) a ``--from-part N:DIGEST`` resumes at, checked against the plan."""
    from memcore.core.errors import InputError

    if from_part is None:
        return 0
    number, _, digest = from_part.partition(":")
    if not number.isdigit() or int(number) < 1 or not digest:
        raise InputError(f"--from-part {from_part!r}: give it as the failure named it (N:DIGEST)")
    if digest != plan.digest:
        raise InputError(
            f"--from-part {from_part}: the file or --from-line is not the one that part was "
            "planned from; nothing was added"
        )
    if int(number) > len(plan.parts):
        raise InputError(f"--from-part {number}: the file has {len(plan.parts)} parts")
    return int(number) - 1


def _resume(done: Applied, plan: Plan | None) -> str:
    """What went in before a failure, and the command's options that resume after it."""
    if done.a_prefix:
        lines = f"lines {done.start}-{done.through}" if done.through >= done.start else "no lines"
        return (
            f"{done.added} memories of {lines} are in; resume with --from-line {done.through + 1}"
        )
    assert plan is not None
    again = f"--from-line {plan.start} " if plan.start > 1 else ""
    return (
        f"{done.added} memories of parts {done.first + 1}-{done.parts} of {len(plan.parts)} "
        f"are in (a part holds whole users' lists, not a range of lines); resume with "
        f"{again}--from-part {done.parts + 1}:{plan.digest}"
    )


def _parts(
    source: str, plan: Plan | None, first_part: int, start: int
) -> Iterator[tuple[Lines, int]]:
    """Each part's numbered lines and its bytes: a plan's parts, or stdin's (a pipe's) lines
    in line order."""
    if plan is not None:
        for n in range(first_part, len(plan.parts)):
            yield list(plan.read(n)), plan.sizes[n]
        return
    for first, lines, size in line_chunks(stream(source), start):
        yield list(enumerate(lines, first)), size


def read_once(source: str) -> bool:
    """Whether a source can be read only once, as it comes: stdin (``-``) or a pipe."""
    return source == "-" or not stat.S_ISREG(os.stat(source).st_mode)


def stream(source: str) -> Generator[bytes, None, None]:
    """The lines of stdin (``-``) or of a pipe, read once, as they come."""
    if source == "-":
        yield from sys.stdin.buffer
        return
    with open(source, "rb") as fh:
        yield from fh


def line_chunks(lines: Iterator[bytes], start: int) -> Iterator[tuple[int, list[str | None], int]]:
    """(number of the chunk's first line, its lines as text, its bytes), from line ``start``
    on; a line that is not UTF-8 is None."""
    chunk: list[str | None] = []
    first = start
    size = 0
    for number, raw in enumerate(lines, 1):
        if number < start:
            continue
        if not chunk:
            first = number
        try:
            chunk.append(raw.decode("utf-8").removesuffix("\n").removesuffix("\r"))
        except UnicodeDecodeError:
            chunk.append(None)
        size += len(raw)
        if len(chunk) >= CHUNK_LINES or size >= CHUNK_BYTES:
            yield first, chunk, size
            chunk, size = [], 0
    if chunk:
        yield first, chunk, size
