"""Settings and load_settings: defaults < user config < vault memcore.toml < MEMCORE_* env < flags.

This is the only module that reads configuration files or environment variables.
"""

from __future__ import annotations

import dataclasses
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from memcore.errors import ConfigError

VAULT_CONFIG = "memcore.toml"
PROVIDERS = ("local", "static", "ollama", "openai")
SPLITS = ("window", "paragraph")
FUSIONS = ("adaptive", "weighted", "rrf", "linear", "vector", "keyword")


@dataclass(frozen=True, slots=True)
class IndexSettings:
    include: tuple[str, ...] = ("MEMORY.md", "memory.md", "memory/**/*.md")
    exclude: tuple[str, ...] = ()
    max_file_bytes: int = 4_000_000
    # 200/25 rather than the design's 400/50: the default model reads 256 word pieces, and
    # smaller windows measured better on evidence within a prompt budget (README, Quality).
    chunk_tokens: int = 200
    overlap_tokens: int = 25
    chars_per_token: int = 4
    split: str = "window"


@dataclass(frozen=True, slots=True)
class EmbedderSettings:
    provider: str = "local"
    batch_size: int = 32
    concurrency: int = 2
    retries: int = 3
    threads: int = 0  # in-process models: 0 = one per core


@dataclass(frozen=True, slots=True)
class OllamaSettings:
    host: str = "http://127.0.0.1:11434"
    model: str = "nomic-embed-text"
    timeout: float = 60.0
    concurrency: int = 4
    batch_size: int = 32
    keep_alive: str = "10m"


@dataclass(frozen=True, slots=True)
class OpenAISettings:
    base_url: str = ""  # empty = the library's default (api.openai.com)
    model: str = "text-embedding-3-small"
    dimensions: int = 0  # 0 = the model's native size
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 60.0
    concurrency: int = 4
    batch_size: int = 64


@dataclass(frozen=True, slots=True)
class SearchSettings:
    fusion: str = "adaptive"
    limit: int = 5
    candidates: int = 4  # vector and keyword lists are each limit x candidates long
    min_score: float = 0.0
    keyword_weight: float = 0.3
    rrf_k: int = 60
    recency_weight: float = 0.0  # date boost; 0 = off (measured: no gain on the eval sets)
    recency_half_life_days: float = 30.0


@dataclass(frozen=True, slots=True)
class StorageSettings:
    db: str = ""  # empty = <vault>/.memcore/index.db
    busy_timeout_s: float = 10.0  # how long a write waits for another process's transaction


@dataclass(frozen=True, slots=True)
class WatchSettings:
    debounce_ms: int = 250
    max_delay_ms: int = 2000
    poll_interval_s: float = 2.0
    retry_pending_s: float = 30.0


