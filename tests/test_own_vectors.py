"""A caller's own vectors on store (seed 000: a platform that embeds with one model for its
whole stack): taken on add, update and batches, checked against the index's model and size,
kept through a reindex, replaced by the model's when a person edits the text. On SQLite and
PostgreSQL alike."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import httpx2
import numpy as np
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from memcore.compose import open_service
from memcore.core.errors import InputError, KeyReused
from memcore.core.settings import Settings, load_settings
from memcore.memory.adding import NewMemory
from memcore.service import MemoryService
from tests.conftest import make_service, on_backend
from tests.support import FakeEmbedder
from tests.test_cli import cli
from tests.test_http import server

DIM = 64  # FakeEmbedder's (test:hash64)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, vault: Path) -> Settings:
    return on_backend(request, vault)


@pytest.fixture
async def svc(backend: Settings, embedder: FakeEmbedder) -> AsyncIterator[MemoryService]:
    async with make_service(backend, embedder) as service:
        yield service


@pytest.fixture(autouse=True)
def no_mem0_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEM0_TELEMETRY", "false")


def own(seed: int) -> list[float]:
    return [float(x) for x in np.random.default_rng(seed).standard_normal(DIM)]


async def closest(svc: MemoryService, vector: list[float]) -> tuple[str, float]:
    """The memory nearest ``vector`` by the index's vectors alone, and its cosine."""
    found = await svc.search("", query_vector=np.asarray(vector, dtype=np.float32), limit=1)
    hit = found.hits[0]
    return hit.id, float(hit.vector_score or 0.0)


async def test_an_added_vector_is_the_memorys_and_survives_a_reindex(
    svc: MemoryService, embedder: FakeEmbedder
) -> None:
    (mine,) = await svc.memories.add("Tea ceremony notes", user_id="u1", vector=own(1))
    other = await svc.memories.add("Coffee brewing notes", user_id="u1")
    assert other and "Tea ceremony notes" not in " ".join(embedder.texts)  # no model run
    got, cosine = await closest(svc, own(1))
    assert got == mine.id and cosine == pytest.approx(1.0, abs=1e-5)
    await svc.index(full=True)  # a rebuild re-chunks every file: the vector stays
    assert await closest(svc, own(1)) == (mine.id, pytest.approx(1.0, abs=1e-5))
    # the model's name is accepted as the check it is
    (named,) = await svc.memories.add(
        "Green tea", user_id="u2", vector=own(2), vector_model="test:hash64"
    )
    assert (await closest(svc, own(2)))[0] == named.id


async def test_a_wrong_vector_is_a_one_line_error_naming_both_and_writes_nothing(
    svc: MemoryService, vault: Path
) -> None:
    with pytest.raises(InputError, match=r"vector has 3 dimensions; .*test:hash64.* of 64"):
        await svc.memories.add("Short vector", user_id="u1", vector=[0.1, 0.2, 0.3])
    with pytest.raises(InputError, match=r"'text-embedding-3-small' is not .*'test:hash64'"):
        await svc.memories.add(
            "Other model", user_id="u1", vector=own(3), vector_model="text-embedding-3-small"
        )
    for bad in ([0.0] * DIM, [float("nan")] * DIM, ["x"] * DIM, []):
        with pytest.raises(InputError, match="vector"):
            await svc.memories.add("Bad vector", user_id="u1", vector=bad)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="one memory; these messages make 2"):
        await svc.memories.add(
            [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}], vector=own(4)
        )
    with pytest.raises(InputError, match="give the vector too"):
        await svc.memories.add("No vector", user_id="u1", vector_model="test:hash64")
    assert await svc.memories.get_all(user_id="u1") == []
    assert not list((vault / "memory").rglob("*.md"))


async def test_update_takes_a_vector_for_the_same_or_a_new_text(
    svc: MemoryService, vault: Path
) -> None:
    (m,) = await svc.memories.add("Piano practice schedule", user_id="u1")
    page = vault / m.path
    before = page.read_bytes()
    await svc.memories.update(m.id, vector=own(5))  # only the vector: the Markdown stays
    assert page.read_bytes() == before
    assert await closest(svc, own(5)) == (m.id, pytest.approx(1.0, abs=1e-5))
    await svc.memories.update(m.id, "Piano practice on Tuesdays", vector=own(6))
    assert await closest(svc, own(6)) == (m.id, pytest.approx(1.0, abs=1e-5))
    assert (await svc.memories.get(m.id)).text == "Piano practice on Tuesdays"


async def test_a_persons_edit_gets_the_models_vector_for_its_new_text(
    svc: MemoryService, vault: Path
) -> None:
    (m,) = await svc.memories.add("Bicycle repair log", user_id="u1", vector=own(7))
    page = vault / m.path
    page.write_text(page.read_text().replace("Bicycle repair log", "Bicycle repair diary"))
    await svc.index()
    got, cosine = await closest(svc, own(7))
    assert got == m.id and cosine < 0.5  # the model's vector now, not the caller's


