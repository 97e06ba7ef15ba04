"""Keyword search in PostgreSQL: BM25 in pg_textsearch's index where the server has it, else
PostgreSQL's own full text, both to memcore's scale (scores relative to the best, coverage as
the share of the query's rarity the best hit holds). Chinese is segmented by memcore on both
sides. A small scope's rows (a user's among a fleet's) are ranked among themselves, each word
weighed by its rarity there, as in SQLite."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from typing import Any

from psycopg import sql

from memcore.core.models import SearchFilters
from memcore.core.tokenize import (
    ANCHOR_CAP,
    ANCHOR_MAX_TERMS,
    ANCHOR_ROWS,
    anchor_terms,
    coverage,
    idf,
)
from memcore.storage.base import Vector, search_terms
from memcore.storage.filters_sql import POSTGRES, filter_sql, scope_selects, unscoped
from memcore.storage.postgres.bm25 import INDEX as BM25_INDEX
from memcore.storage.postgres.bm25 import lost_statistics, summary_docs
from memcore.storage.postgres.queries import (
    SMALL_SCOPE,
    TS,
    Conn,
    Queries,
    StoreState,
    as_param,
)


class KeywordQueries(Queries):
    """The keyword half of a snapshot's reads (and the scope lookup both halves share)."""

    def __init__(self, conn: Conn, generation: int, store: StoreState) -> None:
        super().__init__(conn, store)
        self.generation = generation
        # the query's vector and model, and the cosine of each keyword hit read with it (None:
        # another model's chunk, or none yet), which vector_similarity then answers from
        self._vector: tuple[Vector, str] | None = None
        self.cosines: dict[int, float | None] = {}

    async def search_text(
        self,
        query: str,
        k: int,
        filters: SearchFilters,
        vector: tuple[Vector, str] | None = None,
    ) -> list[tuple[int, float]]:
        terms = await search_terms(query, self._store.words)
        if not terms:
            return []
        self._vector = vector
        # a small scope's halves are a few ms each: not worth a second connection. Without a
        # scope the snapshot is exported at once, before the vector half's query takes the
        # connection (else the keyword half would start only after it)
        few = None if scope_selects(filters, POSTGRES) is None else await self._few_ids(filters)
        side = await self._side_reader() if few is None else None
        if side is None:
            return await self._search_text(terms, k, filters)
        side._few_memo, side._vector = self._few_memo, vector
        try:
            found = await side._search_text(terms, k, filters)
            self._counted, self.cosines = side._counted, side.cosines
            return found
        finally:
            await self._store.end_side_read(side.conn)

    async def _side_reader(self) -> KeywordQueries | None:
        """This snapshot on another connection, when one is idle: the keyword half then runs
        beside the vector half (the snapshot's first query) instead of after it, as SQLite's
        does on its reader thread. None when every connection is busy: under load, parallel
        halves would only queue."""
        conn = await self._store.idle_reader()
        if conn is None:
            return None
        try:
            rows = await self.all("SELECT pg_export_snapshot()")
            async with conn.pipeline():  # one round trip for both
                await conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
                await conn.execute(
                    sql.SQL("SET TRANSACTION SNAPSHOT {}").format(sql.Literal(rows[0][0]))
                )
        except BaseException:
            await self._store.end_side_read(conn)
            raise
        return KeywordQueries(conn, self.generation, self._store)

    async def _search_text(
        self, terms: list[str], k: int, filters: SearchFilters
    ) -> list[tuple[int, float]]:
        where, params = filter_sql(filters, POSTGRES)
        few = await self._few_ids(filters)
        if few is not None:  # a small scope: its own rows, each word weighed by its rarity there
            rest, more = filter_sql(unscoped(filters), POSTGRES)
            where, params = f"{rest} AND c.id = ANY(%s)", [*more, few]
            if len(terms) == 1:
                return await self._ranked(terms, None, k, where, params)
            return await self._ranked_in_scope(terms, few, k, where, params)
        if self._store.bm25 and await self._bm25_sound():
            if 1 < len(terms) <= ANCHOR_MAX_TERMS:  # coverage weighs the words by these
                self._counted = await self._bm25_counts(terms)
            return await self._bm25_ranked(terms, k, where, params)
        if not 1 < len(terms) <= ANCHOR_MAX_TERMS:
            return await self._ranked(terms, None, k, where, params)
        # Each word's chunks are counted (a GIN lookup, up to a cap). The counts weigh each
        # word by its rarity (BM25's IDF; ts_rank_cd alone has none, so "common zebra" would
        # rank the chunks saying "common" twice first), and, as in SQLite, when common words
        # would make ranking read most of the table, only the rarest words' chunks are ranked.
        counts = await self._counts_capped(terms, ANCHOR_CAP)
        total = await self._chunk_count()
        self._counted = (terms, counts, total)
        weights = [idf(total, counts[t]) for t in terms]
        anchors = anchor_terms(counts, want=max(ANCHOR_ROWS, 5 * k), cap=ANCHOR_CAP)
        if anchors is not None:
            rows = await self._ranked(terms, weights, k, where, params, anchors)
            if len(rows) >= k:
                return rows
        return await self._ranked(terms, weights, k, where, params)

    async def _bm25_ranked(
        self, terms: list[str], k: int, where: str, params: list[object]
    ) -> list[tuple[int, float]]:
        """The k best by BM25 from pg_textsearch's index (its top-k scan stops early: a common
        word's matches are not all ranked). Its scores are negative, lower better; a filter
        is applied as the scan goes, which goes on until k rows pass. Never prepared: the
        driver prepares a statement after five runs, and a prepared BM25 scan scores every
        row it returns again from its text (92 ms a CMRC question against 1.3, measured)."""
        score = f"c.body <@> to_bm25query(%s, '{BM25_INDEX}')"
        query = " ".join(terms)
        cosine, cosine_params = self._cosine_column()
        rows = await self.all(
            f"SELECT c.id, {score}{cosine} FROM memory_chunks c WHERE c.ns = %s{where} "
            f"ORDER BY {score} LIMIT %s",
            [query, *cosine_params, self.ns, *params, query, k],
            prepare=False,
        )
        self._note_cosines(rows)
        return [(int(r[0]), -float(r[1])) for r in rows if float(r[1]) < 0]

    def _cosine_column(self) -> tuple[str, list[object]]:
        """The hits' cosine to the query's vector as a last column, read with their rows (a
        search then asks no second query for it), and its parameters; none without one."""
        if self._vector is None:
            return "", []
        vector, model_id = self._vector
        column = (
            ", CASE WHEN c.embedding_model = %s AND vector_dims(c.embedding) = %s "
            "THEN 1 - (c.embedding <=> %s::vector) END"
        )
        return column, [model_id, int(vector.size), as_param(vector)]

    def _note_cosines(self, rows: Sequence[Sequence[Any]]) -> None:
        if self._vector is not None:
            self.cosines.update((int(r[0]), None if r[-1] is None else float(r[-1])) for r in rows)

    async def _bm25_counts(self, terms: list[str]) -> tuple[list[str], dict[str, int], int]:
        """Each word's chunk count as the BM25 index knows it, without reading a row: a word
        scored against a document of that word alone scores its IDF (Lucene's, as ``idf``)
        times a factor of the average length, which gives the count back. Counting through
        GIN and the table instead took 80 ms a SciFact claim (measured). Over every namespace,
        as the index ranks, so only where the database holds this namespace alone; else, or
        where the index's statistics cannot be read, the namespace's words are counted."""
        stats = await self._bm25_stats()
        if stats is None:  # the index is not this namespace's alone: count the namespace's own
            return terms, await self._counts_capped(terms, ANCHOR_CAP), await self._chunk_count()
        docs, length = stats
        rows = await self.all(
            f"SELECT u.t <@> to_bm25query(u.t, '{BM25_INDEX}') FROM unnest(%s::text[]) "
            "WITH ORDINALITY AS u(t, n) ORDER BY u.n",
            (terms,),
        )
        k1, b = self._store.k1, self._store.b  # the index's own (see bm25.enable_bm25)
        factor = (k1 + 1) / (1 + k1 * (1 - b + b / length))
        counts = {}
        for term, (score,) in zip(terms, rows, strict=True):
            weight = -float(score) / factor
            counts[term] = round(max(0.0, (docs + 1) / math.exp(weight) - 0.5)) if weight else 0
        return terms, counts, docs

    async def _bm25_sound(self) -> bool:
        """Whether pg_textsearch's index can rank: checked after the store connects again
        (a server restart makes pg_textsearch 1.0 forget its statistics); when it cannot,
        the store rebuilds it and PostgreSQL's own full text ranks meanwhile."""
        if self._store.bm25_check_due:
            self._store.bm25_check_due = False
            if await lost_statistics(self.conn):
                self._store.bm25_lost()
            else:  # sound again (rebuilt here, or by another node)
                self._store.bm25_sound = True
        return self._store.bm25_sound

    async def _bm25_stats(self) -> tuple[int, float] | None:
        """(documents, average length) of the BM25 index, from its summary, at this
        generation; None when the summary does not say them, or when another namespace was
        ever opened in this database (its generation row): the index then counts its rows
        too."""
        memo = self._store.count_memo
        if memo.get("bm25_at") != self.generation:
            (text, alone), *_ = await self.all(
                f"SELECT bm25_summarize_index('{BM25_INDEX}'), "
                "NOT EXISTS (SELECT 1 FROM generation WHERE ns <> %s)",
                (self.ns,),
            )
            found = summary_docs(str(text)) if alone else None
            usable = found is not None and found[0] > 0 and found[1] > 0
            docs, length = found if found is not None and usable else (0, 0.0)
            memo.update(bm25_at=self.generation, bm25_docs=docs, bm25_length=length)
        if memo["bm25_docs"] <= 0:
            return None
        return int(memo["bm25_docs"]), memo["bm25_length"]

    async def keyword_coverage(self, query: str, ids: Sequence[int]) -> dict[int, float]:
        terms = (await search_terms(query, self._store.words))[:ANCHOR_MAX_TERMS]
        if not terms or not ids:
            return {}
        if self._counted and self._counted[0] == terms:  # this snapshot's search counted them
            _, counts, total = self._counted
        elif len(terms) == 1:  # one word needs no count: it is all of the query's weight
            counts, total = {terms[0]: 1}, 1
        elif self._store.bm25 and self._store.bm25_sound:  # as a search counts them
            _, counts, total = await self._bm25_counts(terms)
        else:
            counts = await self._counts_capped(terms, ANCHOR_CAP)
            total = await self._chunk_count()
        holds = ", ".join([f"c.fts @@ plainto_tsquery('{TS}', %s)"] * len(terms))
        rows = await self.all(
            f"SELECT c.id, {holds} FROM memory_chunks c WHERE c.ns = %s AND c.id = ANY(%s)",
            [*terms, self.ns, list(ids)],
        )
        held = {int(r[0]): [t for t, h in zip(terms, r[1:], strict=True) if h] for r in rows}
        return {cid: coverage(counts, total, held.get(cid, ())) for cid in ids}

    async def _chunk_count(self) -> int:
        memo = self._store.count_memo
        if memo.get("generation") != self.generation:
            rows = await self.all("SELECT count(*) FROM memory_chunks WHERE ns = %s", (self.ns,))
            memo.update(generation=self.generation, chunks=int(rows[0][0]))
        return int(memo["chunks"])

    async def _counts_capped(self, terms: list[str], cap: int) -> dict[str, int]:
        """Each word's chunks in the namespace, counted up to ``cap`` (past it: cap + 1). A
        common word's count reads ``cap`` rows through the GIN index and the table (80 ms a
        SciFact claim of ~15 words, measured), and the same common words come back query
        after query: those are remembered (``CommonCounts``, as SQLite does) while the
        namespace stays within a tenth of its size then. Counts under the cap are exact."""
        span = await self._chunk_count()
        remembered = self._store.common_counts
        counts = {t: n for t in terms if (n := remembered.get(t, span)) is not None}
        todo = [t for t in terms if t not in counts]
        if todo:
            one = (
                "(SELECT count(*) FROM (SELECT 1 FROM memory_chunks WHERE ns = %s AND "
                f"fts @@ plainto_tsquery('{TS}', %s) LIMIT %s) x)"
            )
            params: list[object] = []
            for term in todo:
                params += [self.ns, term, cap + 1]
            rows = await self.all("SELECT " + ", ".join([one] * len(todo)), params)
            for term, n in zip(todo, rows[0], strict=True):
                counts[term] = int(n)
                if int(n) > cap:
                    remembered.put(term, int(n), span)
        return {t: counts[t] for t in terms}

    async def _ranked_in_scope(
        self, terms: list[str], few: list[int], k: int, where: str, params: list[object]
    ) -> list[tuple[int, float]]:
        """BM25 in a small scope, each word weighed by its rarity there (``idf`` of its count
        among the scope's chunks), in one statement that counts the words, weighs them and
        ranks (and returns the counts, for ``keyword_coverage``). One pass over the scope's
        rows counts every word: a subquery a word, each planned on its own, took 2.6 ms
        against 0.8 for a user's 100 chunks at 1M."""
        one = f"count(*) FILTER (WHERE fts @@ plainto_tsquery('{TS}', %s))"
        scope: tuple[str, list[object]] = (  # a CTE named twice is computed once
            "n AS (SELECT ARRAY[" + ", ".join([one] * len(terms)) + "] AS c "
            "FROM memory_chunks WHERE id = ANY(%s)), ",
            [*terms, few],
        )
        weights: tuple[str, list[object]] = (  # tokenize.idf, in SQL
            "(SELECT array_agg(ln((%s::float8 - x.n + 0.5) / (x.n::float8 + 0.5) + 1.0) "
            "ORDER BY x.i) FROM n, unnest(n.c) WITH ORDINALITY AS x(n, i))",
            [len(few)],
        )
        query, values = await self._ranked_query(terms, weights, k, where, params, scope=scope)
        rows = await self.all(query, values)
        if rows:  # the counts are on every row (none: no chunk of the scope holds a word)
            found = {t: int(n) for t, n in zip(terms, rows[0][2], strict=True)}
            self._counted = (terms, found, len(few))  # coverage weighs them as ranking did
        return self._ranked_rows(rows)

    async def _ranked(
        self,
        terms: list[str],
        weights: list[float] | None,
        k: int,
        where: str,
        params: list[object],
        anchors: list[str] | None = None,
    ) -> list[tuple[int, float]]:
        """BM25 (keywords.k1 and .b: 1.2 and 0.75 unless set, as FTS5) of the chunks that hold
        a word (or an anchor word), each word weighed by ``weights`` (its rarity; 1 each when
        None: one word, or a scope's). A word's frequency in a chunk and the chunk's length
        are read from its tsvector; the average length is the namespace's (sampled, see
        ``_average_length``)."""
        given: tuple[str, list[object]] = ("%s::float8[]", [weights or [1.0] * len(terms)])
        query, values = await self._ranked_query(terms, given, k, where, params, anchors)
        return self._ranked_rows(await self.all(query, values))

    def _ranked_rows(self, rows: list[Any]) -> list[tuple[int, float]]:
        self._note_cosines(rows)
        return [(int(r[0]), float(r[1] or 0.0)) for r in rows]

    async def _ranked_query(
        self,
        terms: list[str],
        weights: tuple[str, list[object]],
        k: int,
        where: str,
        params: list[object],
        anchors: list[str] | None = None,
        scope: tuple[str, list[object]] = ("", []),
    ) -> tuple[str, list[object]]:
        """``_ranked``'s statement and its values; ``weights``: a float8[] expression and its
        values; ``scope``: a CTE ``n`` of the scope's word counts, which each row returns
        third."""
        # Every word is its own plainto_tsquery, ORed: nothing the user typed is syntax.
        one = f"plainto_tsquery('{TS}', %s)"
        match = "(" + " || ".join([one] * len(anchors or terms)) + ")"
        average = await self._average_length()
        k1, b = self._store.k1, self._store.b
        cosine, cosine_params = self._cosine_column()
        counts = ", (SELECT c FROM n)" if scope[0] else ""
        return (
            f"WITH {scope[0]}q AS (SELECT DISTINCT ON (t.lexeme) t.lexeme, q.w FROM "
            f"unnest(%s::text[], {weights[0]}) AS q(term, w), "
            f"unnest(to_tsvector('{TS}', q.term)) AS t ORDER BY t.lexeme, q.w DESC) "
            "SELECT c.id, (SELECT sum(q.w * f.tf * (%s + 1) / (f.tf + %s * (1 - %s + %s * "
            "d.n / %s))) FROM (SELECT u.lexeme, coalesce(array_length(u.positions, 1), 1) "
            f"AS tf FROM unnest(c.fts) AS u) f JOIN q ON q.lexeme = f.lexeme) AS r{counts} "
            f"{cosine} FROM memory_chunks c CROSS JOIN LATERAL (SELECT sum(coalesce(array_length("
            "u.positions, 1), 1)) AS n FROM unnest(c.fts) AS u) d "
            f"WHERE c.ns = %s AND c.fts @@ {match}{where} ORDER BY r DESC NULLS LAST, c.id "
            "LIMIT %s",
            [*scope[1], terms, *weights[1], k1, k1, b, b, average, *cosine_params, self.ns,
             *(anchors or terms),
             *params, k],
        )  # fmt: skip

    async def _average_length(self) -> float:
        """The namespace's average chunk length in words, from a sample of up to ~2,000
        chunks, remembered until the namespace grows or shrinks by a tenth."""
        total = await self._chunk_count()
        memo = self._store.count_memo
        if total and abs(total - memo.get("length_at", -total)) * 10 <= total:
            return memo["length"]
        share = min(100.0, 100.0 * 2000 / max(total, 1))
        found = 0.0
        # REPEATABLE: the same rows for every process reading the same table, so that two
        # nodes (or a restart) rank alike; unseeded, 8 of 200 scoped searches at 1M ordered
        # their top 20 differently from one process to the next
        for sample in (f"TABLESAMPLE BERNOULLI ({share:.6f}) REPEATABLE (0)", ""):
            rows = await self.all(
                "SELECT avg((SELECT sum(coalesce(array_length(u.positions, 1), 1)) "
                f"FROM unnest(c.fts) AS u)) FROM memory_chunks c {sample} WHERE c.ns = %s",
                (self.ns,),
            )
            found = float(rows[0][0] or 0.0)
            if found > 0:  # else a sample that missed every row of a small namespace
                break
        memo.update(length_at=total, length=max(found, 1.0))
        return memo["length"]

    async def _few_ids(self, filters: SearchFilters) -> list[int] | None:
        """The chunks of a filter's scope when they are few (a user's among a fleet's), read
        through the scope's indexes; None when there is no scope or more than SMALL_SCOPE:
        then the vector index does the filtering as it walks."""
        memo = self._few_memo
        if memo is not None and memo[0] is filters:  # the other half of the same search,
            return await asyncio.shield(memo[1])  # which may be reading them right now
        reading = asyncio.ensure_future(self._read_few_ids(filters))
        self._few_memo = (filters, reading)
        return await asyncio.shield(reading)

    async def _read_few_ids(self, filters: SearchFilters) -> list[int] | None:
        selects = scope_selects(filters, POSTGRES)
        if selects is None:
            return None
        # one round trip: each part keeps its own plan (its index) inside the UNION ALL
        query = " UNION ALL ".join(f"({q} LIMIT %s)" for q, _ in selects)
        rows = await self.all(query, [p for _, ps in selects for p in (*ps, SMALL_SCOPE + 1)])
        ids = {int(r[0]) for r in rows}
        return sorted(ids) if len(ids) <= SMALL_SCOPE else None
