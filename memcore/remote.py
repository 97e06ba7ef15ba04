"""Ask a running `memcore serve` instead of opening the index (`search --remote URL`)."""

from __future__ import annotations

from typing import Any

import httpx

from memcore.errors import InputError, MemcoreError, NotFound
from memcore.models import Hit, SearchFilters, SearchResult


async def _post(url: str, token: str | None, path: str, body: dict[str, Any]) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as http:
            resp = await http.post(path, json={k: v for k, v in body.items() if v is not None})
    except httpx.HTTPError as exc:
        raise MemcoreError(f"cannot reach {url}: {exc}") from None
    try:
        data = resp.json()
    except ValueError:
        raise MemcoreError(f"{url} answered {resp.status_code} without JSON") from None
    if resp.status_code >= 400:
        message = data.get("error", resp.reason_phrase) if isinstance(data, dict) else data
        kind = NotFound if resp.status_code == 404 else InputError
        raise (kind if resp.status_code < 500 else MemcoreError)(f"{url}: {message}")
    return data


async def search(
    url: str, token: str | None, query: str, limit: int | None, filters: SearchFilters,
    min_score: float | None = None,
) -> SearchResult:  # fmt: skip
    data = await _post(url, token, "/api/memory/search", {
        "query": query, "limit": limit, "tag": filters.tag, "path": filters.path_prefix,
        "since": filters.date_from, "until": filters.date_to, "threshold": min_score,
    })  # fmt: skip
    hits = tuple(
        Hit(
            chunk_id=0,
            path=r["path"],
            start_line=r["start_line"],
            end_line=r["end_line"],
            heading=r["heading"],
            score=r["score"],
            text=r["text"],
            vector_score=None,
            keyword_score=None,
        )
        for r in data["results"]
    )
    return SearchResult(query, hits, data["mode"], tuple(data.get("warnings", ())))


async def context(
    url: str, token: str | None, query: str, limit: int, filters: SearchFilters
) -> str:
    body = {"query": query, "limit": limit, "tag": filters.tag, "path": filters.path_prefix}
    return str((await _post(url, token, "/api/memory/context", body))["context"])
