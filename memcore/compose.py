"""Composition root: the only place that picks concrete adapters for the ports.

It imports the service and its adapters only when it builds them, so a command that never
opens the index (``--version``, a search answered by the running daemon) starts fast.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from memcore.core.errors import ConfigError, MemcoreError, VaultError
from memcore.core.own_words import Words, read_words
from memcore.core.places import make_private_dir
from memcore.core.redact import keep_secret
from memcore.core.settings import MEMORY_DB, Settings
from memcore.embedders.prefixes import task_prefixes

if TYPE_CHECKING:
    from memcore.embedders.base import Embedder
    from memcore.embedders.helper import Helper
    from memcore.llm.base import LLM
    from memcore.memory.port import Memory
    from memcore.service import MemoryService
    from memcore.storage.base import Store


log = logging.getLogger(__name__)


def build_embedder(
    settings: Settings, *, preload: bool = False, helper: Helper | None = None
) -> Embedder:
    """The configured embedder. ``preload``: an in-process model starts loading now, in a
    thread (a one-shot search loads it beside opening the index, not after). ``helper``: a
    process forked to run the local model (embedders/helper.py), used when the settings ask
    for that model, else ended here."""
    e = settings.embedder
    if helper is not None and (e.provider != "local" or not helper.load(e.batch_size, e.threads)):
        helper.discard()
        helper = None
    if e.provider in ("local", "static"):
        from memcore.embedders.local import (
            HelperEmbedder,
            OnnxMiniLMEmbedder,
            StaticMiniLMEmbedder,
        )

        if helper is not None:
            return HelperEmbedder(helper, batch_size=e.batch_size, threads=e.threads)
        local = (
            OnnxMiniLMEmbedder(batch_size=e.batch_size, threads=e.threads)
            if e.provider == "local"
            else StaticMiniLMEmbedder(batch_size=max(e.batch_size, 256), threads=e.threads)
        )
        if preload:
            local.preload()
        return local
    if e.provider == "ollama":
        from memcore.embedders.ollama import OllamaEmbedder

        o = settings.ollama
        return OllamaEmbedder(o.host, o.model, o.timeout, o.concurrency, o.batch_size, o.keep_alive)
    from memcore.embedders.openai import OpenAIEmbedder

    oa = settings.openai
    api_key = os.environ.get(oa.api_key_env)
    keep_secret(api_key)
    if not api_key and not oa.base_url:
        raise ConfigError(
            f"the openai embedder needs an API key: set {oa.api_key_env} "
            "(openai.api_key_env names another variable)"
        )
    return OpenAIEmbedder(
        model=oa.model,
        api_key=api_key,
        base_url=oa.base_url,
        dimensions=oa.dimensions,
        timeout=oa.timeout,
        concurrency=oa.concurrency,
        batch_size=oa.batch_size,
    )


def build_llm(settings: Settings) -> LLM | None:
    """The chat model for infer=True, or None when llm.provider is not set."""
    s = settings.llm
    if s.provider == "ollama":
        from memcore.llm.ollama import OllamaLLM

        return OllamaLLM(s.host, s.model or "llama3.1", s.timeout)
    if s.provider == "openai":
        from memcore.llm.openai import OpenAILLM

        key = os.environ.get(s.api_key_env)
        keep_secret(key)
        if not key and not s.base_url:
            raise ConfigError(f"llm.provider = openai needs an API key: set {s.api_key_env}")
        return OpenAILLM(s.model or "gpt-4o-mini", key or "not-needed", s.base_url, s.timeout)
    return None


def own_words(settings: Settings) -> Words:
    """The vault's own dictionary and stop words (``keywords.dictionary`` / ``.stop_words``:
    paths in the vault, absolute or under ~). Raises ConfigError for a file that is not fit."""
    k = settings.keywords

    def place(name: str) -> Path | None:
        return (settings.vault / Path(name).expanduser()) if name else None

    return read_words(place(k.dictionary), place(k.stop_words))


def build_store(settings: Settings) -> Store:
    k = settings.keywords
    if settings.database_url:
        try:
            from memcore.storage.postgres.store import PostgresStore
        except ImportError as exc:
            raise ConfigError(
                "storage.url is a PostgreSQL database: pip install 'memcore[postgres]'"
            ) from exc
        return PostgresStore(
            settings.database_url,
            settings.namespace,
            busy_timeout_s=settings.storage.busy_timeout_s,
            readers=settings.storage.pool_size,
            build_memory_mb=settings.storage.build_memory_mb,
            ann_min_vectors=settings.storage.ann_min_vectors,
            bm25=settings.storage.keyword_index == "auto",
            words=own_words(settings),
            k1=k.k1,
            b=k.b,
        )
    from memcore.storage.sqlite.store import SqliteStore

    if (k.k1, k.b) != (1.2, 0.75):
        raise ConfigError(
            "keywords.k1 / keywords.b: SQLite's FTS5 ranks with a fixed k1 = 1.2 and b = 0.75; "
            "they can be set when the index is in PostgreSQL (storage.url)"
        )

    return SqliteStore(
        settings.db_path,
        busy_timeout_s=settings.storage.busy_timeout_s,
        ann_min_vectors=settings.storage.ann_min_vectors,
        reader_cache_mb=settings.storage.cache_mb,
        words=own_words(settings),
    )


def embedder_prefixes(settings: Settings) -> tuple[str, str]:
    """The (query, document) task prefixes of the configured server model (none in-process)."""
    if settings.embedder.provider == "ollama":
        o = settings.ollama
        return task_prefixes(o.model, o.query_prefix, o.document_prefix)
    if settings.embedder.provider == "openai":
        oa = settings.openai
        return task_prefixes(oa.model, oa.query_prefix, oa.document_prefix)
    return "", ""


def build_service(
    settings: Settings, embedder: Embedder | None = None, *, preload: bool = False
) -> MemoryService:
    """Wire a service for these settings (no I/O until it is entered; ``preload``: but an
    in-process model starts loading now, see ``build_embedder``)."""
    embedder = embedder or build_embedder(settings, preload=preload)
    from memcore.embedders.base import EmbeddingRunner
    from memcore.service import MemoryService

    query_prefix, document_prefix = embedder_prefixes(settings)
    runner = EmbeddingRunner(
        embedder,
        retries=settings.embedder.retries,
        query_prefix=query_prefix,
        document_prefix=document_prefix,
    )
    if settings.memory.kind == "none":  # nothing is written anywhere: the index is in memory
        settings = dataclasses.replace(
            settings, storage=dataclasses.replace(settings.storage, db=MEMORY_DB, url="")
        )
    return MemoryService(
        settings, build_store(settings), runner, build_llm(settings), build_memory(settings)
    )


def build_memory(settings: Settings) -> Memory | None:
    """The memory adapter of ``memory.adapter`` (None: the vault's own Markdown)."""
    m = settings.memory
    if m.kind == "none":
        from memcore.memory.noop import NoopMemory

        return NoopMemory()
    if m.kind == "mem0":
        from memcore.memory.mem0_remote import Mem0Memory

        key = os.environ.get(m.api_key_env)
        keep_secret(key)
        if not key:
            raise ConfigError(
                f"memory.adapter = mem0 needs the server's API key: set {m.api_key_env} "
                "(memory.api_key_env names another variable)"
            )
        return Mem0Memory(m.base_url, key, m.org_id, m.project_id, settings.search.min_score)
    return None


def ensure_state_dir(settings: Settings, *, daemon: bool = False) -> None:
    """Create <vault>/.memcore, which ignores itself in git. With the index elsewhere (a
    --db file or PostgreSQL) only a daemon needs it, for its lock, socket and log."""
    if not settings.vault.is_dir():
        raise VaultError(f"vault folder {settings.vault} does not exist")
    if settings.storage.db and not settings.state_dir.exists() and not daemon:
        return  # the index lives elsewhere; leave a read-only vault untouched
    try:
        make_private_dir(settings.state_dir)
        ignore = settings.state_dir / ".gitignore"
        if not ignore.exists():
            ignore.write_text(
                "# memcore's index: rebuilt from the Markdown with `memcore reindex`\n*\n"
            )
    except OSError as exc:
        raise VaultError(
            f"cannot create {settings.state_dir} ({exc.strerror}); "
            "use --db to keep the index elsewhere"
        ) from exc


def index_exists(settings: Settings) -> bool:
    """Whether there is an index to read (a PostgreSQL database is asked when opened)."""
    return bool(settings.database_url) or settings.db_path.is_file()


@asynccontextmanager
async def open_service(
    settings: Settings,
    embedder: Embedder | None = None,
    *,
    create: bool = True,
    catch_up: bool = True,
    fresh: bool = False,
    preload: bool = False,
) -> AsyncIterator[MemoryService]:
    """Open the vault's service. ``create=False`` (read-only callers: search, status, list)
    refuses to create an index that is not there yet instead of leaving an empty one behind.
    An index created here is caught up with the whole vault before the service is handed out
    (``catch_up=False``: the caller indexes next anyway), so a first write never leaves an
    index that holds one file. ``fresh`` (a one-shot command with no daemon keeping the index
    current): an existing index is brought up to date with the files changed since, first;
    if that cannot be done (a read-only index), the command answers from it as it is.
    ``preload``: an in-process model starts loading at once (a command that embeds next)."""
    if settings.memory.kind == "none":  # memory is off: no index, no folder, nothing to catch up
        async with build_service(settings, embedder, preload=preload) as service:
            yield service
        return
    new = not index_exists(settings)
    if not create and new and not settings.in_memory:  # an index in memory is always new
        raise VaultError(
            f"no index yet at {settings.index_location}; run `memcore index` or "
            "`memcore watch` first"
        )
    ensure_state_dir(settings)
    async with build_service(settings, embedder, preload=preload) as service:
        if new and catch_up:
            await service.index()
        elif fresh:
            try:
                report = await service.index(fill_pending=False)
            except MemcoreError as exc:
                log.warning("answering from the index as it is: catching up failed (%s)", exc)
            else:
                if report.indexed or report.deleted:
                    log.info("caught up first: %s", report.summary())
        yield service
