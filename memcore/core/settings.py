"""Settings and load_settings: defaults < user config < vault memcore.toml < MEMCORE_* env < flags.

This is the only module that reads configuration files or environment variables (with
places.py, which finds the vault and the files to read).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import re
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, get_type_hints

from memcore.core.errors import ConfigError
from memcore.core.places import (
    ENV_SPECIAL,
    VAULT_CONFIG,
    config_inputs,
    resolve_vault,
    state_dir_of,
    user_config_path,
)
from memcore.core.redact import redact_url

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
    # Read notes through symbolic links that lead out of the vault (memcore never writes
    # through one, whatever this says).
    follow_links: bool = False


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
    # "auto" = the model's documented task prefix (nomic-embed-text: "search_query: "), "" = none
    query_prefix: str = "auto"
    document_prefix: str = "auto"


@dataclass(frozen=True, slots=True)
class OpenAISettings:
    base_url: str = ""  # empty = the library's default (api.openai.com)
    model: str = "text-embedding-3-small"
    dimensions: int = 0  # 0 = the model's native size
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 60.0
    concurrency: int = 4
    batch_size: int = 64
    query_prefix: str = "auto"  # as for ollama; OpenAI's own models want none
    document_prefix: str = "auto"


@dataclass(frozen=True, slots=True)
class SearchSettings:
    fusion: str = "adaptive"
    limit: int = 5
    # The vector and keyword lists are each this long whatever the limit, so a search's first
    # k results are the first k of any longer search; a limit above it (up to 1000) keeps these
    # first and continues from deeper lists. 200 measured best (docs/retrieval-quality.md).
    candidates: int = 200
    min_score: float = 0.0  # drop results scoring below this (scores are 0-1)
    context_min_score: float = 0.35  # `context` leaves out memories below this (measured)
    vector_weight: float = 0.7  # how much meaning counts (rrf, linear, weighted, adaptive)
    keyword_weight: float = 0.3  # how much keywords count
    rrf_k: int = 60
    recency_weight: float = 0.0  # date boost; 0 = off (measured: no gain on the eval sets)
    recency_half_life_days: float = 30.0
    cache_size: int = 1000  # L1 cache of recent results (seed 001); 0 = off


@dataclass(frozen=True, slots=True)
class KeywordSettings:
    """The keyword index's own words and BM25's parameters (core/own_words.py)."""

    # files of the vault (or absolute, or ~/...): a jieba user dictionary ("word [freq]" a
    # line) and stop words (one or more a line); "" = none. A change tokenizes once again
    dictionary: str = ""
    stop_words: str = ""
    # BM25's term-frequency saturation and length normalization: PostgreSQL only (SQLite's
    # FTS5 ranks with a fixed 1.2 and 0.75)
    k1: float = 1.2
    b: float = 0.75


@dataclass(frozen=True, slots=True)
class StrengthSettings:
    """FSRS-6 memory strength (strength.py): how it ranks and when memories are forgotten."""

    weight: float = 0.0  # share of a score that retrievability scales; 0 = off (see Quality)
    forget_below: float = 0.0  # the daemon archives decaying memories below this; 0 = off
    forget_interval_s: float = 3600.0  # how often the daemon looks
    # FSRS-6's 21 weights (w0..w20, in the bounds the fsrs package checks); empty = its defaults
    parameters: tuple[float, ...] = ()
    # a run's memories and turns (run_id set) age this many times as fast as the rest: 4 = a
    # session's memories fade in a quarter of the time; 1 = the same policy for every memory
    run_pace: float = 1.0


@dataclass(frozen=True, slots=True)
class StorageSettings:
    db: str = ""  # empty = <vault>/.memcore/index.db; a postgresql:// URL here means url
    url: str = ""  # postgresql://user@host/db: the index lives in PostgreSQL (pgvector)
    # Whose rows these are in a shared PostgreSQL database: vaults with different namespaces
    # never see each other's chunks or memories. Empty = one derived from the vault's path; set
    # the same name on every machine that shares one vault.
    namespace: str = ""
    busy_timeout_s: float = 10.0  # how long a write waits for another process's transaction
    # From this many vectors of one model, vector search uses an HNSW graph: saved beside the
    # index on SQLite (recall@10 vs exact >= 0.98, see bench/search.py), pgvector's index on
    # PostgreSQL. Below it, an exact matrix each process holds (on PostgreSQL too: no HNSW
    # index is built, and each process keeps up with the others' writes by a log of changes).
    ann_min_vectors: int = 50_000
    # SQLite page cache of each search connection (up to 3), filled only as pages are read
    cache_mb: int = 128
    # PostgreSQL: connections for concurrent reads (seed 000's pool_size); writes take two more
    pool_size: int = 3
    # PostgreSQL: at most this much maintenance_work_mem for building a vector index after a
    # load. The graph builds fastest whole in memory: ~1.6 KB a 256-dimension vector, so 1M
    # of them want ~1.9 GB; past it pgvector builds at about the rate of row-by-row inserts
    build_memory_mb: int = 1024
    # PostgreSQL keyword ranking: "auto" = BM25 in a pg_textsearch index when the server has
    # the extension (in shared_preload_libraries), else PostgreSQL's own full text; "builtin"
    # = PostgreSQL's own full text even where pg_textsearch is installed
    keyword_index: str = "auto"


@dataclass(frozen=True, slots=True)
class WatchSettings:
    debounce_ms: int = 250
    max_delay_ms: int = 2000
    # "auto" = native file events, polling where the vault's file system gives none for other
    # machines' writes (NFS, SMB, CephFS...) or the OS runs out of watches; "always" = polling
    polling: str = "auto"
    poll_interval_s: float = 2.0
    retry_pending_s: float = 30.0


@dataclass(frozen=True, slots=True)
class ServerSettings:
    """Limits of `memcore serve`'s HTTP listener (fronts/listener.py)."""

    header_timeout_s: float = 10.0  # a request's head must arrive within this (slowloris)
    idle_timeout_s: float = 5.0  # a kept-alive connection with no next request closes
    max_connections: int = 1000  # open connections at once; past it the stalest goes
    body_timeout_s: float = 10.0  # no byte of a request's body for this long closes it
    min_body_rate: int = 1024  # bytes/s a body must average once header_timeout_s has passed
    stop_timeout_s: float = 8.0  # after SIGTERM, serve and watch leave by then whatever runs


