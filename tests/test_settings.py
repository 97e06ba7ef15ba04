from __future__ import annotations

from pathlib import Path

import pytest

from memcore.errors import ConfigError
from memcore.settings import load_settings


def test_defaults(vault: Path) -> None:
    s = load_settings(vault, env={})
    assert s.embedder.provider == "local"
    assert s.index.chunk_tokens == 200
    assert s.index.overlap_tokens == 25
    assert s.db_path == vault.resolve() / ".memcore" / "index.db"


def test_precedence_user_then_vault_then_env_then_flags(vault: Path, tmp_path: Path) -> None:
    user = tmp_path / "user.toml"
    user.write_text(
        '[search]\nlimit = 7\nfusion = "rrf"\n[ollama]\nhost = "http://gpu-box:11434"\n'
    )
    (vault / "memcore.toml").write_text("[search]\nlimit = 9\n[index]\nchunk_tokens = 200\n")
    env = {"MEMCORE_CONFIG": str(user), "MEMCORE_INDEX_CHUNK_TOKENS": "300"}
    s = load_settings(vault, {"search.limit": 3}, env=env)
    assert s.search.fusion == "rrf"  # user file
    assert s.ollama.host == "http://gpu-box:11434"  # user file may set endpoints
    assert s.index.chunk_tokens == 300  # env beats vault file
    assert s.search.limit == 3  # flag beats everything


def test_unknown_key_is_named(vault: Path) -> None:
    (vault / "memcore.toml").write_text("[search]\nlimt = 3\n")
    with pytest.raises(ConfigError, match=r"unknown key search\.limt"):
        load_settings(vault, env={})


def test_unknown_section_and_bad_toml(vault: Path) -> None:
    (vault / "memcore.toml").write_text("[serch]\n")
    with pytest.raises(ConfigError, match=r"unknown section \[serch\]"):
        load_settings(vault, env={})
    (vault / "memcore.toml").write_text("[search\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_settings(vault, env={})


@pytest.mark.parametrize(
    "line",
    [
        '[ollama]\nhost = "http://evil:11434"',
        '[openai]\nbase_url = "http://evil"',
        '[storage]\ndb = "/tmp/x.db"',
        '[openai]\napi_key_env = "AWS_SECRET"',
    ],
)
def test_vault_file_cannot_move_endpoints_keys_or_database(vault: Path, line: str) -> None:
    (vault / "memcore.toml").write_text(line + "\n")
    with pytest.raises(ConfigError, match="may not be set in a vault"):
        load_settings(vault, env={})


def test_vault_file_cannot_send_memory_to_a_remote_provider(vault: Path) -> None:
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "openai"\n')
    with pytest.raises(ConfigError, match="sends memory off this machine"):
        load_settings(vault, env={})


def test_env_values_are_typed_and_checked(vault: Path) -> None:
    s = load_settings(
        vault, env={"MEMCORE_INDEX_INCLUDE": "MEMORY.md, notes/*.md", "MEMCORE_DB": "/tmp/i.db"}
    )
    assert s.index.include == ("MEMORY.md", "notes/*.md")
    assert s.db_path == Path("/tmp/i.db")
    with pytest.raises(ConfigError, match=r"search\.limit: invalid value 'many'"):
        load_settings(vault, env={"MEMCORE_SEARCH_LIMIT": "many"})
    with pytest.raises(ConfigError, match="unknown environment variable MEMCORE_SERCH_LIMIT"):
        load_settings(vault, env={"MEMCORE_SERCH_LIMIT": "3"})


def test_invalid_values_are_rejected(vault: Path) -> None:
    with pytest.raises(ConfigError, match=r"embedder\.provider"):
        load_settings(vault, {"embedder.provider": "gpt"}, env={})
    with pytest.raises(ConfigError, match="overlap_tokens"):
        load_settings(vault, {"index.overlap_tokens": 500}, env={})
    with pytest.raises(ConfigError, match=r"search\.fusion"):
        load_settings(vault, {"search.fusion": "magic"}, env={})
    with pytest.raises(ConfigError, match=r"search\.recency_weight"):
        load_settings(vault, {"search.recency_weight": -1}, env={})
    with pytest.raises(ConfigError, match=r"search\.recency_half_life_days"):
        load_settings(vault, {"search.recency_half_life_days": 0}, env={})


def test_vault_from_env(vault: Path) -> None:
    assert load_settings(env={"MEMCORE_VAULT": str(vault)}).vault == vault.resolve()
