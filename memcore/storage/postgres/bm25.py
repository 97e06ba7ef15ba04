"""pg_textsearch, where the server has it: keywords ranked by BM25 in an index that returns the
top k without ranking every match. Set up when a store opens: the extension, each chunk's
``body`` (the text the index ranks: heading and content, Chinese segmented by memcore) filled
in once for rows written before, and the index. pg_textsearch 1.0 indexes every row of a
table even under a partial index's predicate (measured), so there is one index for the table:
a word's rarity is counted over every namespace in the database."""

from __future__ import annotations

import logging
import math
import re
import time
from typing import Any

import psycopg
from psycopg import sql

from memcore.core.own_words import NO_WORDS, Words
from memcore.storage.postgres.queries import TS
from memcore.storage.postgres.tokens import keyword_texts

log = logging.getLogger(__name__)

INDEX = "memory_chunks_bm25"
FILLED = "bm25_body"  # meta key: this namespace's rows all have their body


async def enable_bm25(
    db: psycopg.AsyncConnection[Any],
    namespace: str,
    lock: int,
    own: Words = NO_WORDS,
    k1_b: tuple[float, float] = (1.2, 0.75),
) -> str:
    """pg_textsearch's version when keywords can be ranked by it here, else "" (the server
    lacks it, or cannot load it: it must be in shared_preload_libraries). Takes ``lock`` (the
    migration lock) so that processes starting at once set it up once. The index ranks with
    BM25's ``k1_b``: one built with others is built again (it is the database's, so every
    vault in it ranks with the last values a store opened with)."""
    cur = await db.execute(
        "SELECT default_version FROM pg_available_extensions WHERE name = 'pg_textsearch'"
    )
    if await cur.fetchone() is None:
        return ""
    await db.execute("SELECT pg_advisory_lock(%s)", (lock,))
    try:
        await db.execute("CREATE EXTENSION IF NOT EXISTS pg_textsearch")
        await _fill_bodies(db, namespace, own)
        cur = await db.execute(
            "SELECT n.nspname FROM pg_ts_config c JOIN pg_namespace n "
            "ON n.oid = c.cfgnamespace WHERE c.cfgname = %s",
            (TS,),
        )
        schema = await cur.fetchone()
        config = f"{schema[0]}.{TS}" if schema else TS
        await _drop_if_ranking_otherwise(db, k1_b)
        await db.execute(
            sql.SQL(
                "CREATE INDEX IF NOT EXISTS {} ON memory_chunks USING bm25 (body) "
                "WITH (text_config = {}, k1 = {}, b = {})"
            ).format(
                sql.Identifier(INDEX), sql.Literal(config), sql.Literal(str(k1_b[0])),
                sql.Literal(str(k1_b[1])),
            )
        )  # fmt: skip
        await repair(db)
        await db.execute(  # a library that is installed but not loaded fails here
            f"SELECT id FROM memory_chunks ORDER BY body <@> to_bm25query('probe', '{INDEX}') "
            "LIMIT 1"
        )
        cur = await db.execute(
            "SELECT extversion FROM pg_extension WHERE extname = 'pg_textsearch'"
        )
        found = await cur.fetchone()
        return str(found[0]) if found else ""
    except psycopg.Error as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        log.warning("pg_textsearch is installed but cannot be used (%s): keywords are ranked "
                    "by PostgreSQL's own full text", first)  # fmt: skip
        return ""
    finally:
        try:
            await db.execute("SELECT pg_advisory_unlock(%s)", (lock,))
        except psycopg.Error:
            log.debug("could not release the migration lock", exc_info=True)


async def _drop_if_ranking_otherwise(
    db: psycopg.AsyncConnection[Any], k1_b: tuple[float, float]
) -> None:
    """Drop the index when it was built with another k1 or b than these (the next statement
    builds it again with them): they are fixed when an index is built."""
    cur = await db.execute(
        "SELECT reloptions FROM pg_class WHERE relname = %s AND relkind = 'i'", (INDEX,)
    )
    row = await cur.fetchone()
    if row is None:
        return
    options = dict(str(o).split("=", 1) for o in row[0] or [])
    built = (float(options.get("k1", 1.2)), float(options.get("b", 0.75)))
    if all(math.isclose(x, y) for x, y in zip(built, k1_b, strict=True)):
        return
    log.warning("pg_textsearch's index ranks with k1 %s, b %s: building it again with k1 %s, "
                "b %s (every vault in this database ranks with them)", *built, *k1_b)  # fmt: skip
    await db.execute(sql.SQL("DROP INDEX {}").format(sql.Identifier(INDEX)))


async def _fill_bodies(db: psycopg.AsyncConnection[Any], namespace: str, own: Words) -> None:
    """The body of every row of the namespace written without one (before pg_textsearch was
    there), once: segmenting Chinese takes memcore, not SQL."""
    cur = await db.execute("SELECT 1 FROM meta WHERE ns = %s AND key = %s", (namespace, FILLED))
    if await cur.fetchone() is not None:
        return
    filled = 0
    async for ids, bodies in keyword_texts(db, namespace, own, " AND body IS NULL"):
        await db.execute(
            "UPDATE memory_chunks c SET body = u.b FROM unnest(%s::int8[], %s::text[]) "
            "AS u(id, b) WHERE c.id = u.id",
            (ids, bodies),
        )
        filled += len(ids)
    if filled:
        log.info("pg_textsearch: filled in the ranked text of %d chunks", filled)
    await db.execute(
        "INSERT INTO meta (ns, key, value) VALUES (%s, %s, '1') ON CONFLICT DO NOTHING",
        (namespace, FILLED),
    )


def summary_docs(text: str) -> tuple[int, float] | None:
    """(documents, average length) from pg_textsearch's index summary, or None."""
    docs = re.search(r"total_docs:\s*(\d+)", text)
    length = re.search(r"avg_doc_len:\s*([\d.]+)", text)
    if docs is None:
        return None
    return int(docs.group(1)), float(length.group(1)) if length else 0.0


async def lost_statistics(db: psycopg.AsyncConnection[Any]) -> bool:
    """Whether the index says it holds no document while rows have the text it ranks:
    pg_textsearch 1.0 forgets its corpus statistics when the server restarts (measured), and
    then scores a word's rarity backwards (the commonest words highest)."""
    cur = await db.execute(f"SELECT bm25_summarize_index('{INDEX}')")
    row = await cur.fetchone()
    found = summary_docs(str(row[0])) if row else None
    if found is None or found[0] > 0:
        return False
    cur = await db.execute("SELECT EXISTS (SELECT 1 FROM memory_chunks WHERE body IS NOT NULL)")
    row = await cur.fetchone()
    return bool(row and row[0])


async def repair(db: psycopg.AsyncConnection[Any]) -> bool:
    """Rebuild the index when its statistics were lost (see ``lost_statistics``): 0.5 s at
    20k chunks. Writes wait meanwhile; searches rank by PostgreSQL's own full text."""
    if not await lost_statistics(db):
        return False
    started = time.perf_counter()
    await db.execute(sql.SQL("REINDEX INDEX {}").format(sql.Identifier(INDEX)))
    log.warning("pg_textsearch had lost its statistics (a server restart): rebuilt %s in %.1f s",
                INDEX, time.perf_counter() - started)  # fmt: skip
    return True
