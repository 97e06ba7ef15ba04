from __future__ import annotations

import os
import threading
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from memcore.embedders.base import EmbeddingRunner
from memcore.service import MemoryService
from memcore.settings import Settings, load_settings
from memcore.storage.sqlite import SqliteStore
from tests.support import FakeEmbedder

REPO = Path(__file__).resolve().parent.parent
SAMPLE_VAULT = REPO / "sample_vault"


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


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    root = tmp_path / "vault"
    (root / "memory").mkdir(parents=True)
    return root


@pytest.fixture
def settings(vault: Path) -> Settings:
    return load_settings(vault)


@pytest.fixture
def embedder() -> FakeEmbedder:
    return FakeEmbedder()


def make_service(settings: Settings, embedder: FakeEmbedder) -> MemoryService:
    settings.state_dir.mkdir(exist_ok=True)
    return MemoryService(
        settings,
        SqliteStore(settings.db_path, busy_timeout_s=settings.storage.busy_timeout_s),
        EmbeddingRunner(embedder, retries=0),
    )


@pytest.fixture
async def service(settings: Settings, embedder: FakeEmbedder) -> AsyncIterator[MemoryService]:
    async with make_service(settings, embedder) as svc:
        yield svc
