"""Task prefixes for asymmetric embedding models: the table, and what goes over the wire."""

from __future__ import annotations

from pathlib import Path

import pytest

from memcore.compose import open_service
from memcore.core.settings import load_settings
from memcore.embedders.prefixes import known_prefixes, task_prefixes
from tests.support import WireServer


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("nomic-embed-text", ("search_query: ", "search_document: ")),
        ("nomic-embed-text:latest", ("search_query: ", "search_document: ")),
        ("nomic-embed-text:v1.5", ("search_query: ", "search_document: ")),
        ("mxbai-embed-large", ("Represent this sentence for searching relevant passages: ", "")),
        ("intfloat/multilingual-e5-small", ("query: ", "passage: ")),
        ("bge-m3", ("", "")),
        ("text-embedding-3-small", ("", "")),
    ],
)
def test_known_models_get_their_documented_prefixes(model: str, expected: tuple[str, str]) -> None:
    assert known_prefixes(model) == expected


def test_a_setting_overrides_the_table_and_empty_turns_a_prefix_off() -> None:
    assert task_prefixes("nomic-embed-text", "", "auto") == ("", "search_document: ")
    assert task_prefixes("bge-m3", "Q: ", "D: ") == ("Q: ", "D: ")


def write_vault(root: Path) -> Path:
    (root / "memory").mkdir(parents=True)
    (root / "MEMORY.md").write_text("# Memory\n\n## Engine\n\nDiveAdstra uses DX12 by default.\n")
    return root


async def test_ollama_nomic_indexes_documents_and_searches_queries_with_their_prefixes(
    tmp_path: Path,
) -> None:
    vault = write_vault(tmp_path / "vault")
    with WireServer() as srv:
        settings = load_settings(
            vault, {"embedder.provider": "ollama", "ollama.host": srv.url}, env={}
        )
        async with open_service(settings) as svc:
            await svc.index()
            result = await svc.search("render engine")
            model_id = svc.model_id
        inputs = [t for r in srv.behaviour.requests for t in r["body"]["input"]]
    assert result.mode == "hybrid" and result.hits[0].path == "MEMORY.md"
    documents = [t for t in inputs if "DX12" in t]
    assert documents and all(t.startswith("search_document: ") for t in documents)
    assert "search_query: render engine" in inputs
    # vectors made with a prefix live in their own space: changing it re-embeds
    assert model_id == "ollama:nomic-embed-text[search_document:]"


async def test_openai_compatible_server_with_a_configured_query_prefix(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    vault = write_vault(tmp_path / "vault")
    with WireServer() as srv:
        overrides = {
            "embedder.provider": "openai",
            "openai.base_url": srv.url + "/v1",
            "openai.query_prefix": "query: ",
        }
        settings = load_settings(vault, overrides, env={})
        async with open_service(settings) as svc:
            await svc.index()
            await svc.search("render engine")
            model_id = svc.model_id
        inputs = [t for r in srv.behaviour.requests for t in r["body"]["input"]]
    assert "query: render engine" in inputs
    assert any(t.startswith("Memory > Engine\n") and "DX12" in t for t in inputs)  # raw
    assert model_id == "openai:text-embedding-3-small"
