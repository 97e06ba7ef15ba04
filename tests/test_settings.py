from __future__ import annotations

import re
from pathlib import Path

import pytest

from memcore.core.errors import ConfigError, VaultNotFound
from memcore.core.places import resolve_vault
from memcore.core.settings import load_settings


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


def test_the_vault_is_found_by_walking_up_like_git(
    vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (vault / "MEMORY.md").write_text("# M\n")
    (vault / "memory" / "deep").mkdir()
    monkeypatch.chdir(vault / "memory" / "deep")
    assert load_settings(env={}).vault == vault.resolve()
    assert resolve_vault(None, {}, cwd=vault / "memory") == vault.resolve()


@pytest.mark.parametrize("marker", ["memcore.toml", ".memcore", "memory.md"])
def test_each_marker_makes_a_vault(tmp_path: Path, marker: str) -> None:
    root = tmp_path / "v"
    (root / "sub").mkdir(parents=True)
    if marker == ".memcore":
        (root / marker).mkdir()
    else:
        (root / marker).write_text("")
    assert resolve_vault(None, {}, cwd=root / "sub") == root.resolve()


def test_no_vault_is_an_error_and_nothing_is_created(tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    bare.mkdir()
    with pytest.raises(VaultNotFound, match=r"no vault in .* run `memcore init` or pass --vault"):
        resolve_vault(None, {}, cwd=bare)
    assert list(bare.iterdir()) == []


def test_a_named_vault_must_be_a_folder(tmp_path: Path) -> None:
    with pytest.raises(VaultNotFound, match="does not exist"):
        load_settings(tmp_path / "missing", env={})
    (tmp_path / "file.md").write_text("x")
    with pytest.raises(VaultNotFound, match="is a file, not a vault folder"):
        load_settings(tmp_path / "file.md", env={})


def test_a_known_value_in_the_wrong_case_is_not_called_remote(vault: Path) -> None:
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "Local"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(vault, env={})
    message = str(err.value)
    assert "memcore.toml: embedder.provider: 'Local' is not one of" in message
    assert "did you mean 'local'?" in message and "off this machine" not in message


def test_a_top_level_key_points_at_its_section(vault: Path) -> None:
    (vault / "memcore.toml").write_text("limit = 2\n")
    with pytest.raises(
        ConfigError, match=r"limit must be inside a \[section\]; did you mean \[search\]"
    ):
        load_settings(vault, env={})


def test_value_errors_name_where_the_value_came_from(vault: Path) -> None:
    (vault / "memcore.toml").write_text("[search]\nlimit = 0\n[index]\nchunk_tokens = 'many'\n")
    with pytest.raises(ConfigError, match=r"memcore\.toml: index\.chunk_tokens: invalid value"):
        load_settings(vault, env={})
    (vault / "memcore.toml").write_text("[search]\nlimit = 0\n")
    with pytest.raises(ConfigError, match=r"memcore\.toml: search\.limit: must be positive"):
        load_settings(vault, env={})
    with pytest.raises(ConfigError, match=r"^MEMCORE_SEARCH_LIMIT: search\.limit: invalid"):
        load_settings(vault, env={"MEMCORE_SEARCH_LIMIT": "lots"})


def test_memcore_config_must_name_an_existing_file(vault: Path, tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"MEMCORE_CONFIG names .*nope\.toml, which is not a file"
    ):
        load_settings(vault, env={"MEMCORE_CONFIG": str(tmp_path / "nope.toml")})


def test_list_variables_take_json_lists_or_commas(vault: Path) -> None:
    env = {"MEMCORE_INDEX_INCLUDE": '["MEMORY.md", "notes/*.md"]'}
    assert load_settings(vault, env=env).index.include == ("MEMORY.md", "notes/*.md")
    env = {"MEMCORE_INDEX_INCLUDE": "MEMORY.md, notes/*.md"}
    assert load_settings(vault, env=env).index.include == ("MEMORY.md", "notes/*.md")
    with pytest.raises(ConfigError, match=r"index\.include: invalid value"):
        load_settings(vault, env={"MEMCORE_INDEX_INCLUDE": '["unclosed"'})


def test_no_bench_or_package_variable_is_one_the_settings_loader_rejects(vault: Path) -> None:
    """bench/ read MEMCORE_EVAL_DIR once, which load_settings refuses as an unknown setting."""
    repo = Path(__file__).resolve().parent.parent
    names = {
        name
        for folder in ("bench", "memcore")
        for path in (repo / folder).rglob("*.py")
        for name in re.findall(r"\b(MEMCORE_[A-Z_]+)\b", path.read_text(encoding="utf-8"))
    }
    assert "MEMCORE_VAULT" in names  # the scan sees the package's own variables
    rejected = []
    for name in sorted(names - {"MEMCORE_CONFIG"}):
        try:
            load_settings(vault, env={name: "1"})
        except ConfigError as exc:
            rejected += [name] if "unknown environment variable" in str(exc) else []
    assert rejected == []


def test_the_postgresql_keyword_ranking_is_auto_or_builtin(vault: Path) -> None:
    assert load_settings(vault, env={}).storage.keyword_index == "auto"
    env = {"MEMCORE_STORAGE_KEYWORD_INDEX": "builtin"}
    assert load_settings(vault, env=env).storage.keyword_index == "builtin"
    with pytest.raises(ConfigError, match=r"storage\.keyword_index: 'bm25' is not one of"):
        load_settings(vault, {"storage.keyword_index": "bm25"}, env={})
