"""The mem0 adapter chosen where a person chooses it: the user config (``$MEMCORE_CONFIG`` or
``~/.config/memcore/config.toml``) or the environment, beside a vault whose own memcore.toml
may not choose it (nor an OpenAI embedder or LLM). With the adapter on, nothing leaves loopback:
the Mem0 client's telemetry is off before it is imported, and an audit hook proves it."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from memcore.compose import open_service
from memcore.core.errors import ConfigError
from memcore.core.settings import load_settings
from tests.test_http import server

CHOICES = [
    ("memory", "adapter", "mem0", "MEMCORE_MEMORY_ADAPTER"),
    ("embedder", "provider", "openai", "MEMCORE_EMBEDDER"),
    ("llm", "provider", "openai", "MEMCORE_LLM_PROVIDER"),
]


@pytest.fixture
def vault(tmp_path: Path) -> Path:
    """A vault with a memcore.toml of its own (which once made every choice below fail)."""
    root = tmp_path / "vault"
    (root / "memory").mkdir(parents=True)
    (root / "memcore.toml").write_text("[search]\nlimit = 7\n")
    return root


@pytest.mark.parametrize(("section", "key", "value", "variable"), CHOICES)
@pytest.mark.parametrize("source", ["MEMCORE_CONFIG", "XDG_CONFIG_HOME", "environment"])
def test_a_choice_that_leaves_the_machine_is_the_persons_own(
    vault: Path, tmp_path: Path, source: str, section: str, key: str, value: str, variable: str
) -> None:
    env = {"HOME": str(tmp_path)}
    config = f'[{section}]\n{key} = "{value}"\n'
    if source == "MEMCORE_CONFIG":
        (tmp_path / "mine.toml").write_text(config)
        env["MEMCORE_CONFIG"] = str(tmp_path / "mine.toml")
    elif source == "XDG_CONFIG_HOME":
        (tmp_path / "xdg" / "memcore").mkdir(parents=True)
        (tmp_path / "xdg" / "memcore" / "config.toml").write_text(config)
        env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    else:
        env[variable] = value
    settings = load_settings(vault, env=env)
    assert getattr(getattr(settings, section), key) == value
    assert settings.search.limit == 7  # the vault's own file still counts
    # the vault's own file may not make the same choice, whatever else is configured
    (vault / "memcore.toml").write_text(config)
    with pytest.raises(ConfigError, match="sends memory off this machine") as refused:
        load_settings(vault, env=env)
    assert str(refused.value).startswith(str(vault / "memcore.toml"))


# Run in a fresh interpreter: records every address a socket connects to or looks up, then
# runs memcore's own command line on the mem0 adapter (MEM0_TELEMETRY is not set).
DRIVER = """
import atexit, json, sys
seen = []
# registered first, so it runs last: after anything the client flushes at exit
atexit.register(lambda: print("SEEN " + json.dumps(sorted(set(seen))), file=sys.stderr))
def hook(event, args):
    if event == "socket.connect":
        seen.append(str(args[1][0]) if isinstance(args[1], tuple) else str(args[1]))
    elif event == "socket.getaddrinfo":
        seen.append(str(args[0]))
sys.addaudithook(hook)
from memcore.cli import main
for argv in json.loads(sys.argv[1]):
    try:
        main(argv)
    except SystemExit as exc:
        if exc.code:
            raise
"""


async def test_the_adapter_reaches_its_server_and_nothing_else(tmp_path: Path) -> None:
    remote_vault, vault = tmp_path / "remote", tmp_path / "vault"
    for v in (remote_vault, vault):
        (v / "memory").mkdir(parents=True)
        (v / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    async with (
        open_service(load_settings(remote_vault)) as remote,
        server(remote, token="remote-key") as url,
    ):
        (tmp_path / "config.toml").write_text(
            f'[memory]\nadapter = "mem0"\nbase_url = "{url}"\napi_key_env = "REMOTE_KEY"\n'
        )
        env = {k: v for k, v in os.environ.items() if k != "MEM0_TELEMETRY"}
        env |= {"MEMCORE_CONFIG": str(tmp_path / "config.toml"), "REMOTE_KEY": "remote-key",
                "HOME": str(tmp_path)}  # fmt: skip
        flags = ["--vault", str(vault)]
        argv = [[*flags, "add", "Ivy's renderer is Vulkan", "--user", "ivy"],
                [*flags, "list", "--user", "ivy", "--json"],
                [*flags, "search", "renderer", "--user", "ivy", "--json"]]  # fmt: skip
        run = await asyncio.to_thread(
            subprocess.run, [sys.executable, "-c", DRIVER, json.dumps(argv)],
            capture_output=True, text=True, timeout=120, env=env,
        )  # fmt: skip
        assert run.returncode == 0, run.stderr
        assert (await remote.memories.count(user_id="ivy")) == 1
    line = next(x for x in run.stderr.splitlines() if x.startswith("SEEN "))
    seen = set(json.loads(line[5:]))
    assert seen and seen <= {"127.0.0.1", "localhost", "::1"}, seen
    assert "posthog" not in run.stderr.lower()
