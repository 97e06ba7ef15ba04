"""GET /metrics (core/metrics.py, fronts/http/observed.py) on a real server, read with
prometheus_client's own parser: requests by route template and status, searches by path and
cache, embedder batches, the gauges of the index, the process's memory; the same token rules
as /api/status."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from memcore.service import MemoryService
from tests.test_http import server

TOKEN, ALICE = "metrics-token-1", "metrics-token-alice"


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of the exposition: (name, sorted labels) -> value."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(
    found: dict[tuple[str, tuple[tuple[str, str], ...]], float], name: str, **labels: str
) -> float:
    return found.get((name, tuple(sorted(labels.items()))), 0.0)


async def test_metrics_count_requests_searches_and_embeds_and_read_the_index(
    vault: Path, service: MemoryService
) -> None:
    scoped = {ALICE: {"user_id": "alice"}}
    async with server(service, TOKEN, scoped) as url:
        admin = {"Authorization": f"Bearer {TOKEN}"}
        async with httpx.AsyncClient(base_url=url, headers=admin) as http:
            before = samples((await http.get("/metrics")).text)
            ids = []
            for user, text in (
                ("alice", "Alice rides a red bicycle"),
                ("bob", "Bob owns a sailboat"),
            ):
                added = await http.post("/api/memories", json={"content": text, "user_id": user})
                ids.append(added.json()["results"][0]["id"])
            for memory_id in ids:  # two ids, one route
                assert (await http.get(f"/api/memories/{memory_id}")).status_code == 200
            assert (await http.get("/api/memories/m-0000000000000000")).status_code == 404
            for _ in range(2):  # the second is answered from the result cache
                found = await http.post("/api/memory/search", json={"query": "bicycle"})
                assert found.status_code == 200
            vector = [0.1] * int((await service.embedder.embed_queries(["x"])).shape[1])
            by_vector = await http.post("/api/memory/search", json={"query_vector": vector})
            assert by_vector.status_code == 200
            wrong = await http.get("/api/status", headers={"Authorization": "Bearer nope"})
            assert wrong.status_code == 401
            scraped = await http.get("/metrics")
            assert scraped.headers["content-type"].startswith("text/plain")
            now = samples(scraped.text)
            # a scoped token reads them as it reads /api/status; no token does not
            as_alice = await http.get("/metrics", headers={"Authorization": f"Bearer {ALICE}"})
            assert as_alice.status_code == 200 and "memcore_index_chunks" in as_alice.text
            async with httpx.AsyncClient(base_url=url) as nobody:
                assert (await nobody.get("/metrics")).status_code == 401

    def grew(name: str, **labels: str) -> float:
        return value(now, name, **labels) - value(before, name, **labels)

    one = {"route": "/api/memories/{memory_id}", "method": "GET"}
    assert grew("memcore_http_requests_total", **one, status="200") == 2
    assert grew("memcore_http_requests_total", **one, status="404") == 1
    assert (
        grew("memcore_http_requests_total", route="/api/memories", method="POST", status="200") == 2
    )
    assert grew("memcore_http_requests_total", route="/api/status", method="GET", status="401") == 1
    assert grew("memcore_http_request_duration_seconds_count", **one) == 3
    raw = ("route", f"/api/memories/{ids[0]}")  # a series a route, not one a memory
    assert not any(raw in labels for _, labels in now)
    assert grew("memcore_search_duration_seconds_count", path="fused", cache="miss") == 1
    assert grew("memcore_search_duration_seconds_count", path="fused", cache="hit") == 1
    assert grew("memcore_search_duration_seconds_count", path="vector", cache="off") == 1
    # the miss's keyword query; the hit asks for none, the vector search neither
    assert grew("memcore_search_part_duration_seconds_count", part="keyword") == 1
    assert grew("memcore_embed_batches_total", outcome="ok") >= 2  # the memories, the query
    assert grew("memcore_embed_texts_total") >= 3
    assert value(now, "memcore_memories") == 2
    assert value(now, "memcore_index_chunks") >= 2 and value(now, "memcore_index_files") >= 2
    assert value(now, "memcore_index_generation") > value(before, "memcore_index_generation")
    assert value(now, "memcore_ready") == 1 and value(now, "memcore_embed_queue_chunks") == 0
    assert value(now, "process_resident_memory_bytes") > 10_000_000


ONE_SHOT = """
import asyncio, json, sys
from pathlib import Path
from memcore import load_settings, open_service

async def main(vault):
    async with open_service(load_settings(Path(vault))) as svc:
        found = await svc.search("otters", limit=3)
        before = "prometheus_client" in sys.modules
        counted = svc.metrics.search_seconds  # a front asks: made then, counting from then
        await svc.search("otters pebbles", limit=3)
        text = (await svc.metrics_text()).decode()
    print(json.dumps({"hits": len(found.hits), "imported_before": before,
                      "counted": "memcore_search_duration_seconds_count" in text}))

asyncio.run(main(sys.argv[1]))
"""


def test_a_one_shot_command_counts_nothing_and_imports_no_metrics_library(
    vault: Path, tmp_path: Path
) -> None:
    """Metrics are for a served service (GET /metrics, the daemon's socket): a one-shot
    search never imports prometheus_client (~25 ms of its start); asked for, they count."""
    (vault / "MEMORY.md").write_text("# Notes\n\nThe otters count pebbles.\n", encoding="utf-8")
    env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": "static",
           "XDG_CACHE_HOME": str(tmp_path / "cache")}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", ONE_SHOT, str(vault)], env=env, check=True,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result == {"hits": 1, "imported_before": False, "counted": True}
