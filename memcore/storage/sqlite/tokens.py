"""What the keyword index holds of a chunk, and tokenizing it again when the vault's own words
(``keywords.dictionary``, ``keywords.stop_words``) change."""

from __future__ import annotations

import asyncio
import logging

import aiosqlite

from memcore.core.own_words import Words
from memcore.core.tokenize import fts_texts

log = logging.getLogger(__name__)

KEY = "keyword_words"  # meta: the fingerprint of the words the index was tokenized with
_BATCH = 2000


async def retokenize(db: aiosqlite.Connection, own: Words) -> int:
    """Tokenize every chunk again when the index was tokenized with other words than ``own``
    (once: the index then remembers them). One write transaction; only chunks whose text comes
    out different are written (the FTS table follows by trigger). Returns how many were."""
    if await _tokenized_with(db) == own.fingerprint:
        return 0
    await db.execute("BEGIN IMMEDIATE")
    try:
        if await _tokenized_with(db) == own.fingerprint:  # another process, meanwhile
            await db.execute("COMMIT")
            return 0
        last, changed = 0, 0
        while True:
            async with db.execute(
                "SELECT id, heading_path, content, fts_text FROM memory_chunks WHERE id > ? "
                "ORDER BY id LIMIT ?",
                (last, _BATCH),
            ) as cur:
                rows = list(await cur.fetchall())
            if not rows:
                break
            texts = await asyncio.to_thread(fts_texts, rows, own)
            new = [(t, r[0]) for t, r in zip(texts, rows, strict=True) if t != r[3]]
            await db.executemany("UPDATE memory_chunks SET fts_text = ? WHERE id = ?", new)
            changed += len(new)
            last = rows[-1][0]
        await db.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (KEY, own.fingerprint)
        )
        await db.execute("COMMIT")
    except BaseException:
        if db.in_transaction:
            await db.execute("ROLLBACK")
        raise
    if changed:
        log.info("the vault's own words changed: %d chunks tokenized again", changed)
    return changed


async def _tokenized_with(db: aiosqlite.Connection) -> str:
    async with db.execute("SELECT value FROM meta WHERE key = ?", (KEY,)) as cur:
        row = await cur.fetchone()
    return str(row[0]) if row else ""
