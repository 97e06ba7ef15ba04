from __future__ import annotations

import hashlib
import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from memcore.compose import build_store
from memcore.core.settings import Settings, load_settings
from memcore.embedders.base import EmbeddingRunner
from memcore.service import MemoryService
from tests.pg_server import NoServer, running_server
from tests.support import FakeEmbedder

REPO = Path(__file__).resolve().parent.parent
SAMPLE_VAULT = REPO / "sample_vault"
POSTGRES_USED: list[str] = []  # the versions postgres_url started, for the summary


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    """No test sees the developer's config, home or MEMCORE_* variables."""
    for name in list(os.environ):
        if name.startswith(("MEMCORE_", "OPENAI_", "OLLAMA_")):
            monkeypatch.delenv(name)
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / ".cache"))
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path_factory.mktemp("run")))  # nodes' folders


@pytest.fixture(autouse=True)
def no_leaked_threads() -> Iterator[None]:
    """A test must not leave a non-daemon thread behind (an unclosed database connection, say):
    one such thread keeps the test run from ever exiting."""
    before = set(threading.enumerate())
    yield
    deadline = time.monotonic() + 5
    while True:
        leaked = [
            t for t in threading.enumerate() if t not in before and t.is_alive() and not t.daemon
        ]
        if not leaked or time.monotonic() > deadline:
            break
        time.sleep(0.05)
    assert not leaked, f"threads left running: {[t.name for t in leaked]}"


@pytest.fixture(scope="session")
def postgres_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real PostgreSQL with pgvector, one for the session (see tests/pg_server.py for which).
    Tests isolate themselves by namespace, as vaults sharing a database do. No usable server is
    a failure that says how to get one, never a skip."""
    try:
        with running_server(tmp_path_factory.mktemp("pg")) as (url, versions):
            POSTGRES_USED.append(versions)
            yield url
    except NoServer as exc:
        pytest.fail(str(exc), pytrace=False)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Say which PostgreSQL the run's PostgreSQL tests met (two pgvector generations exist)."""
    for versions in POSTGRES_USED:
        terminalreporter.write_line(f"PostgreSQL tests ran on {versions}")


@pytest.fixture
def namespace(request: pytest.FixtureRequest) -> str:
    """A namespace of its own for each test (and parameter)."""
    digest = hashlib.sha256(request.node.nodeid.encode()).hexdigest()[:16]
    return f"t-{digest}"


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    root = tmp_path / "vault"
    (root / "memory").mkdir(parents=True)
    return root


@pytest.fixture
def settings(vault: Path) -> Settings:
    return load_settings(vault)


def on_backend(request: pytest.FixtureRequest, vault: Path) -> Settings:
    """Settings for a fixture parametrized "sqlite" / "postgres": the vault's own SQLite
    index, or a namespace of its own in the test PostgreSQL."""
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        namespace = request.getfixturevalue("namespace")
        return load_settings(vault, {"storage.url": url, "storage.namespace": namespace})
    return load_settings(vault)


@pytest.fixture
def embedder() -> FakeEmbedder:
    return FakeEmbedder()


def make_service(settings: Settings, embedder: FakeEmbedder) -> MemoryService:
    """The service on the configured backend (SQLite, or PostgreSQL with storage.url)."""
    settings.state_dir.mkdir(exist_ok=True)
    return MemoryService(settings, build_store(settings), EmbeddingRunner(embedder, retries=0))


def backend_env(settings: Settings) -> dict[str, str]:
    """Variables that send another process to the same index as ``settings``."""
    if not settings.database_url:
        return {}
    return {
        "MEMCORE_STORAGE_URL": settings.database_url,
        "MEMCORE_STORAGE_NAMESPACE": settings.namespace,
    }


@pytest.fixture
async def service(settings: Settings, embedder: FakeEmbedder) -> AsyncIterator[MemoryService]:
    async with make_service(settings, embedder) as svc:
        yield svc