@dataclass(frozen=True, slots=True)
class LLMSettings:
    """The chat model `add(..., infer=True)` uses to extract and reconcile facts."""

    provider: str = ""  # "" = none; ollama or openai
    model: str = ""  # default: llama3.1 (ollama), gpt-4o-mini (openai)
    host: str = "http://127.0.0.1:11434"  # ollama
    base_url: str = ""  # openai-compatible servers; empty = api.openai.com
    api_key_env: str = "OPENAI_API_KEY"
    timeout: float = 120.0


@dataclass(frozen=True, slots=True)
class HookSettings:
    markers: tuple[str, ...] = ("[Memory]",)  # a commit message with one of these is a memory
    file: str = "MEMORY.md"  # where the git hook writes its summaries


@dataclass(frozen=True, slots=True)
class MemorySettings:
    """Where memories live (seed 000's adapters): ``markdown`` (the vault, indexed here),
    ``mem0`` (a Mem0 server, reached through the official client) or ``none`` (memory off:
    writes are dropped, reads are empty; ``enabled = false`` is the same)."""

    adapter: str = "markdown"
    enabled: bool = True
    base_url: str = "https://api.mem0.ai"  # mem0: the platform, a self-hosted server, a serve
    api_key_env: str = "MEM0_API_KEY"  # mem0: the variable that holds the API key
    org_id: str = ""
    project_id: str = ""

    @property
    def kind(self) -> str:
        """The adapter in use: ``none`` whenever memory is switched off."""
        return self.adapter if self.enabled else "none"


@dataclass(frozen=True, slots=True)
class Mem0Settings:
    """How the Mem0 REST routes answer what Mem0 would do and memcore cannot as asked."""

    # infer=true (Mem0's default) where no LLM is set: "verbatim" = store the messages as Mem0
    # does with infer=false (each non-system message a memory) and say so; "refuse" = a 400
    infer_without_llm: str = "verbatim"
    # a search threshold over this is applied as this, and the answer says so: frameworks pass
    # thresholds calibrated on Mem0's cosine (crewai 0.6), which memcore's fused score rarely
    # reaches (docs/mem0.md has the measurement). 1.0 = every threshold as sent
    threshold_ceiling: float = 1.0


