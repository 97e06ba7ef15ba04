"""Tokenizing a namespace's chunks again when the vault's own words (``keywords.dictionary``,
``keywords.stop_words``) change: their tsvector, and the text pg_textsearch ranks."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import Any

import psycopg

from memcore.core.own_words import Words
from memcore.core.tokenize import fts_texts
from memcore.storage.postgres.queries import TS

log = logging.getLogger(__name__)

KEY = "keyword_words"  # meta: the fingerprint of the words the namespace was tokenized with
_BATCH = 2000


async def retokenize(
    db: psycopg.AsyncConnection[Any], namespace: str, own: Words, lock: int
) -> int:
    """Tokenize the namespace's chunks again when they were tokenized with other words than
    ``own`` (once: the namespace then remembers them), in one transaction under ``lock`` (the
    migration lock: processes opening at once do it once). Only chunks whose text comes out
    different are written. Returns how many were."""
    if await _tokenized_with(db, namespace) == own.fingerprint:
        return 0
    changed = 0
    async with db.transaction():
        await db.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
        if await _tokenized_with(db, namespace) == own.fingerprint:
            return 0
        async for ids, texts in keyword_texts(db, namespace, own):
            cur = await db.execute(
                f"UPDATE memory_chunks c SET fts = to_tsvector('{TS}', u.t), "
                "body = CASE WHEN c.body IS NULL THEN NULL ELSE u.t END "
                "FROM unnest(%s::int8[], %s::text[]) AS u(id, t) "
                f"WHERE c.id = u.id AND c.fts IS DISTINCT FROM to_tsvector('{TS}', u.t)",
                (ids, texts),
            )
            changed += max(cur.rowcount, 0)
        await db.execute(
            "INSERT INTO meta (ns, key, value) VALUES (%s, %s, %s) "
            "ON CONFLICT (ns, key) DO UPDATE SET value = excluded.value",
            (namespace, KEY, own.fingerprint),
        )
    if changed:
        log.info("the vault's own words changed: %d chunks tokenized again", changed)
    return changed


async def keyword_texts(
    db: psycopg.AsyncConnection[Any], namespace: str, own: Words, where: str = ""
) -> AsyncIterator[tuple[list[int], list[str]]]:
    """(ids, the text keyword search sees of each) of the namespace's chunks (``where``: more
    conditions on ``memory_chunks``), _BATCH at a time in id order; segmenting Chinese takes
    memcore, not SQL, and runs in a worker thread."""
    last = 0
    while True:
        cur = await db.execute(
            "SELECT id, heading_path, content FROM memory_chunks "
            f"WHERE ns = %s AND id > %s{where} ORDER BY id LIMIT %s",
            (namespace, last, _BATCH),
        )
        rows = await cur.fetchall()
        if not rows:
            return
        yield [int(r[0]) for r in rows], await asyncio.to_thread(fts_texts, rows, own)
        last = int(rows[-1][0])


async def _tokenized_with(db: psycopg.AsyncConnection[Any], namespace: str) -> str:
    cur = await db.execute("SELECT value FROM meta WHERE ns = %s AND key = %s", (namespace, KEY))
    row = await cur.fetchone()
    return str(row[0]) if row else ""
