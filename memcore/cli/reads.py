"""What `search` and `context` do once their command line is read: ask the vault's daemon or
open the index, then print the answer. The typer commands (cli/search.py) and the plain forms
that cli/quick.py answers without typer both run these, so both answer and print the same."""

from __future__ import annotations

import logging
import sys

from memcore.cli.output import hit_text, out, warn
from memcore.compose import open_service
from memcore.core.errors import MemcoreError
from memcore.core.models import SearchFilters, SearchResult
from memcore.core.settings import Settings
from memcore.embedders.base import Embedder
from memcore.fronts import remote
from memcore.fronts.daemon_state import local_daemon

LOCAL = "http://memcore"  # the daemon's Unix socket needs no host
log = logging.getLogger("memcore.cli")


async def search(
    settings: Settings,
    query: str,
    limit: int | None,
    filters: SearchFilters,
    fusion: str | None = None,
    min_score: float | None = None,
    embedder: Embedder | None = None,
) -> tuple[SearchResult, bool]:
    """The result from the daemon when it answers for this index and model (not for another
    fusion: it searches with its own), else from the index brought up to date first; and
    whether the index is empty (asked only when nothing matched)."""
    if fusion is None and embedder is None and (sock := local_daemon(settings)):
        try:
            result = await remote.search(LOCAL, None, query, limit, filters, min_score, sock)
        except MemcoreError as exc:  # a daemon going away: answer from the index
            log.debug("the daemon did not answer (%s); opening the index", exc)
        else:
            return result, not result.hits and await _index_is_empty(settings)
    async with open_service(settings, embedder, create=False, fresh=True, preload=True) as service:
        result = await service.search(query, limit, filters, fusion, min_score)
        return result, not result.hits and (await service.status()).files == 0


async def _index_is_empty(settings: Settings) -> bool:
    async with open_service(settings, create=False) as service:
        return (await service.status()).files == 0


async def context(
    settings: Settings,
    query: str,
    limit: int,
    filters: SearchFilters,
    min_score: float | None = None,
    embedder: Embedder | None = None,
) -> str:
    """The "## Relevant Memories" block, from the daemon when it answers for this index and
    model, else from the index brought up to date first ("" when nothing is relevant)."""
    if embedder is None and (sock := local_daemon(settings)):
        try:
            return await remote.context(LOCAL, None, query, limit, filters, sock, min_score)
        except MemcoreError as exc:
            log.debug("the daemon did not answer (%s); opening the index", exc)
    async with open_service(settings, embedder, create=False, fresh=True, preload=True) as service:
        return await service.context(query, limit, filters, min_score)


def print_search(result: SearchResult, as_json: bool, index_empty: bool) -> None:
    """Warnings on stderr; the hits (or JSON) on stdout; "no matches", and why when the
    index is empty."""
    warn(result.warnings)
    if as_json:
        import json

        out(json.dumps(result.to_dict(), ensure_ascii=False, indent=2) + "\n")
        return
    if not result.hits:
        out("no matches\n")
        if index_empty:
            sys.stderr.write(
                "memcore: the index is empty; run `memcore index` or `memcore watch`\n"
            )
        return
    out(
        "".join(
            hit_text(n, h.path, h.start_line, h.end_line, h.heading, h.score, h.text) + "\n"
            for n, h in enumerate(result.hits, 1)
        )
    )