@dataclass(frozen=True, slots=True)
class Settings:
    vault: Path
    index: IndexSettings = field(default_factory=IndexSettings)
    embedder: EmbedderSettings = field(default_factory=EmbedderSettings)
    ollama: OllamaSettings = field(default_factory=OllamaSettings)
    openai: OpenAISettings = field(default_factory=OpenAISettings)
    search: SearchSettings = field(default_factory=SearchSettings)
    keywords: KeywordSettings = field(default_factory=KeywordSettings)
    strength: StrengthSettings = field(default_factory=StrengthSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    watch: WatchSettings = field(default_factory=WatchSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    hook: HookSettings = field(default_factory=HookSettings)
    llm: LLMSettings = field(default_factory=LLMSettings)
    memory: MemorySettings = field(default_factory=MemorySettings)
    mem0: Mem0Settings = field(default_factory=Mem0Settings)
    # what these settings were read from (places.config_inputs), as JSON text: a daemon
    # publishes it, and a one-shot command whose own inputs are the same asks that daemon
    # without reading any config itself. "" for settings made in code.
    inputs: str = field(default="", compare=False)

    @property
    def state_dir(self) -> Path:
        """``<vault>/.memcore``, or a folder in the user's cache for a read-only vault."""
        return state_dir_of(self.vault)

    @property
    def database_url(self) -> str:
        """The PostgreSQL URL when the index lives there, else ""."""
        if self.storage.url:
            return self.storage.url
        return self.storage.db if is_postgres_url(self.storage.db) else ""

    @property
    def namespace(self) -> str:
        if self.storage.namespace:
            return self.storage.namespace
        digest = hashlib.sha256(str(self.vault.resolve()).encode()).hexdigest()[:16]
        return f"{self.vault.name[:40]}-{digest}"

    @property
    def index_location(self) -> str:
        """Which index these settings read, as text (no password): two processes with the same
        location share one index."""
        if self.database_url:
            return f"{redact_url(self.database_url)}#{self.namespace}"
        return str(self.db_path)

    @property
    def in_memory(self) -> bool:
        """``storage.db = ":memory:"``: an index that lives as long as the process, for tests
        and short-lived agents; nothing is written outside the vault's own Markdown."""
        return self.storage.db == MEMORY_DB

    @property
    def db_path(self) -> Path:
        if self.in_memory:
            return Path(MEMORY_DB)
        if self.storage.db:
            return Path(self.storage.db).expanduser().resolve()
        return self.state_dir / "index.db"


MEMORY_DB = ":memory:"


def is_postgres_url(value: str) -> bool:
    return value.startswith(("postgresql://", "postgres://"))


def embedder_signature(s: Settings) -> str:
    """Which vector space a configuration searches in, as text: two processes with the same
    signature and database give the same answers (the CLI asks the daemon only then)."""
    e = s.embedder.provider
    if e == "ollama":
        o = s.ollama
        return f"ollama:{o.model}|{o.query_prefix}|{o.document_prefix}|{redact_url(o.host)}"
    if e == "openai":
        a = s.openai
        where = redact_url(a.base_url)  # the vector space is the same whoever logs in
        return f"openai:{a.model}@{a.dimensions}|{a.query_prefix}|{a.document_prefix}|{where}"
    return e


SECTIONS: dict[str, type[Any]] = {
    name: hint for name, hint in get_type_hints(Settings).items() if name not in ("vault", "inputs")
}

# A vault's own memcore.toml travels with the vault (git clone); it must not be able to send
# memory to another endpoint, read another key, or move the database.
_NAMESPACE = re.compile(r"[A-Za-z0-9._-]{1,64}")
KEYWORD_INDEXES = ("auto", "builtin")
POLLING = ("auto", "always")
INFER_WITHOUT_LLM = ("verbatim", "refuse")
VAULT_FORBIDDEN = frozenset(
    {"ollama.host", "openai.base_url", "openai.api_key_env", "storage.db", "storage.url",
     "storage.namespace", "llm.host", "llm.base_url", "llm.api_key_env", "memory.base_url",
     "memory.api_key_env", "memory.org_id", "memory.project_id"}
)  # fmt: skip
LLM_PROVIDERS = ("", "ollama", "openai")
MEMORY_ADAPTERS = ("markdown", "mem0", "none")
VAULT_PROVIDERS = ("local", "static", "ollama")

ENV_ALIASES = {"MEMCORE_DB": "storage.db", "MEMCORE_EMBEDDER": "embedder.provider"}


def load_settings(
    vault: str | Path | None = None,
    overrides: Mapping[str, object] | None = None,
    env: Mapping[str, str] | None = None,
) -> Settings:
    """Build Settings for a vault. Raises ConfigError naming the bad file, key or value, and
    VaultNotFound when there is no vault (see resolve_vault)."""
    env = os.environ if env is None else env
    found = _Values()
    user_file = user_config_path(env)
    if user_file.is_file():
        found.merge_file(_read_toml(user_file), str(user_file), forbidden=frozenset())
    root = resolve_vault(vault, env)
    vault_file = root / VAULT_CONFIG
    if vault_file.is_file():
        data = _read_toml(vault_file)
        found.merge_file(data, str(vault_file), forbidden=VAULT_FORBIDDEN)
        _refuse_leaving(data, vault_file)
    for dotted, (name, raw) in _env_values(env).items():
        found.set(dotted, raw, name)
    for dotted, value in (overrides or {}).items():
        if value is not None:
            found.set(dotted, value, "command line")
    sections = {name: found.build(name) for name in SECTIONS}
    db = sections["storage"].db
    relative_db = bool(db) and db != MEMORY_DB and not is_postgres_url(db)
    relative_db = relative_db and not Path(db).expanduser().is_absolute()
    inputs = config_inputs(root, env, overrides, os.getcwd() if relative_db else None)
    settings = Settings(vault=root, **sections, inputs=json.dumps(inputs))
    for message in _problems(settings):
        key = message.partition(":")[0]
        origin = found.origins.get(key)
        raise ConfigError(f"{origin}: {message}" if origin else message)
    return settings


def _refuse_leaving(data: Mapping[str, Any], vault_file: Path) -> None:
    """A vault's memcore.toml may not send memory off this machine (a cloned vault would
    choose where its reader's memories go). Only that file's own values count: the same
    choices in the user config or the environment are the person's own."""

    def given(section: str, key: str) -> object:
        table = data.get(section)
        return table.get(key) if isinstance(table, dict) else None

    provider = given("embedder", "provider")
    if provider in PROVIDERS and provider not in VAULT_PROVIDERS:
        raise ConfigError(
            f"{vault_file}: embedder.provider = {provider!r} sends memory off this machine; "
            "set it in your user config, MEMCORE_EMBEDDER or --embedder instead"
        )
    if given("memory", "adapter") == "mem0":
        raise ConfigError(
            f"{vault_file}: memory.adapter = 'mem0' sends memory off this machine; "
            "set it in your user config, MEMCORE_MEMORY_ADAPTER or --memory instead"
        )
    if given("llm", "provider") == "openai":
        raise ConfigError(
            f"{vault_file}: llm.provider = 'openai' sends memory off this machine; "
            "set it in your user config or MEMCORE_LLM_PROVIDER instead"
        )


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as fh:
            return tomllib.load(fh)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror}") from exc


class _Values:
    """Raw setting values by section, and where each came from (for error messages)."""

    def __init__(self) -> None:
        self.values: dict[str, dict[str, object]] = {name: {} for name in SECTIONS}
        self.origins: dict[str, str] = {}

    def merge_file(self, data: Mapping[str, Any], origin: str, forbidden: frozenset[str]) -> None:
        for section, table in data.items():
            if not isinstance(table, dict):
                owners = [n for n in SECTIONS if section in _keys(n)]
                where = f"; did you mean [{owners[0]}] {section} = ...?" if owners else ""
                raise ConfigError(f"{origin}: {section} must be inside a [section]{where}")
            if section not in SECTIONS:
                known = ", ".join(SECTIONS)
                raise ConfigError(f"{origin}: unknown section [{section}] (known: {known})")
            for key, value in table.items():
                dotted = f"{section}.{key}"
                if dotted in forbidden:
                    raise ConfigError(
                        f"{origin}: {dotted} may not be set in a vault's memcore.toml; "
                        "use your user config or the environment"
                    )
                self.set(dotted, value, origin)

    def set(self, dotted: str, value: object, origin: str) -> None:
        section, _, key = dotted.partition(".")
        if section not in SECTIONS:
            raise ConfigError(f"{origin}: unknown setting {dotted}")
        if key not in _keys(section):
            hint = ", ".join(sorted(_keys(section)))
            raise ConfigError(f"{origin}: unknown key {dotted} (known: {hint})")
        self.values[section][key] = value
        self.origins[dotted] = origin

    def build(self, section: str) -> Any:
        cls = SECTIONS[section]
        hints = get_type_hints(cls)
        kwargs = {}
        for key, value in self.values[section].items():
            dotted = f"{section}.{key}"
            try:
                kwargs[key] = _coerce(value, hints[key], dotted)
            except ConfigError as exc:
                raise ConfigError(f"{self.origins[dotted]}: {exc}") from exc
        return cls(**kwargs)


def _keys(section: str) -> set[str]:
    return {f.name for f in dataclasses.fields(SECTIONS[section])}


def _env_values(env: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """dotted key -> (variable name, raw value) for every MEMCORE_* setting variable."""
    out: dict[str, tuple[str, str]] = {}
    for name, raw in env.items():
        if not name.startswith("MEMCORE_") or name in ENV_SPECIAL:
            continue
        if name in ENV_ALIASES:
            out[ENV_ALIASES[name]] = (name, raw)
            continue
        rest = name.removeprefix("MEMCORE_").lower()
        section = next((s for s in SECTIONS if rest.startswith(s + "_")), None)
        if section is None:
            raise ConfigError(f"unknown environment variable {name}")
        out[f"{section}.{rest.removeprefix(section + '_')}"] = (name, raw)
    return out


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


def _listed(value: object) -> object:
    """A list setting given as text (an environment variable): a JSON list, as in
    MEMCORE_INDEX_INCLUDE='["a.md"]', or items separated by commas; other values as given."""
    if not isinstance(value, str):
        return value
    if value.strip().startswith("["):
        parsed: object = json.loads(value)
        return parsed
    return [p.strip() for p in value.split(",") if p.strip()]


def _to_float_tuple(value: object) -> tuple[float, ...]:
    value = _listed(value)
    if isinstance(value, list | tuple):
        return tuple(_to_float(v) for v in value)
    raise ValueError(value)


def _to_str_tuple(value: object) -> tuple[str, ...]:
    value = _listed(value)
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ValueError(value)


_COERCE: dict[Any, Any] = {
    bool: _to_bool,
    int: _to_int,
    float: _to_float,
    str: _to_str,
    tuple[str, ...]: _to_str_tuple,
    tuple[float, ...]: _to_float_tuple,
}


def _coerce(value: object, hint: Any, name: str) -> object:
    convert = _COERCE.get(hint)
    if convert is None:
        raise ConfigError(f"{name}: unsupported setting type")
    try:
        return convert(value)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"{name}: invalid value {value!r}") from exc


def _storage_problems(s: StorageSettings) -> Iterator[str]:
    if s.url and not is_postgres_url(s.url):
        yield "storage.url: must be a postgresql:// URL"
    if s.namespace and not _NAMESPACE.fullmatch(s.namespace):
        yield "storage.namespace: 1-64 letters, digits, '.', '_' or '-'"
    if not 1 <= s.pool_size <= 100:
        yield f"storage.pool_size: must be 1-100, got {s.pool_size}"
    if not 64 <= s.build_memory_mb <= 1_048_576:
        yield f"storage.build_memory_mb: must be 64-1048576 (MB), got {s.build_memory_mb}"


def _search_problems(s: SearchSettings) -> Iterator[str]:
    for name in ("min_score", "context_min_score"):
        if not 0 <= getattr(s, name) <= 1:
            yield f"search.{name}: must be between 0 and 1, got {getattr(s, name)}"
    for name in ("vector_weight", "keyword_weight"):
        if getattr(s, name) < 0:
            yield f"search.{name}: must be >= 0, got {getattr(s, name)}"
    if s.vector_weight + s.keyword_weight <= 0:
        yield "search.vector_weight + search.keyword_weight: must be above 0"


def _keyword_problems(s: KeywordSettings) -> Iterator[str]:
    if not 0 <= s.k1 <= 3:
        yield f"keywords.k1: must be between 0 and 3, got {s.k1}"
    if not 0 <= s.b <= 1:
        yield f"keywords.b: must be between 0 and 1, got {s.b}"


def _strength_problems(s: StrengthSettings) -> Iterator[str]:
    if not 0.01 <= s.run_pace <= 100:
        yield f"strength.run_pace: must be between 0.01 and 100, got {s.run_pace}"
    weights = s.parameters  # their bounds are checked by fsrs (search/strength.py)
    if weights and (len(weights) != 21 or not all(math.isfinite(w) for w in weights)):
        yield f"strength.parameters: FSRS-6 takes 21 finite numbers, got {len(weights)}"


def _problems(s: Settings) -> Iterator[str]:
    """Invalid values, each as "section.key: what is wrong"."""
    choices = {
        "embedder.provider": (s.embedder.provider, PROVIDERS),
        "llm.provider": (s.llm.provider, LLM_PROVIDERS),
        "index.split": (s.index.split, SPLITS),
        "search.fusion": (s.search.fusion, FUSIONS),
        "memory.adapter": (s.memory.adapter, MEMORY_ADAPTERS),
        "storage.keyword_index": (s.storage.keyword_index, KEYWORD_INDEXES),
        "watch.polling": (s.watch.polling, POLLING),
        "mem0.infer_without_llm": (s.mem0.infer_without_llm, INFER_WITHOUT_LLM),
    }
    for name, (value, allowed) in choices.items():
        if value not in allowed:
            hint = f" (did you mean {value.lower()!r}?)" if value.lower() in allowed else ""
            yield f"{name}: {value!r} is not one of {', '.join(allowed)}{hint}"
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
        "storage.ann_min_vectors": s.storage.ann_min_vectors,
        "storage.cache_mb": s.storage.cache_mb,
        "server.header_timeout_s": s.server.header_timeout_s,
        "server.idle_timeout_s": s.server.idle_timeout_s,
        "server.max_connections": s.server.max_connections,
        "server.body_timeout_s": s.server.body_timeout_s,
        "server.min_body_rate": s.server.min_body_rate,
        "server.stop_timeout_s": s.server.stop_timeout_s,
    }
    for name, number in positive.items():
        if number <= 0:
            yield f"{name}: must be positive, got {number}"
    if not 0 <= s.mem0.threshold_ceiling <= 1:
        yield f"mem0.threshold_ceiling: must be between 0 and 1, got {s.mem0.threshold_ceiling}"
    if not 0 <= s.strength.weight <= 1:
        yield f"strength.weight: must be between 0 and 1, got {s.strength.weight}"
    if not 0 <= s.strength.forget_below < 1:
        yield f"strength.forget_below: must be >= 0 and below 1, got {s.strength.forget_below}"
    if s.strength.forget_interval_s <= 0:
        yield f"strength.forget_interval_s: must be positive, got {s.strength.forget_interval_s}"
    yield from _strength_problems(s.strength)
    yield from _storage_problems(s.storage)
    yield from _search_problems(s.search)
    yield from _keyword_problems(s.keywords)
    if s.search.cache_size < 0:
        yield f"search.cache_size: must be >= 0, got {s.search.cache_size}"
    if s.search.recency_weight < 0:
        yield f"search.recency_weight: must be >= 0, got {s.search.recency_weight}"
    if not 0 <= s.index.overlap_tokens < s.index.chunk_tokens:
        yield "index.overlap_tokens: must be >= 0 and below index.chunk_tokens"