@dataclass(frozen=True, slots=True)
class Settings:
    vault: Path
    index: IndexSettings = field(default_factory=IndexSettings)
    embedder: EmbedderSettings = field(default_factory=EmbedderSettings)
    ollama: OllamaSettings = field(default_factory=OllamaSettings)
    openai: OpenAISettings = field(default_factory=OpenAISettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    watch: WatchSettings = field(default_factory=WatchSettings)

    @property
    def state_dir(self) -> Path:
        return self.vault / ".memcore"

    @property
    def db_path(self) -> Path:
        if self.storage.db:
            return Path(self.storage.db).expanduser().resolve()
        return self.state_dir / "index.db"


SECTIONS: dict[str, type[Any]] = {
    name: hint for name, hint in get_type_hints(Settings).items() if name != "vault"
}

# A vault's own memcore.toml travels with the vault (git clone); it must not be able to send
# memory to another endpoint, read another key, or move the database.
VAULT_FORBIDDEN = frozenset({"ollama.host", "openai.base_url", "openai.api_key_env", "storage.db"})
VAULT_PROVIDERS = ("local", "static", "ollama")

ENV_ALIASES = {"MEMCORE_DB": "storage.db", "MEMCORE_EMBEDDER": "embedder.provider"}
ENV_SPECIAL = frozenset({"MEMCORE_VAULT", "MEMCORE_CONFIG"})


def user_config_dir(env: Mapping[str, str] | None = None) -> Path:
    """$XDG_CONFIG_HOME, else ~/.config (where user config and service units live)."""
    env = os.environ if env is None else env
    if env.get("XDG_CONFIG_HOME"):
        return Path(env["XDG_CONFIG_HOME"]).expanduser()
    return Path(env.get("HOME") or Path.home()).expanduser() / ".config"


def user_config_path(env: Mapping[str, str]) -> Path:
    if env.get("MEMCORE_CONFIG"):
        return Path(env["MEMCORE_CONFIG"]).expanduser()
    return user_config_dir(env) / "memcore" / "config.toml"


def resolve_vault(flag: str | Path | None, env: Mapping[str, str]) -> Path:
    raw = flag or env.get("MEMCORE_VAULT") or "."
    return Path(raw).expanduser().resolve()


def load_settings(
    vault: str | Path | None = None,
    overrides: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Build Settings for a vault. Raises ConfigError naming the bad file, key or value."""
    env = os.environ if env is None else env
    values: dict[str, dict[str, object]] = {name: {} for name in SECTIONS}
    user_file = user_config_path(env)
    if user_file.is_file():
        _merge(values, _read_toml(user_file), str(user_file), forbidden=frozenset())
    root = resolve_vault(vault, env)
    vault_file = root / VAULT_CONFIG
    if vault_file.is_file():
        _merge(values, _read_toml(vault_file), str(vault_file), forbidden=VAULT_FORBIDDEN)
        provider = values["embedder"].get("provider")
        if provider is not None and provider not in VAULT_PROVIDERS:
            raise ConfigError(
                f"{vault_file}: embedder.provider = {provider!r} sends memory off this machine; "
                "set it in your user config, MEMCORE_EMBEDDER or --embedder instead"
            )
    _merge_flat(values, _env_values(env), "environment")
    _merge_flat(values, {k: v for k, v in (overrides or {}).items() if v is not None}, "flag")
    sections = {name: _build(SECTIONS[name], name, values[name]) for name in SECTIONS}
    settings = Settings(vault=root, **sections)
    _validate(settings)
    return settings


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc


def _merge(
    values: dict[str, dict[str, object]],
    data: Mapping[str, Any],
    origin: str,
    forbidden: frozenset[str],
) -> None:
    for section, table in data.items():
        if section not in SECTIONS:
            raise ConfigError(f"{origin}: unknown section [{section}]")
        if not isinstance(table, dict):
            raise ConfigError(f"{origin}: [{section}] must be a table")
        for key, value in table.items():
            dotted = f"{section}.{key}"
            if dotted in forbidden:
                raise ConfigError(
                    f"{origin}: {dotted} may not be set in a vault's memcore.toml; "
                    "use your user config or the environment"
                )
            _check_key(section, key, origin)
            values[section][key] = value


def _merge_flat(
    values: dict[str, dict[str, object]], flat: Mapping[str, object], origin: str
) -> None:
    for dotted, value in flat.items():
        section, _, key = dotted.partition(".")
        if section not in SECTIONS:
            raise ConfigError(f"{origin}: unknown setting {dotted}")
        _check_key(section, key, origin)
        values[section][key] = value


def _check_key(section: str, key: str, origin: str) -> None:
    names = {f.name for f in dataclasses.fields(SECTIONS[section])}
    if key not in names:
        hint = ", ".join(sorted(names))
        raise ConfigError(f"{origin}: unknown key {section}.{key} (known: {hint})")


def _env_values(env: Mapping[str, str]) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, raw in env.items():
        if not name.startswith("MEMCORE_") or name in ENV_SPECIAL:
            continue
        if name in ENV_ALIASES:
            out[ENV_ALIASES[name]] = raw
            continue
        rest = name.removeprefix("MEMCORE_").lower()
        section = next((s for s in SECTIONS if rest.startswith(s + "_")), None)
        if section is None:
            raise ConfigError(f"unknown environment variable {name}")
        out[f"{section}.{rest.removeprefix(section + '_')}"] = raw
    return out


def _build(cls: type[Any], section: str, raw: Mapping[str, object]) -> Any:
    hints = get_type_hints(cls)
    kwargs = {key: _coerce(value, hints[key], f"{section}.{key}") for key, value in raw.items()}
    return cls(**kwargs)


def _to_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.lower() in ("1", "true", "yes", "on"):
        return True
    if isinstance(value, str) and value.lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(value)


def _to_int(value: object) -> int:
    if isinstance(value, int | str) and not isinstance(value, bool):
        return int(value)
    raise ValueError(value)


def _to_float(value: object) -> float:
    if isinstance(value, int | float | str) and not isinstance(value, bool):
        return float(value)
    raise ValueError(value)


def _to_str(value: object) -> str:
    if isinstance(value, str | Path):
        return str(value)
    raise ValueError(value)


def _to_str_tuple(value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(p.strip() for p in value.split(",") if p.strip())
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(value)


_COERCE: dict[Any, Any] = {
    bool: _to_bool,
    int: _to_int,
    float: _to_float,
    str: _to_str,
    tuple[str, ...]: _to_str_tuple,
}


def _coerce(value: object, hint: Any, name: str) -> object:
    convert = _COERCE.get(hint)
    if convert is None:
        raise ConfigError(f"{name}: unsupported setting type")
    try:
        return convert(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}: invalid value {value!r}") from exc


def _validate(s: Settings) -> None:
    if s.embedder.provider not in PROVIDERS:
        raise ConfigError(
            f"embedder.provider: {s.embedder.provider!r} is not one of {', '.join(PROVIDERS)}"
        )
    if s.index.split not in SPLITS:
        raise ConfigError(f"index.split: {s.index.split!r} is not one of {', '.join(SPLITS)}")
    if s.search.fusion not in FUSIONS:
        raise ConfigError(f"search.fusion: {s.search.fusion!r} is not one of {', '.join(FUSIONS)}")
    positive = {
        "index.chunk_tokens": s.index.chunk_tokens,
        "index.chars_per_token": s.index.chars_per_token,
        "index.max_file_bytes": s.index.max_file_bytes,
        "embedder.batch_size": s.embedder.batch_size,
        "embedder.concurrency": s.embedder.concurrency,
        "ollama.concurrency": s.ollama.concurrency,
        "openai.concurrency": s.openai.concurrency,
        "search.limit": s.search.limit,
        "search.candidates": s.search.candidates,
        "search.recency_half_life_days": s.search.recency_half_life_days,
    }
    for name, value in positive.items():
        if value <= 0:
            raise ConfigError(f"{name}: must be positive, got {value}")
    if s.search.recency_weight < 0:
        raise ConfigError(f"search.recency_weight: must be >= 0, got {s.search.recency_weight}")
    if not 0 <= s.index.overlap_tokens < s.index.chunk_tokens:
        raise ConfigError("index.overlap_tokens: must be >= 0 and below index.chunk_tokens")
