"""MemoryApi: what an agent calls to remember and recall (Mem0- and RRClaw-style), scoped.

Reached as ``service.memories``. Writes go to Markdown first (see writer.py) and are
searchable when the call returns. Every method takes the scope as ``user_id``, ``agent_id``
``run_id`` and ``app_id``; a scoped call never sees another scope's memories.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Mapping, Sequence

from memcore.core.errors import ConfigError, InputError, NotFound
from memcore.core.ids import check_id
from memcore.core.models import Entity, Hit, MemoryQuery, MemoryRecord, scope_ids
from memcore.core.moments import utc_today
from memcore.core.vectors import VectorLike
from memcore.llm.base import LLM
from memcore.memory import infer
from memcore.memory.adding import NewMemory
from memcore.memory.archive import Archive
from memcore.memory.conversations import TOOL_ROLES, message_text
from memcore.memory.port import Memory
from memcore.memory.supplied import own_vector
from memcore.memory.writer import MemoryWriter
from memcore.search.filters import read_filters
from memcore.search.recall import Recall, note_key
from memcore.search.searcher import Searcher
from memcore.search.strength import AGAIN, EASY, HARD
from memcore.storage.base import Store, Vector
from memcore.vault.memory_format import Scope, check_expiry, check_moment, check_name, new_id

Message = Mapping[str, object]
MAX_LIST = 10_000


class MemoryApi(Memory):
    """The markdown adapter: memories written into the vault's Markdown and indexed here, with
    FSRS strength, an archive and history."""

    def __init__(
        self,
        store: Store,
        writer: MemoryWriter,
        searcher: Searcher,
        llm: LLM | None = None,
        recall: Recall | None = None,
    ) -> None:
        self._store = store
        self.writer = writer
        self.searcher = searcher
        self.llm = llm
        self.recall = recall or searcher.recall
        self.archive = Archive(writer)

    async def add(
        self,
        content: str | Sequence[Message],
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        metadata: Mapping[str, object] | None = None,
        category: str = "core",
        key: str | None = None,
        infer: bool = False,
        idempotency_key: str | None = None,
        created: str | float | None = None,
        expiration_date: str | None = None,
        immutable: bool = False,
        vector: VectorLike | None = None,
        vector_model: str | None = None,
    ) -> list[MemoryRecord]:
        """Remember ``content`` (a text, or chat messages: one memory per message with text).
        With ``key``, replaces that key's memory in the same scope and category. With
        ``infer``, an LLM extracts facts and adds, updates or deletes memories of the scope;
        the records say which (``event``). With ``idempotency_key``, a retried call (same
        key) returns what the first one added and writes nothing.
        ``created`` (Unix seconds or an ISO time) is when they were made, for memories
        imported from elsewhere; after ``expiration_date`` (an ISO date) reads leave them out
        and the forget loop archives them; ``immutable`` ones refuse updates. ``vector``, the
        caller's own vector for the one text given (made by ``vector_model``, which must be
        the index's when named): stored instead of the model's (memory/supplied.py)."""
        scope = Scope(user_id, agent_id, run_id, app_id)
        own = own_vector(vector, vector_model)
        made = NewMemory("", created=check_moment(created), expires=check_expiry(expiration_date),
                         immutable=immutable)  # fmt: skip
        if infer and own is not None:
            raise InputError("a vector is for the text given: infer=True writes its own texts")
        if infer:
            if self.llm is None:
                raise ConfigError("infer=True needs an LLM: set llm.provider to ollama or openai")
            messages = (
                [{"role": "user", "content": content}] if isinstance(content, str) else content
            )
            _message_texts(messages)  # validates them
            return await self._infer(messages, scope, category, metadata, made)
        texts = [content] if isinstance(content, str) else _message_texts(content)
        if key is not None and len(texts) != 1:
            raise InputError("a key names one memory; give one text")
        if own is not None and len(texts) != 1:
            raise InputError(f"a vector is for one memory; these messages make {len(texts)}")
        items = [
            dataclasses.replace(made, content=t, scope=scope, category=category, key=key,
                                metadata=metadata, id=new_id(), vector=own,
                                vector_model=vector_model)
            for t in texts
        ]  # fmt: skip
        return await self.writer.add_batch(items, idempotency_key)

    async def _infer(
        self,
        messages: Sequence[Message],
        scope: Scope,
        category: str,
        metadata: Mapping[str, object] | None,
        made: NewMemory,
    ) -> list[MemoryRecord]:
        assert self.llm is not None
        answer = await self.llm.json_chat(infer.EXTRACT, infer.conversation_text(messages))
        facts = infer.parse_facts(answer)
        if not facts:
            return []
        similar: dict[str, MemoryRecord] = {}
        for fact in facts:
            found = await self.search(
                fact, **scope.to_dict(), limit=5,
            )  # fmt: skip
            for r in found:
                similar.setdefault(r.id, r)
        existing = list(similar.values())
        answer = await self.llm.json_chat(infer.RECONCILE, infer.reconcile_prompt(existing, facts))
        decisions = infer.parse_decisions(answer, existing)
        adds = [
            dataclasses.replace(made, content=d.text, scope=scope, category=category,
                                metadata=metadata, id=new_id())
            for d in decisions if d.event == "ADD"
        ]  # fmt: skip
        out = [dataclasses.replace(r, event="ADD") for r in await self.writer.add_batch(adds)]
        for d in decisions:
            # an immutable memory stays as it is, whatever the model decides
            if d.target is None or d.event == "NONE" or d.target.immutable:
                continue
            if d.event == "UPDATE":
                updated = await self.writer.update(d.target.id, d.text)
                out.append(dataclasses.replace(updated, event="UPDATE"))
            else:
                await self.writer.delete(d.target.id)
                out.append(dataclasses.replace(d.target, event="DELETE", score=None))
        return out

    async def add_batch(self, memories: Sequence[NewMemory]) -> list[MemoryRecord]:
        return await self.writer.add_batch(memories)

    async def load(self, memories: Sequence[NewMemory]) -> int:
        return await self.writer.load(memories)

    async def store(
        self,
        key: str,
        content: str,
        category: str = "core",
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
    ) -> MemoryRecord:
        """RRClaw's store: insert or replace the memory under ``key`` in this scope/category."""
        scope = Scope(user_id, agent_id, run_id, app_id)
        return await self.writer.add(NewMemory(content, scope, category, key))

    async def write_memory(self, content: str, file: str = "MEMORY.md") -> str:
        """Seed 003's write_memory: append Markdown to a vault file and index it."""
        return await self.writer.append_note(file, content)

    async def get(self, memory_id: str, *, review: bool = True) -> MemoryRecord:
        """One memory by id, with its strength. Reading it counts as a review (a use) unless
        ``review=False`` (a look before changing or deleting it)."""
        record = await self.writer.get(memory_id)
        if review:
            await self.recall.review([record.id])
        return (await self.with_strength([record]))[0]

    async def reinforce(self, *memory_ids: str) -> list[MemoryRecord]:
        """Count a use of each memory (an FSRS review); returns them with their new strength.
        Raises NotFound for an id that is not a memory."""
        records = [await self.writer.get(mid) for mid in memory_ids]
        await self.recall.review([r.id for r in records], strict=True)
        return await self.with_strength(records)

    async def feedback(self, memory_id: str, feedback: str | None) -> MemoryRecord:
        """Mem0's feedback as an FSRS review of the memory: POSITIVE (it helped) rates it
        Easy, NEGATIVE (it did not) Hard, VERY_NEGATIVE (it is wrong) Again, a lapse after
        which it fades within days and the forget loop archives it. None records nothing.
        Returns the memory with its strength now."""
        grades = {"POSITIVE": EASY, "NEGATIVE": HARD, "VERY_NEGATIVE": AGAIN}
        if feedback is not None and feedback.upper() not in grades:
            raise InputError(f"feedback must be one of {', '.join(grades)} or null")
        record = await self.writer.get(memory_id)
        if feedback is not None:
            await self.recall.review([record.id], grade=grades[feedback.upper()], strict=True)
        return (await self.with_strength([record]))[0]

    async def entities(self) -> list[Entity]:
        """Every user, agent, run and app that holds memories, with how many (Mem0's
        users())."""
        async with self._store.snapshot() as reader:
            return await reader.entities()

    async def delete_entity(self, kind: str, name: str, *, missing_ok: bool = False) -> int:
        """Delete every memory of one user, agent or run (Mem0's delete_users); how many.
        Raises NotFound when it holds none."""
        if kind not in ("user", "agent", "run", "app"):
            raise InputError(f"an entity is a user, agent, run or app, not {kind!r}")
        gone = await self.delete_all(**scope_ids({f"{kind}_id": check_id(name, f"{kind}_id")}))
        if not gone and not missing_ok:
            raise NotFound(f"no memories of {kind} {name!r}")
        return gone

    async def with_strength(
        self, records: Sequence[MemoryRecord], now: dt.datetime | None = None
    ) -> list[MemoryRecord]:
        """The records with their FSRS strength now."""
        held = await self.recall.of_records(records, now)
        return [dataclasses.replace(r, strength=held.get(r.id)) for r in records]

    async def forget_below(
        self,
        threshold: float,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        category: str | None = None,
        dry_run: bool = False,
        now: dt.datetime | None = None,
    ) -> list[MemoryRecord]:
        """Goclaw's ForgetByThreshold: archive every decaying memory of the scope whose
        retrievability is below ``threshold`` (core memories never go). ``dry_run`` only
        lists them. Archived memories move to memory/.archive/ and ``restore`` brings one
        back; nothing is deleted."""
        if not 0 < threshold < 1:
            raise InputError(f"threshold must be between 0 and 1, got {threshold}")
        query = self._query(Scope(user_id, agent_id, run_id, app_id), category)
        weak: list[MemoryRecord] = []
        offset = 0
        while page := await self.writer.get_all(_paged(query, MAX_LIST, offset)):
            weak += [
                r
                for r in await self.with_strength(page, now)
                if r.strength
                and r.strength.tier != "core"
                and r.strength.retrievability < threshold
            ]
            offset += len(page)
        if weak and not dry_run:
            moved = set(await self.archive.archive(weak))
            weak = [r for r in weak if r.id in moved]
        return weak

    async def archive_expired(self) -> list[MemoryRecord]:
        """Archive every memory whose expiration date has passed (Mem0's expiration_date;
        ``restore`` brings one back, its expiry cleared). Returns them."""
        query = MemoryQuery(expired=True, today=utc_today(), limit=MAX_LIST)
        gone: list[MemoryRecord] = []
        while page := await self.writer.get_all(query):  # archived ones leave the query
            moved = set(await self.archive.archive(page))
            gone += [r for r in page if r.id in moved]
            if not moved:
                break
        return gone

    async def forget_by_threshold(
        self, threshold: float, **scope: str | None
    ) -> list[MemoryRecord]:
        """Goclaw's name for ``forget_below`` (scope as user_id/agent_id/run_id/app_id)."""
        return await self.forget_below(threshold, **scope)  # type: ignore[arg-type]

    async def restore(self, memory_id: str) -> MemoryRecord:
        """Bring an archived memory back to its file, with its id, fields and strength."""
        await self.archive.restore(memory_id)
        return (await self.with_strength([await self.writer.get(memory_id)]))[0]

    async def archived(self, memory_id: str) -> MemoryRecord:
        """An archived memory, as it was when archived (NotFound when it is not archived)."""
        return await self.archive.peek(memory_id)

    async def reinforce_hits(self, hits: Sequence[Hit]) -> None:
        """Count a use of search hits: a memory by its id, a note by its note key."""
        await self.recall.review([h.id or note_key(h.path, h.start_line, h.end_line) for h in hits])

    async def get_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        category: str | None = None,
        key: str | None = None,
        tag: str | None = None,
        filters: Mapping[str, object] | None = None,
        limit: int = 100,
        offset: int = 0,
        show_expired: bool = False,
    ) -> list[MemoryRecord]:
        """Memories in a scope (oldest first), optionally of a category, key, #tag or with
        metadata matching ``filters`` (``{"k": v}``, ``{"k": {"in": [...]}}``, AND/OR)."""
        if not 1 <= limit <= MAX_LIST or offset < 0:
            raise InputError(f"limit must be 1-{MAX_LIST} and offset >= 0")
        query = self._query(Scope(user_id, agent_id, run_id, app_id), category, key, tag, filters)
        query = _unexpired(query) if not show_expired else query
        return await self.with_strength(await self.writer.get_all(_paged(query, limit, offset)))

    async def get_memories_by_tag(self, tag: str, limit: int = 100) -> list[MemoryRecord]:
        """Seed 003's listing by tag, with no query: the memories and notes that carry it
        (a #tag in the text or ``tags:`` in a note's front matter), newest first."""
        return await self.search("", tag=tag, limit=limit)

    async def count(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        category: str | None = None,
        filters: Mapping[str, object] | None = None,
        show_expired: bool = False,
    ) -> int:
        """How many memories (conversation turns only when ``category`` asks for them;
        expired ones only with ``show_expired``)."""
        query = self._query(Scope(user_id, agent_id, run_id, app_id), category, filters=filters)
        return await self.writer.count(_unexpired(query) if not show_expired else query)

    async def categories(self, **scope: str | None) -> dict[str, int]:
        rows = await self.get_all(**scope, limit=MAX_LIST)  # type: ignore[arg-type]
        out: dict[str, int] = {}
        for r in rows:
            out[r.category] = out.get(r.category, 0) + 1
        return out

    async def update(
        self,
        memory_id: str,
        content: str | None = None,
        metadata: Mapping[str, object] | None = None,
        *,
        created: str | float | None = None,
        expiration_date: str | None = None,
        vector: VectorLike | None = None,
        vector_model: str | None = None,
    ) -> MemoryRecord:
        """Change a memory's text, metadata (replaced whole), ``created`` time (Unix seconds
        or an ISO time) or ``expiration_date`` (an ISO date; "" takes it away). An immutable
        memory refuses (ImmutableMemory, a WriteConflict). ``vector``: the caller's own vector
        for its (new) text, as ``add`` takes one."""
        expires = None if expiration_date in (None, "") else check_expiry(expiration_date)
        own = own_vector(vector, vector_model)
        return await self.writer.update(
            memory_id, content, metadata, check_moment(created),
            "" if expiration_date == "" else expires, own, vector_model,
        )  # fmt: skip

    async def delete(self, memory_id: str) -> None:
        await self.writer.delete(memory_id)

    async def delete_many(self, memory_ids: Sequence[str]) -> int:
        """Forget these memories: all of their files written, or none (see the port)."""
        ids = list(dict.fromkeys(memory_ids))
        records = await self.writer.records(ids, missing_ok=True)  # one read, not one an id
        if len(records) < len(ids):
            lost = next(i for i in ids if i not in {r.id for r in records})
            raise NotFound(f"no memory with id {lost!r}")
        return await self.writer.delete_many(records, restorable=True)

    async def forget(
        self,
        key: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        category: str | None = None,
    ) -> bool:
        """Delete the memory under ``key`` in this scope; whether one was there."""
        rows = await self.writer.get_all(
            self._query(Scope(user_id, agent_id, run_id, app_id), category, key)
        )
        return await self.writer.delete_many(rows) > 0

    async def delete_all(
        self,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        all: bool = False,
    ) -> int:
        """Delete every memory of a scope. With no scope, refuses unless ``all=True``."""
        scope = Scope(user_id, agent_id, run_id, app_id)
        if scope.empty and not all:
            raise InputError("delete_all needs user_id, agent_id, run_id or app_id (or all=True)")
        # conversation turns too: everything of the scope goes
        query = dataclasses.replace(self._query(scope), include_turns=True)
        gone = 0
        while rows := await self.writer.get_all(_paged(query, MAX_LIST, 0)):
            removed = await self.writer.delete_many(rows)
            gone += removed
            if not removed:
                break
        return gone

    async def reset(self) -> int:
        """Forget every memory (notes written by people are not memories and stay)."""
        return await self.delete_all(all=True)

    async def history(self, memory_id: str) -> list[dict[str, object]]:
        """ADD / UPDATE / DELETE events of a memory, oldest first, with who made them. An id
        that never was a memory: NotFound (a memory written by hand may have none)."""
        events = await self.writer.history_of(memory_id)
        if not events:
            await self.writer.get(memory_id)
        return events

    async def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        agent_id: str | None = None,
        run_id: str | None = None,
        app_id: str | None = None,
        include_shared: bool = False,
        include_turns: bool = True,
        category: str | None = None,
        filters: Mapping[str, object] | None = None,
        tag: str | None = None,
        path: str | None = None,
        since: str | None = None,
        until: str | None = None,
        limit: int = 5,
        threshold: float | None = None,
        query_vector: Vector | None = None,
        reinforce: bool = False,
        show_expired: bool = False,
        include_notes: bool = True,
    ) -> list[MemoryRecord]:
        """Hybrid search as records, each with its score (0-1) and strength. Notes come back
        too (id ``note:path#Lstart-end``, category ``note``) unless a category or metadata
        filter is given. With a scope, only its memories and the notes in its folders, plus
        shared context with ``include_shared``. An empty query with a ``tag`` lists what
        carries the tag, newest first. ``query_vector`` (from the same embedding model) skips
        embedding the query; ``reinforce`` counts every result as used (a review)."""
        search_filters = read_filters(
            user_id=user_id, agent_id=agent_id, run_id=run_id, app_id=app_id,
            include_shared=include_shared,
            include_turns=include_turns, category=category, metadata=filters, tag=tag,
            path=path, since=since, until=until, include_notes=include_notes,
            show_expired=show_expired,
        )  # fmt: skip
        result = await self.searcher.search(
            query, limit, search_filters, min_score=threshold, query_vector=query_vector
        )
        out = await self.records_of(result.hits, result.memories)
        if reinforce:
            await self.recall.review([r.id for r in out])
        return await self.with_strength(out)

    async def records_of(
        self, hits: Sequence[Hit], known: Mapping[int, MemoryRecord] | None = None
    ) -> list[MemoryRecord]:
        """Search hits as records with their scores: a memory's own record, or a note's.
        ``known``: the hits' memories as the search read them (then nothing is read again)."""
        if known is not None:
            records = known
        else:
            async with self._store.snapshot() as reader:
                records = await reader.memories_of_chunks([h.chunk_id for h in hits])
        out = []
        for hit in hits:
            record = records.get(hit.chunk_id)
            if record is None:
                record = MemoryRecord(
                    id=note_key(hit.path, hit.start_line, hit.end_line),
                    text=hit.text, path=hit.path, start_line=hit.start_line,
                    end_line=hit.end_line, category="note", created=hit.date or "",
                )  # fmt: skip
            out.append(_scored(record, hit.score))
        return out

    def _query(
        self,
        scope: Scope,
        category: str | None = None,
        key: str | None = None,
        tag: str | None = None,
        filters: Mapping[str, object] | None = None,
    ) -> MemoryQuery:
        if category is not None:
            check_name(category, "category")
        return MemoryQuery(
            **scope.to_dict(), category=category, key=key, tag=tag, metadata=filters,
            limit=MAX_LIST, include_turns=False,
        )  # fmt: skip


def _unexpired(query: MemoryQuery) -> MemoryQuery:
    """The query without memories whose expiration date has passed."""
    return dataclasses.replace(query, expired=False, today=utc_today())


def _paged(query: MemoryQuery, limit: int, offset: int) -> MemoryQuery:
    return dataclasses.replace(query, limit=limit, offset=offset)


def _scored(record: MemoryRecord, score: float) -> MemoryRecord:
    return dataclasses.replace(record, score=score)


def _message_texts(messages: Sequence[Message]) -> list[str]:
    """One memory per chat message that says something: its content's text as written (no
    role prefix). Tool calls and tool results are how an agent worked, not what it learnt:
    they are left out here (a session's transcript keeps them: ``conversations.save``)."""
    texts = []
    for n, m in enumerate(messages):
        if not isinstance(m, Mapping):
            raise InputError(f"message {n} is not an object")
        if m.get("role") in TOOL_ROLES:
            continue
        text = message_text({"content": m.get("content")}, n) if m.get("content") else ""
        if text.strip():
            texts.append(text)
    if not texts:
        raise InputError("the messages hold no text to remember")
    return texts