async def test_batches_and_idempotent_retries_carry_their_vectors(svc: MemoryService) -> None:
    batch = [
        NewMemory(f"Batch fact {n}", vector=np.asarray(own(10 + n), dtype=np.float32))
        for n in range(3)
    ]
    added = await svc.memories.add_batch(batch)
    for n, record in enumerate(added):
        assert await closest(svc, own(10 + n)) == (record.id, pytest.approx(1.0, abs=1e-5))
    first = await svc.memories.add("Keyed", user_id="u3", vector=own(20), idempotency_key="k1")
    again = await svc.memories.add("Keyed", user_id="u3", vector=own(20), idempotency_key="k1")
    assert [r.id for r in again] == [r.id for r in first]
    with pytest.raises(KeyReused):  # the same key with another vector is another request
        await svc.memories.add("Keyed", user_id="u3", vector=own(21), idempotency_key="k1")


async def test_every_front_takes_a_vector_and_refuses_a_wrong_one_with_a_400(
    service: MemoryService, vault: Path
) -> None:
    """Native HTTP, Mem0's REST (the official client, an extension field), MCP and
    ``memcore add --file`` lines; a mismatch is a one-line 4xx naming both sizes."""
    from mem0 import MemoryClient

    async with server(service, token="vec-key") as url:
        auth = {"Authorization": "Bearer vec-key"}
        async with httpx.AsyncClient(base_url=url, headers=auth) as http:
            made = await http.post(
                "/api/memories",
                json={"content": "Native vector", "user_id": "h", "vector": own(30)},
            )
            assert made.status_code == 200, made.text
            native = made.json()["results"][0]["id"]
            short = await http.post(
                "/api/memories", json={"content": "Short", "user_id": "h", "vector": [1.0, 2.0]}
            )
            assert short.status_code == 400
            assert (
                "vector has 2 dimensions" in short.json()["error"]["message"]
                and "of 64" in short.text
            )
            moved = await http.put(f"/api/memories/{native}", json={"vector": own(31)})
            assert moved.status_code == 200, moved.text
            other = await http.post(
                "/v1/memories/",
                json={"messages": "Mem0 short", "user_id": "h", "vector": [1.0], "infer": False},
            )
            assert other.status_code == 400 and "of 64" in other.text

        def mem0_session() -> tuple[str, str]:
            client = MemoryClient(api_key="vec-key", host=url)
            try:
                added = client.add("Mem0 vector", user_id="m", vector=own(32), infer=False)
                first = added["results"][0]["id"]
                client.update(first, text="Mem0 vector, updated", vector=own(33))
                again = client.add("Mem0 second", user_id="m", vector=own(34))  # infer unset
                return first, again["results"][0]["id"]
            finally:
                client.client.close()

        mem0_first, mem0_second = await asyncio.to_thread(mem0_session)
        as_admin = httpx2.AsyncClient(headers=auth, timeout=30)
        async with (
            as_admin,
            Client(streamable_http_client(url + "/mcp", http_client=as_admin)) as mcp,
        ):
            added = await mcp.call_tool(
                "add", {"content": "MCP vector", "user_id": "p", "vector": own(35)}
            )
            assert not added.is_error, added
            mcp_id = added.structured_content["result"][0]["id"]  # type: ignore[index]
            wrong = await mcp.call_tool("add", {"content": "MCP short", "vector": [1.0, 0.0]})
            assert wrong.is_error and "of 64" in wrong.content[0].text  # type: ignore[union-attr]
            moved = await mcp.call_tool("update", {"memory_id": mcp_id, "vector": own(36)})
            assert not moved.is_error, moved
    assert await closest(service, own(31)) == (native, pytest.approx(1.0, abs=1e-5))
    assert await closest(service, own(33)) == (mem0_first, pytest.approx(1.0, abs=1e-5))
    assert await closest(service, own(34)) == (mem0_second, pytest.approx(1.0, abs=1e-5))
    assert await closest(service, own(36)) == (mcp_id, pytest.approx(1.0, abs=1e-5))
    names = {r.text for r in await service.memories.get_all(user_id="h")}
    assert names == {"Native vector"}  # the refused ones wrote nothing


async def test_add_file_lines_carry_vectors(vault: Path) -> None:
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    dim = 256  # the packaged static model's
    wide = [own(40 + n) * (dim // DIM) for n in range(2)]
    rows = [
        {"memory": "File vector one", "user_id": "f", "vector": wide[0]},
        {"memory": "File vector two", "user_id": "f", "vector": wide[1], "vector_model": "x"},
        {"memory": "Plain line", "user_id": "f"},
    ]
    lines = vault / "in.jsonl"
    lines.write_text("\n".join(json.dumps(r) for r in rows[::2]) + "\n")
    code, out, err = await asyncio.to_thread(
        cli, "--vault", str(vault), "add", "--file", str(lines)
    )
    assert code == 0, err
    for bad, said in (
        (rows[1], "'x' is not the index's model"),
        ({"memory": "Wrong size", "vector": [1.0, 2.0]}, "vector has 2 dimensions"),
    ):
        wrong = vault / "wrong.jsonl"
        wrong.write_text(json.dumps(bad) + "\n")
        code, out, err = await asyncio.to_thread(
            cli, "--vault", str(vault), "add", "--file", str(wrong)
        )
        assert code != 0 and said in err, (out, err)
    async with open_service(load_settings(vault)) as svc:
        texts = {r.text: r.id for r in await svc.memories.get_all(user_id="f")}
        assert set(texts) == {"File vector one", "Plain line"}
        assert await closest(svc, wide[0]) == (
            texts["File vector one"],
            pytest.approx(1.0, abs=1e-5),
        )
