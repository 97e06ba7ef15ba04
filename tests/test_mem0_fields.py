"""Every field a Mem0 client or a framework's Mem0 integration sends is honoured or named in
``Memcore-Ignored``, never refused for being unknown: crewai's ``metadata`` on a search, the
strands integration's ``source``, the 2.x client's ``filters`` on add and delete_all, listings'
``start_date`` / ``end_date``; ``next`` / ``previous`` are absolute URLs that keep the listing's
parameters; ``infer: true`` without an LLM stores the messages as Mem0 does with ``infer:
false``, and says so. Bodies are the ones the integrations send (read from their sources)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from memcore.core.settings import Settings, load_settings
from memcore.service import MemoryService
from tests.support import error_message
from tests.test_http import server


@pytest.fixture(autouse=True)
def no_mem0_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEM0_TELEMETRY", "false")


@pytest.fixture
async def http(service: MemoryService) -> AsyncIterator[httpx.AsyncClient]:
    async with (
        server(service, token="k") as url,
        httpx.AsyncClient(base_url=url, headers={"Authorization": "Token k"}) as client,
    ):
        yield client


async def add(http: httpx.AsyncClient, text: str, **fields: Any) -> dict[str, Any]:
    got = await http.post("/v1/memories/", json={"messages": text, **fields})
    assert got.status_code == 200, got.text
    (made,) = got.json()["results"]
    return dict(made)


async def test_crewai_search_and_listing_metadata_is_a_metadata_filter(
    http: httpx.AsyncClient,
) -> None:
    await add(http, "The deploy runs on Fridays", user_id="crew", metadata={"type": "short_term"})
    await add(http, "The deploy runs on Mondays", user_id="crew", metadata={"type": "long_term"})
    # crewai Mem0Storage.search: v1 search body with metadata, version and output_format
    body = {
        "query": "when does the deploy run", "user_id": "crew", "limit": 3,
        "metadata": {"type": "short_term"}, "version": "v2", "output_format": "v1.1",
    }  # fmt: skip
    got = await http.post("/v1/memories/search/", json=body)
    assert got.status_code == 200, got.text
    assert [r["memory"] for r in got.json()["results"]] == ["The deploy runs on Fridays"]
    assert got.headers["Memcore-Ignored"] == "output_format, version"
    v2 = await http.post(
        "/v2/memories/search/",
        json={"query": "deploy", "filters": {"user_id": "crew"}, "metadata": {"type": "long_term"}},
    )
    assert [r["memory"] for r in v2.json()["results"]] == ["The deploy runs on Mondays"]
    listed = await http.post(
        "/v2/memories/", json={"filters": {"user_id": "crew"}, "metadata": {"type": "long_term"}}
    )
    assert listed.status_code == 200, listed.text
    assert [r["memory"] for r in listed.json()["results"]] == ["The deploy runs on Mondays"]


async def test_the_strands_source_is_kept_with_the_memory(http: httpx.AsyncClient) -> None:
    made = await add(http, "Prefers dark mode", user_id="s", source="STRANDS")
    assert made["metadata"] == {"source": "STRANDS"}
    own = await add(http, "Prefers tabs", user_id="s", source="STRANDS", metadata={"source": "me"})
    assert own["metadata"] == {"source": "me"}  # the caller's own metadata wins


async def test_the_2x_clients_filters_on_add_and_delete_all_carry_the_scope(
    http: httpx.AsyncClient,
) -> None:
    from mem0 import MemoryClient

    client = await asyncio.to_thread(MemoryClient, api_key="k", host=str(http.base_url))
    try:
        await drive_2x_client(client, http)
    finally:
        client.client.close()


async def drive_2x_client(client: Any, http: httpx.AsyncClient) -> None:
    msgs = [{"role": "user", "content": "Amy keeps bees"}]
    made = await asyncio.to_thread(client.add, msgs, filters={"user_id": "amy"}, infer=False)
    assert made["results"][0]["user_id"] == "amy"
    await add(http, "Ben keeps goats", user_id="ben")
    gone = await asyncio.to_thread(client.delete_all, filters={"user_id": "amy"})
    assert gone["deleted"] == 1
    left = (await http.get("/v1/memories/", params={"user_id": "ben"})).json()["results"]
    assert [r["memory"] for r in left] == ["Ben keeps goats"]
    # the query-string forms: JSON, and the Python dict text the client sends
    for text in ('{"user_id": "ben"}', "{'user_id': 'ben'}"):
        answer = await http.delete("/v1/memories/", params={"filters": text})
        assert answer.status_code == 200 and answer.json()["deleted"] == 1, answer.text
        await add(http, "Ben keeps goats", user_id="ben")
    # a scope named twice must agree; a delete_all by anything but a scope is refused
    clash = await http.post(
        "/v1/memories/", json={"messages": "x", "user_id": "a", "filters": {"user_id": "b"}}
    )
    assert clash.status_code == 400 and "user_id differs" in error_message(clash)
    wide = await http.delete("/v1/memories/", params={"filters": '{"topic": "x"}'})
    assert wide.status_code == 400 and "scope only" in error_message(wide)
    bad = await http.delete("/v1/memories/", params={"filters": "{not json"})
    assert bad.status_code == 400 and "filters must be an object" in error_message(bad)


async def test_start_and_end_date_bound_when_a_memory_was_made(http: httpx.AsyncClient) -> None:
    for day in ("2024-01-10", "2024-02-10", "2024-03-10"):
        await add(http, f"Entry of {day}", user_id="d", timestamp=f"{day}T12:00:00Z")
    got = await http.post(
        "/v2/memories/",
        json={"filters": {"user_id": "d"}, "start_date": "2024-02-01", "end_date": "2024-02-28"},
    )
    assert got.status_code == 200, got.text
    assert [r["memory"] for r in got.json()["results"]] == ["Entry of 2024-02-10"]
    up_to = await http.post("/v3/memories/", json={"filters": {"user_id": "d"},
                                                   "end_date": "2024-02-10"})  # fmt: skip
    assert [r["memory"] for r in up_to.json()["results"]] == [
        "Entry of 2024-01-10", "Entry of 2024-02-10"]  # fmt: skip


async def test_options_that_change_nothing_here_are_named_and_unknown_ones_refused(
    http: httpx.AsyncClient,
) -> None:
    got = await http.post("/v1/memories/", json={
        "messages": "Likes jazz", "user_id": "o", "custom_instructions": "facts only",
        "agent_custom_instructions": "none", "structured_data_schema": {"type": "object"},
    })  # fmt: skip
    assert got.status_code == 200, got.text
    assert got.headers["Memcore-Ignored"] == (
        "agent_custom_instructions, custom_instructions, structured_data_schema"
    )
    found = await http.post(
        "/v2/memories/search/",
        json={"query": "jazz", "filters": {"user_id": "o"}, "reference_date": "2024-05-01",
              "latest_only": True},
    )  # fmt: skip
    assert found.status_code == 200 and found.json()["results"], found.text
    assert found.headers["Memcore-Ignored"] == "reference_date"  # latest_only: always so here
    unknown = await http.post("/v1/memories/", json={"messages": "x", "user_id": "o", "bogus": 1})
    assert unknown.status_code == 400 and "bogus" in error_message(unknown)


async def test_infer_without_an_llm_stores_the_messages_verbatim_and_says_so(
    http: httpx.AsyncClient,
) -> None:
    messages = [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": "I moved to Lisbon last spring."},
        {"role": "assistant", "content": "Lisbon is lovely in spring."},
    ]
    for infer in ({"infer": True}, {}):  # asked, and Mem0's default
        got = await http.post("/v1/memories/", json={"messages": messages, "user_id": f"v{infer}",
                                                     **infer})  # fmt: skip
        assert got.status_code == 200, got.text
        texts = [r["memory"] for r in got.json()["results"]]
        if infer:
            assert texts == ["I moved to Lisbon last spring.", "Lisbon is lovely in spring."]
            assert "stored as given" in got.headers["Memcore-Warning"]
            assert got.json()["warnings"] == [got.headers["Memcore-Warning"]]
        else:  # no infer asked, no LLM: verbatim without a word, as before
            assert len(texts) == 2 and "Memcore-Warning" not in got.headers


async def test_infer_without_an_llm_can_be_refused(tmp_path: Path) -> None:
    from tests.conftest import make_service
    from tests.support import FakeEmbedder

    (tmp_path / "memory").mkdir()
    settings: Settings = load_settings(tmp_path, {"mem0.infer_without_llm": "refuse"})
    async with (
        make_service(settings, FakeEmbedder()) as service,
        server(service) as url,
        httpx.AsyncClient(base_url=url) as client,
    ):
        got = await client.post("/v1/memories/", json={"messages": "x", "user_id": "r",
                                                       "infer": True})  # fmt: skip
        assert got.status_code == 400 and "needs an LLM" in error_message(got)


async def test_next_visits_every_memory_of_the_listing_once_and_no_other(
    http: httpx.AsyncClient,
) -> None:
    ids = {(await add(http, f"note {n}", user_id="pg1"))["id"] for n in range(7)}
    for n in range(5):
        await add(http, f"other {n}", user_id="pg2")
    # GET: the link keeps the scope (it used to lead to the whole vault)
    seen: list[str] = []
    url: str | None = f"{http.base_url}/v1/memories/?user_id=pg1&page_size=3"
    while url:
        page = (await http.get(url)).json()
        seen += [r["id"] for r in page["results"]]
        url = page["next"]
        assert url is None or url.startswith(f"{http.base_url}/v1/memories/?")
    assert sorted(seen) == sorted(ids)
    # POST: the same body, sent to the link
    seen, url = [], f"{http.base_url}/v3/memories/?page_size=2"
    while url:
        page = (await http.post(url, json={"filters": {"user_id": "pg1"}})).json()
        seen += [r["id"] for r in page["results"]]
        url = page["next"]
    assert sorted(seen) == sorted(ids)
    back = (await http.get(f"{http.base_url}/v1/memories/?user_id=pg1&page_size=3&page=3")).json()
    previous = httpx.URL(back["previous"])
    assert str(previous.copy_with(query=None)) == f"{http.base_url}/v1/memories/"
    assert dict(previous.params) == {"user_id": "pg1", "page_size": "3", "page": "2"}


async def test_a_frameworks_threshold_over_the_ceiling_is_applied_as_the_ceiling(
    tmp_path: Path,
) -> None:
    from tests.conftest import make_service
    from tests.support import FakeEmbedder

    (tmp_path / "memory").mkdir()
    crewai = {"query": "the deploy runs on Fridays", "user_id": "crew", "limit": 5,
              "threshold": 0.6, "version": "v2", "output_format": "v1.1"}  # fmt: skip
    found: dict[float, list[dict[str, Any]]] = {}
    for ceiling in (1.0, 0.35):
        settings = load_settings(tmp_path, {"mem0.threshold_ceiling": ceiling})
        async with (
            make_service(settings, FakeEmbedder()) as service,
            server(service) as url,
            httpx.AsyncClient(base_url=url) as client,
        ):
            if ceiling == 1.0:
                text = "The deploy runs on Fridays after lunch"
                await client.post("/v1/memories/", json={"messages": text, "user_id": "crew"})
            got = await client.post("/v1/memories/search/", json=crewai)
            assert got.status_code == 200, got.text
            found[ceiling] = got.json()["results"]
            scores = [r["score"] for r in found[ceiling]]
            if ceiling == 1.0:  # as sent
                assert all(s >= 0.6 for s in scores) and "Memcore-Warning" not in got.headers
            else:
                assert all(s >= 0.35 for s in scores)
                assert got.headers["Memcore-Warning"].startswith(
                    "threshold 0.6 was applied as 0.35 (mem0.threshold_ceiling)"
                )
                assert got.headers["Memcore-Warning"] in got.json()["warnings"]
    assert len(found[0.35]) >= len(found[1.0])
    assert [r["memory"] for r in found[0.35]] == ["The deploy runs on Fridays after lunch"]
    with pytest.raises(Exception, match=r"mem0.threshold_ceiling: must be between 0 and 1"):
        load_settings(tmp_path, {"mem0.threshold_ceiling": 1.5})
