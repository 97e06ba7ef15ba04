"""Recall: the review log in the vault and the strength of memories and notes it implies.

Reviews live in ``memory/reviews.jsonl`` (not Markdown, so never indexed), one JSON line per
use: ``{"id": ..., "at": ...}``. Like the history, the log travels with the vault in git, so
``reindex`` (even after deleting ``.memcore/``) keeps every memory's strength. Several
processes append to it (O_APPEND lines); each reads only what was added since it last looked.

A memory's key is its id. A hand-written note chunk's key is the id search gives it,
``note:<path>#L<start>-<end>``: lines inserted above a note start its strength afresh.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import errno
import json
import logging
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from memcore.core.errors import VaultError
from memcore.core.lines import split_lines
from memcore.core.models import MemoryRecord, Strength
from memcore.search.strength import (
    DEFAULT,
    GOOD,
    Policy,
    Review,
    parse_time,
    recall_curve,
    strength_of,
    tier_of,
)
from memcore.storage.base import ChunkRow
from memcore.vault.files import check_writable

REVIEWS_PATH = "memory/reviews.jsonl"
log = logging.getLogger(__name__)


def note_key(path: str, start_line: int, end_line: int) -> str:
    """The review key (and search record id) of a hand-written chunk."""
    return f"note:{path}#L{start_line}-{end_line}"


class ReviewLog:
    """Appends reviews and keeps every key's review times, reading the log incrementally."""

    def __init__(self, vault: Path) -> None:
        self.path = vault / REVIEWS_PATH
        self._lock = asyncio.Lock()
        self._times: dict[str, list[Review]] = {}
        self._offset = 0
        self._inode: int | None = None
        self._warned = False
        self.skipped = 0  # reviews a read could not record (a full disk, a read-only vault)

    async def append(
        self,
        keys: Sequence[str],
        at: dt.datetime | None = None,
        grade: int = GOOD,
        strict: bool = False,
    ) -> None:
        """Record one review of each key (now, unless ``at``), rated ``grade`` (FSRS 1-4; a
        line without "rating" is a Good one, as every line written before ratings was).
        A read's reviews are a side effect: when they cannot be written (a full disk, a
        read-only vault) they are skipped and counted (``skipped``). ``strict``, a review
        the caller asked for (reinforce, feedback): the error is raised instead."""
        if not keys:
            return
        stamp = (at or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds")
        rated = {} if grade == GOOD else {"rating": grade}
        data = "".join(
            json.dumps({"id": k, "at": stamp, **rated}) + "\n" for k in dict.fromkeys(keys)
        )
        async with self._lock:
            try:
                await asyncio.to_thread(self._append, data.encode("utf-8"))
            except (OSError, VaultError) as exc:
                if strict:
                    raise
                # a read still answers (a read-only vault, a full disk); its memories just
                # do not strengthen this time
                self.skipped += len(dict.fromkeys(keys))
                if not self._warned:
                    why = exc.strerror if isinstance(exc, OSError) else str(exc)
                    log.warning("cannot record reviews in %s: %s (counted in status as "
                                "reviews_skipped)", self.path, why)  # fmt: skip
                    self._warned = True

    def _append(self, data: bytes) -> None:
        check_writable(self.path.parent.parent, REVIEWS_PATH)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            size = os.fstat(fd).st_size
            written = os.write(fd, data)  # all or nothing, but on a disk filling up
            if written < len(data):
                if os.fstat(fd).st_size == size + written:  # no one appended since: take the
                    os.ftruncate(fd, size)  # half line back, or the next append joins it
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        finally:
            os.close(fd)

    def size(self) -> int:
        """The log's size in bytes (0 when absent): it grows with every review."""
        try:
            return self.path.stat().st_size
        except OSError:
            return 0

    async def times(self) -> Mapping[str, list[Review]]:
        """Every key's review times, including lines other processes appended since."""
        async with self._lock:
            await asyncio.to_thread(self._refresh)
        return self._times

    def _refresh(self) -> None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            self._times, self._offset, self._inode = {}, 0, None
            return
        if st.st_ino != self._inode or st.st_size < self._offset:  # replaced (git checkout)
            self._times, self._offset, self._inode = {}, 0, st.st_ino
        if st.st_size == self._offset:
            return
        with self.path.open("rb") as fh:
            fh.seek(self._offset)
            data = fh.read()
        complete = data[: data.rfind(b"\n") + 1]  # a line still being written waits
        self._offset += len(complete)
        for line in split_lines(complete.decode("utf-8", errors="replace")):
            try:
                row = json.loads(line)
                key, at = str(row["id"]), parse_time(str(row["at"]))
                grade = int(row.get("rating", GOOD))
            except (ValueError, KeyError, TypeError, AttributeError):
                continue  # a hand-mangled line costs that review, nothing more
            if at is not None and 1 <= grade <= 4:
                self._times.setdefault(key, []).append(at if grade == GOOD else (at, grade))


class Recall:
    """Strength of memory records and note chunks now, from the review log."""

    def __init__(self, vault: Path, policy: Policy = DEFAULT) -> None:
        self.log = ReviewLog(vault)
        self.policy = policy.checked()

    async def review(
        self,
        keys: Sequence[str],
        at: dt.datetime | None = None,
        grade: int = GOOD,
        strict: bool = False,
    ) -> None:
        """Record a use of each key (see ReviewLog.append: a read's are best effort)."""
        await self.log.append(keys, at, grade, strict)

    async def curve(
        self, record: MemoryRecord, now: dt.datetime | None = None
    ) -> list[tuple[dt.datetime, float]]:
        """The memory's retrievability over time, from its birth to two months ahead."""
        times = await self.log.times()
        now = now or dt.datetime.now(dt.UTC)
        born = parse_time(record.created) or now
        tier = tier_of(record.path, record.category, record.metadata)
        return recall_curve(
            tier, born, times.get(record.id, []), now,
            policy=self.policy, pace=self.policy.pace_of(record.run_id),
        )  # fmt: skip

    async def of_records(
        self, records: Sequence[MemoryRecord], now: dt.datetime | None = None
    ) -> dict[str, Strength]:
        """Strength of each memory (by id); a note record's id is its note key."""
        times = await self.log.times()
        now = now or dt.datetime.now(dt.UTC)
        return {r.id: _record_strength(r, times, now, self.policy) for r in records}

    async def of_chunks(
        self,
        rows: Mapping[int, ChunkRow],
        memories: Mapping[int, MemoryRecord],
        now: dt.datetime | None = None,
    ) -> dict[int, Strength]:
        """Strength of each chunk: its memory's when it holds one, else the note's, born on
        the chunk's date (the file's date, or when it was first indexed)."""
        times = await self.log.times()
        now = now or dt.datetime.now(dt.UTC)
        out = {}
        for cid, row in rows.items():
            if cid in memories:
                out[cid] = _record_strength(memories[cid], times, now, self.policy)
                continue
            born = parse_time(row.date) or now
            tier = tier_of(row.path, None, row.metadata)
            key = note_key(row.path, row.start_line, row.end_line)
            out[cid] = strength_of(tier, born, times.get(key, []), now, self.policy)
        return out


def _record_strength(
    r: MemoryRecord, times: Mapping[str, list[Review]], now: dt.datetime, policy: Policy
) -> Strength:
    born = parse_time(r.created) or now
    tier = tier_of(r.path, r.category, r.metadata)
    return strength_of(tier, born, times.get(r.id, []), now, policy, policy.pace_of(r.run_id))
