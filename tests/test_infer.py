"""add(..., infer=True) against a loopback server speaking the real Ollama and OpenAI chat APIs."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from memcore.compose import build_llm
from memcore.core.errors import ConfigError, LLMError
from memcore.core.settings import LLMSettings, Settings
from memcore.service import MemoryService
from tests.conftest import make_service
from tests.support import FakeEmbedder, WireBehaviour, WireServer


def with_llm(settings: Settings, **llm: object) -> Settings:
    return dataclasses.replace(settings, llm=LLMSettings(**llm))  # type: ignore[arg-type]


async def service_with(settings: Settings, embedder: FakeEmbedder) -> MemoryService:
    svc = make_service(settings, embedder)
    svc.llm = build_llm(settings)
    svc.memories.llm = svc.llm
    return svc


def reconcile(prompt: str) -> dict[str, object]:
    """What a good model answers to memcore's reconcile prompt, by the numbers it was shown."""
    shown = {e["text"]: e["id"] for e in json.loads(prompt)["existing"]}
    return {"memory": [
        {"id": shown["Alice lives in Berlin"], "text": "Alice lives in Lisbon", "event": "UPDATE"},
        {"id": "new", "text": "Alice has a dog named Rex", "event": "ADD"},
        {"id": shown["Alice drinks tea"], "text": "Alice drinks tea", "event": "NONE"},
        {"id": "99", "text": "made-up id", "event": "DELETE"},
    ]}  # fmt: skip


@pytest.mark.parametrize("provider", ["ollama", "openai"])
async def test_infer_extracts_then_adds_updates_and_deletes(
    settings: Settings,
    embedder: FakeEmbedder,
    provider: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    behaviour = WireBehaviour()
    with WireServer(behaviour) as server:
        where = {"host": server.url} if provider == "ollama" else {"base_url": server.url + "/v1"}
        s = with_llm(settings, provider=provider, model="chatty", **where)
        async with await service_with(s, embedder) as svc:
            await svc.memories.add("Alice lives in Berlin", user_id="alice")
            await svc.memories.add("Alice drinks tea", user_id="alice")
            await svc.memories.add("Bob lives in Berlin", user_id="bob")
            behaviour.chat_replies += [
                {
                    "facts": [
                        "Alice moved to Lisbon",
                        "Alice has a dog named Rex",
                        "Alice drinks tea",
                    ]
                },
                reconcile,
            ]
            out = await svc.memories.add(
                [{"role": "user", "content": "I moved to Lisbon with my dog Rex."}],
                user_id="alice",
                infer=True,
            )
            events = {(r.event, r.text) for r in out}
            texts = {r.text for r in await svc.memories.get_all(user_id="alice")}
            bob = {r.text for r in await svc.memories.get_all(user_id="bob")}
    assert ("ADD", "Alice has a dog named Rex") in events
    assert [e for e, _ in events].count("UPDATE") == 1 and len(events) == 2
    assert "Alice has a dog named Rex" in texts and "Alice drinks tea" in texts
    assert bob == {"Bob lives in Berlin"}  # the other scope was never shown nor touched
    chats = [r for r in behaviour.requests if r["path"].endswith(("/api/chat", "/completions"))]
    assert len(chats) == 2 and chats[0]["body"]["model"] == "chatty"
    first = chats[0]["body"]["messages"]
    assert first[0]["role"] == "system" and "I moved to Lisbon" in first[1]["content"]
    if provider == "ollama":
        assert chats[0]["body"]["format"] == "json"
    else:
        assert chats[0]["body"]["response_format"] == {"type": "json_object"}
    assert "Bob lives" not in chats[1]["body"]["messages"][1]["content"]


async def test_infer_without_an_llm_is_a_clear_error(service: MemoryService) -> None:
    with pytest.raises(ConfigError, match="infer=True needs an LLM"):
        await service.memories.add("x", user_id="u", infer=True)


async def test_an_llm_answering_nonsense_changes_nothing(
    settings: Settings, embedder: FakeEmbedder
) -> None:
    behaviour = WireBehaviour(chat_replies=[{"nope": 1}])
    with WireServer(behaviour) as server:
        s = with_llm(settings, provider="ollama", model="m", host=server.url)
        async with await service_with(s, embedder) as svc:
            with pytest.raises(LLMError, match="facts"):
                await svc.memories.add("I like tea", user_id="u", infer=True)
            assert await svc.memories.count() == 0


async def test_an_unreachable_llm_is_one_line(settings: Settings, embedder: FakeEmbedder) -> None:
    s = with_llm(settings, provider="ollama", model="m", host="http://127.0.0.1:9")
    async with await service_with(s, embedder) as svc:
        with pytest.raises(LLMError, match="unreachable"):
            await svc.memories.add("I like tea", user_id="u", infer=True)


def test_a_vault_file_cannot_send_memory_to_a_remote_llm(vault: Path) -> None:
    from memcore.core.settings import load_settings

    (vault / "memcore.toml").write_text('[llm]\nprovider = "openai"\n')
    with pytest.raises(ConfigError, match="off this machine"):
        load_settings(vault, env={})
    (vault / "memcore.toml").write_text('[llm]\nhost = "http://evil"\n')
    with pytest.raises(ConfigError, match="may not be set in a vault"):
        load_settings(vault, env={})
