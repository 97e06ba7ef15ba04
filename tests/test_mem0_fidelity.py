"""Mem0 fidelity: the official Python client's users(), delete_users(), reset(), feedback()
and batch calls against memcore, and seed 000's own Mem0 adapter's routes (base URL
".../v1", ``Authorization: Token``, no trailing slashes) spoken as it speaks them."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest

from memcore.service import MemoryService
from tests.support import error_message
from tests.test_http import server


@pytest.fixture(autouse=True)
def no_mem0_telemetry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEM0_TELEMETRY", "false")


async def test_users_delete_users_reset_feedback_with_the_official_client(
    service: MemoryService,
) -> None:
    from mem0 import MemoryClient

    async with server(service, token="m0-key") as url:

        def session() -> dict[str, Any]:
            client = MemoryClient(api_key="m0-key", host=url)
            out: dict[str, Any] = {}
            kept = client.add("Alice hikes", user_id="alice")["results"][0]["id"]
            client.add("Alice climbs", user_id="alice", agent_id="coach")
            client.add("Bob plays chess", user_id="bob")
            out["users"] = client.users()
            out["feedback"] = client.feedback(kept, "VERY_NEGATIVE", "it is Bob who hikes")
            out["positive"] = client.feedback(kept, "POSITIVE")
            either = {"OR": [{"user_id": "alice"}, {"user_id": "bob"}]}
            out["or"] = client.search("plays hikes climbs", filters=either)
            out["or_all"] = client.get_all(filters=either)
            out["not"] = client.get_all(
                filters={"AND": [{"user_id": "alice"}, {"NOT": {"agent_id": "coach"}}]}
            )
            try:
                client.search("x", filters={"user_id": {"regex": "a.*"}})
            except Exception as exc:  # the client raises its own error for a 400
                out["bad"] = str(exc)
            out["deleted_bob"] = client.delete_users(user_id="bob")
            out["after_bob"] = client.users()
            out["reset"] = client.reset()
            out["after_reset"] = client.users()
            client.client.close()
            return out

        out = await asyncio.to_thread(session)
    users = {(e["type"], e["name"]): e["total_memories"] for e in out["users"]["results"]}
    assert users == {("user", "alice"): 2, ("user", "bob"): 1, ("agent", "coach"): 1}
    assert out["users"]["count"] == 3
    # a wrong memory is a lapse: its stability collapses, so it fades and gets archived
    after_lapse = out["feedback"]["strength"]
    assert out["feedback"]["feedback"] == "VERY_NEGATIVE" and after_lapse["reviews"] == 2
    assert out["positive"]["strength"]["stability_days"] > after_lapse["stability_days"]
    assert out["deleted_bob"] == {"message": "Entity deleted successfully."}
    assert ("user", "bob") not in {(e["type"], e["name"]) for e in out["after_bob"]["results"]}
    assert {r["user_id"] for r in out["or"]["results"]} == {"alice", "bob"}
    assert sorted(r["memory"] for r in out["or_all"]["results"]) == [
        "Alice climbs", "Alice hikes", "Bob plays chess"]  # fmt: skip
    assert [r["memory"] for r in out["not"]["results"]] == ["Alice hikes"]
    assert "unsupported 'regex'" in out["bad"]
    assert out["after_reset"]["results"] == []
    assert await service.memories.count() == 0


async def test_seed_000_adapter_routes_with_token_auth_and_no_trailing_slashes(
    service: MemoryService,
) -> None:
    auth = {"Authorization": "Token s3", "Content-Type": "application/json"}
    async with (
        server(service, token="s3") as url,
        httpx.AsyncClient(base_url=url + "/v1", headers=auth) as http,
    ):
        added = await http.post("/memories", json={
            "messages": [{"role": "user", "content": "Carol drinks tea"}],
            "user_id": "carol", "agent_id": None, "metadata": None,
        })  # fmt: skip
        assert added.status_code == 200, added.text
        mid = added.json()["results"][0]["id"]
        await http.post("/memories", json={"messages": [{"role": "user",
                        "content": "Dan drinks coffee"}], "user_id": "dan"})  # fmt: skip
        found = await http.post("/memories/search", json={
            "query": "tea", "user_id": "carol", "agent_id": None, "limit": 10})  # fmt: skip
        assert [r["id"] for r in found.json()["results"]] == [mid]
        one = (await http.get(f"/memories/{mid}")).json()
        assert one["memory"] == "Carol drinks tea" and one["user_id"] == "carol"
        listed = await http.get("/memories?user_id=carol&agent_id=&limit=100")
        assert [r["id"] for r in listed.json()["results"]] == [mid]
        changed = await http.put(f"/memories/{mid}", json={"content": "Carol drinks green tea"})
        assert changed.status_code == 200 and changed.json()["memory"] == "Carol drinks green tea"
        both = await http.put(f"/memories/{mid}", json={"content": "a", "text": "b"})
        assert both.status_code == 400 and "not two different" in error_message(both)
        gone = await http.delete("/memories?user_id=carol&agent_id=")
        assert gone.status_code == 200 and gone.json()["deleted"] == 1
        assert (await http.get(f"/memories/{mid}")).status_code == 404
    assert await service.memories.count(user_id="dan") == 1
