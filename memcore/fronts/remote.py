"""Ask a running server instead of opening the index: `memcore serve` at a URL (`search
--remote URL`), or the vault's own daemon on its Unix socket (what `search` does by itself)."""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from memcore.core.errors import InputError, MemcoreError, NotFound
from memcore.core.models import Hit, MemoryRecord, SearchFilters, SearchResult, Strength
from memcore.core.redact import redact_url
from memcore.fronts.unix_http import DaemonGone, error_message, post_unix

__all__ = ["DaemonGone", "add", "context", "search"]

log = logging.getLogger("memcore.cli")


async def _post(
    url: str,
    token: str | None,
    path: str,
    body: dict[str, Any],
    uds: str | None = None,
    headers: dict[str, str] | None = None,
) -> Any:
    payload = {k: v for k, v in body.items() if v is not None}
    if uds:
        status, reason, raw = await asyncio.to_thread(post_unix, uds, path, payload, headers)
        where = "the running daemon"
    else:
        status, reason, raw = await _post_http(url, token, path, payload, headers)
        where = redact_url(url)
    try:
        data = json.loads(raw)
    except ValueError:
        raise MemcoreError(f"{where} answered {status} without JSON") from None
    if status >= 400:
        message = error_message(data, reason)
        kind = NotFound if status == 404 else InputError
        raise (kind if status < 500 else MemcoreError)(f"{where}: {message}")
    return data


async def _post_http(
    url: str,
    token: str | None,
    path: str,
    payload: dict[str, Any],
    extra: dict[str, str] | None = None,
) -> tuple[int, str, bytes]:
    import httpx  # only for --remote: a one-shot command asking the daemon skips its import

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with httpx.AsyncClient(
            base_url=url, headers={**headers, **(extra or {})}, timeout=60
        ) as http:
            resp = await http.post(path, json=payload)
    except httpx.HTTPError as exc:
        raise MemcoreError(f"cannot reach {url}: {exc}") from None
    return resp.status_code, resp.reason_phrase, resp.content


async def search(
    url: str, token: str | None, query: str, limit: int | None, filters: SearchFilters,
    min_score: float | None = None, uds: str | None = None,
) -> SearchResult:  # fmt: skip
    """Ask a running server (at ``url``, or the daemon's Unix socket ``uds``)."""
    body = {"query": query, "limit": limit, "threshold": min_score, **filters_body(filters)}
    data = await _post(url, token, "/api/memory/search", body, uds)
    hits = tuple(
        Hit(
            chunk_id=0,
            path=r["path"],
            start_line=r["start_line"],
            end_line=r["end_line"],
            heading=r["heading"],
            score=r["score"],
            text=r["text"],
            vector_score=r.get("vector_score"),
            keyword_score=r.get("keyword_score"),
            date=r.get("date"),
            tags=tuple(r.get("tags") or ()),
            id=r.get("id", ""),
        )
        for r in data["results"]
    )
    return SearchResult(query, hits, data["mode"], tuple(data.get("warnings", ())))


def filters_body(f: SearchFilters) -> dict[str, Any]:
    """SearchFilters as the native HTTP API's request fields (unset ones left out)."""
    body = {
        "user_id": f.user_id, "agent_id": f.agent_id, "run_id": f.run_id, "app_id": f.app_id,
        "category": f.category, "filters": dict(f.metadata) if f.metadata else None,
        "tag": f.tag, "path": f.path_prefix, "since": f.date_from, "until": f.date_to,
        "include_shared": f.include_shared or None, "include_turns": f.include_turns,
    }  # fmt: skip
    return {k: v for k, v in body.items() if v is not None}


async def context(
    url: str, token: str | None, query: str, limit: int, filters: SearchFilters,
    uds: str | None = None, min_score: float | None = None,
) -> str:  # fmt: skip
    body = {"query": query, "limit": limit, "min_score": min_score, **filters_body(filters)}
    return str((await _post(url, token, "/api/memory/context", body, uds))["context"])


async def add(
    uds: str, body: dict[str, Any], idempotency_key: str | None = None
) -> list[MemoryRecord]:
    """Add through the running daemon (native ``POST /api/memories``): the daemon writes the
    Markdown and indexes it with the model it has loaded already."""
    headers = {"Memcore-Via": "cli"}  # the daemon's own socket takes it (the history says so)
    if idempotency_key:
        headers["Idempotency-Key"] = idempotency_key
    data = await _post("http://memcore", None, "/api/memories", body, uds, headers)
    return [record_of(r) for r in data["results"]]


def record_of(r: dict[str, Any]) -> MemoryRecord:
    """A MemoryRecord from its JSON (``MemoryRecord.to_dict``)."""
    held = r.get("strength")
    return MemoryRecord(
        id=r["id"], text=r["memory"], path=r["path"], start_line=r["start_line"],
        end_line=r["end_line"], category=r["category"], user_id=r.get("user_id"),
        agent_id=r.get("agent_id"), run_id=r.get("run_id"), app_id=r.get("app_id"),
        key=r.get("key"),
        created=r.get("created_at") or "", updated=r.get("updated_at") or "",
        metadata=r.get("metadata") or {}, score=r.get("score"), event=r.get("event"),
        strength=Strength(**held) if isinstance(held, dict) else None,
    )  # fmt: skip
