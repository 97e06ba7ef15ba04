"""No credential from any setting leaves `memcore serve` (#54): every setting that holds a URL
(found by walking the settings, so one added later is walked too) gets a password, every API
key variable a secret, and a live server with all of them set is asked for its status on every
front, searched (its warnings name the unreachable embedder), written to and made to fail;
none of the secrets shows in an answer, in .memcore/daemon.json, in `memcore status --json` or
in the server's log."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from memcore.core.redact import keep_secret, redact, redact_log_records, redacted
from memcore.core.settings import SECTIONS
from tests.support import free_port, wait_ready, write
from tests.test_via import mcp_call

URL_FIELDS = re.compile(r"(^|_)(url|host)$")


def url_settings() -> list[str]:
    """Every setting that can hold a URL: a text field named url, base_url, host ... (and
    storage.db, which may be a postgresql:// URL)."""
    found = ["storage.db"]
    for section, kind in SECTIONS.items():
        for f in dataclasses.fields(kind):
            if URL_FIELDS.search(f.name) and f.type in (str, "str"):
                found.append(f"{section}.{f.name}")
    return found


def key_variables() -> list[str]:
    """The settings that name an environment variable holding a key (``*.api_key_env``)."""
    return [
        f"{section}.{f.name}"
        for section, kind in SECTIONS.items()
        for f in dataclasses.fields(kind)
        if f.name.endswith("_env")
    ]


def test_the_walk_finds_every_url_and_key_setting() -> None:
    assert set(url_settings()) >= {
        "storage.url", "storage.db", "ollama.host", "openai.base_url", "llm.host",
        "llm.base_url", "memory.base_url",
    }  # fmt: skip
    assert set(key_variables()) >= {"openai.api_key_env", "llm.api_key_env", "memory.api_key_env"}


def with_password(url: str, secret: str) -> str:
    """``url`` with ``secret`` as its password (a trust-auth server ignores it)."""
    scheme, rest = url.split("://", 1)
    user_part, at, tail = rest.partition("@")
    if not at:
        return f"{scheme}://memcore:{secret}@{rest}"
    return f"{scheme}://{user_part.split(':')[0] or 'memcore'}:{secret}@{tail}"


def serve_with(vault: Path, env: dict[str, str]) -> tuple[dict[str, str], str]:
    """Run `memcore serve` on ``vault`` with ``env``; everything it let out: answers by name,
    then its log."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cmd = [sys.executable, "-m", "memcore", "--vault", str(vault), "serve", "--port", str(port),
           "--scoped-token-file", str(vault.parent / "tokens")]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    seen: dict[str, str] = {}
    try:
        assert wait_ready(url, 120)
        admin = {"Authorization": "Bearer admin-token-1"}
        scoped = {"Authorization": "Bearer alice-token-2"}
        with httpx.Client(base_url=url, timeout=60) as http:
            for name, who in (("status", admin), ("status_scoped", scoped)):
                seen[name] = http.get("/api/status", headers=who).text
            seen["page"] = http.get("/status", headers=admin).text
            seen["add"] = http.post(
                "/api/memories", json={"content": "Alice keeps bees"}, headers=scoped
            ).text
            for route in ("/api/memory/search", "/v1/memories/search/"):
                got = http.post(route, json={"query": "bees", "user_id": "alice"}, headers=admin)
                seen[route] = got.text + json.dumps(dict(got.headers))
            seen["context"] = http.post(
                "/api/memory/context", json={"query": "bees"}, headers=admin
            ).text
            seen["bad"] = http.post("/api/memories", json={"nope": 1}, headers=admin).text
        seen["mcp_status"] = asyncio.run(mcp_call(url, "admin-token-1", "status", {}))
        assert '"vault"' in seen["mcp_status"], seen["mcp_status"]
        status = subprocess.run(
            [sys.executable, "-m", "memcore", "--vault", str(vault), "status", "--json"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        seen["cli_status"] = status.stdout + status.stderr
        for n, found in enumerate(Path(env["XDG_RUNTIME_DIR"]).rglob("daemon.json")):
            seen[f"node daemon.json {n}"] = found.read_text()
        for n, found in enumerate(vault.rglob("daemon.json")):
            seen[f"daemon.json {n}"] = found.read_text()
    finally:
        proc.terminate()
        _, log = proc.communicate(timeout=60)
    return seen, log


def secrets_env(tmp_path: Path, vault: Path, secrets: dict[str, str]) -> dict[str, str]:
    (vault.parent / "tokens").write_text("alice-token-2=user_id:alice\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MEMCORE_", "OPENAI_"))}
    return env | {
        "HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "home" / "config"),
        "XDG_RUNTIME_DIR": str(tmp_path / "run"), "MEMCORE_TOKEN": "admin-token-1",
    } | secrets  # fmt: skip


def assert_nowhere(secrets: list[str], seen: dict[str, str], log: str) -> None:
    assert seen["status"].startswith("{") and "vault" in seen["status"], seen["status"]
    for name, text in [*seen.items(), ("serve log", log)]:
        for secret in secrets:
            assert secret not in text, f"{secret} in {name}: {text[:3000]}"


def test_no_credential_leaves_serve_on_sqlite(tmp_path: Path) -> None:
    """The OpenAI embedder and LLM (both unreachable, with passwords and keys), and every
    other URL setting holding a password though unused."""
    vault = tmp_path / "vault"
    write(vault, "MEMORY.md", "# M\n\nBees live on roofs.\n")
    dead = "127.0.0.1:9"
    pw = {name: f"pw-{name.replace('.', '-')}-{n}X7q" for n, name in enumerate(url_settings())}
    url_values = {
        "MEMCORE_OPENAI_BASE_URL": f"http://u:{pw['openai.base_url']}@{dead}/v1",
        "MEMCORE_LLM_BASE_URL": f"http://u:{pw['llm.base_url']}@{dead}/v1",
        "MEMCORE_OLLAMA_HOST": f"http://u:{pw['ollama.host']}@{dead}",
        "MEMCORE_LLM_HOST": f"http://u:{pw['llm.host']}@{dead}",
        "MEMCORE_MEMORY_BASE_URL": f"https://u:{pw['memory.base_url']}@example.invalid",
    }
    keys = {"OPENAI_API_KEY": "sk-openai-secret-1234", "LLM_KEY": "sk-llm-secret-5678",
            "MEM0_API_KEY": "m0-mem0-secret-9012"}  # fmt: skip
    env = secrets_env(tmp_path, vault, {
        **url_values, **keys,
        "MEMCORE_EMBEDDER_PROVIDER": "openai", "MEMCORE_LLM_PROVIDER": "openai",
        "MEMCORE_LLM_API_KEY_ENV": "LLM_KEY",
    })  # fmt: skip
    seen, log = serve_with(vault, env)
    assert "embedder" in seen["/api/memory/search"]  # the warning that named the URL
    used = [pw[k] for k in ("openai.base_url", "llm.base_url", "ollama.host", "llm.host",
                            "memory.base_url")]  # fmt: skip
    assert_nowhere([*used, *keys.values(), "admin-token-1", "alice-token-2"], seen, log)
    assert "u:***@" in seen["status"] or "u:***@" in seen["daemon.json 0"]  # masked, not lost


def test_no_credential_leaves_serve_on_postgres(tmp_path: Path, postgres_url: str) -> None:
    """PostgreSQL's URL with a password, Ollama's embedder and LLM, and the mem0 adapter
    (all unreachable but the database), each with a password or key."""
    vault = tmp_path / "vault"
    write(vault, "MEMORY.md", "# M\n\nBees live on roofs.\n")
    dead = "127.0.0.1:9"
    secrets = {"db": "pw-storage-url-4Fz", "ollama": "pw-ollama-host-8Kd",
               "llm": "pw-llm-host-2Wm", "mem0": "pw-memory-base-url-6Rt"}  # fmt: skip
    env = secrets_env(tmp_path, vault, {
        "MEMCORE_STORAGE_URL": with_password(postgres_url, secrets["db"]),
        "MEMCORE_STORAGE_NAMESPACE": "redaction",
        "MEMCORE_EMBEDDER_PROVIDER": "ollama",
        "MEMCORE_OLLAMA_HOST": f"http://u:{secrets['ollama']}@{dead}",
        "MEMCORE_LLM_PROVIDER": "ollama", "MEMCORE_LLM_HOST": f"http://u:{secrets['llm']}@{dead}",
        "MEMCORE_MEMORY_ADAPTER": "mem0",
        "MEMCORE_MEMORY_BASE_URL": f"http://u:{secrets['mem0']}@{dead}",
        "MEM0_API_KEY": "m0-adapter-secret-3456",
    })  # fmt: skip
    seen, log = serve_with(vault, env)
    assert_nowhere([*secrets.values(), "m0-adapter-secret-3456", "admin-token-1"], seen, log)


def test_redaction_masks_urls_in_text_and_kept_secrets_but_not_plain_words() -> None:
    keep_secret("tok-0123456789")
    keep_secret("short")  # too short to mask safely: words would vanish
    text = "at http://me:pw1@h:1/v1 and postgresql://u:p@/db?password=x&host=/s with tok-0123456789"
    assert redact(text) == (
        "at http://me:***@h:1/v1 and postgresql://u:***@/db?password=***&host=/s with ***"
    )
    assert redact("a short note") == "a short note"
    assert redacted({"a": ["http://x:y@h"], "n": 3}) == {"a": ["http://x:***@h"], "n": 3}


def test_log_records_are_redacted_with_their_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    import logging

    redact_log_records()
    log = logging.getLogger("memcore.test")
    try:
        raise OSError("cannot reach http://me:hunter22@127.0.0.1:9")
    except OSError:
        log.exception("embedder at %s failed", "http://me:hunter22@127.0.0.1:9")
    [record] = caplog.records
    assert "hunter22" not in record.getMessage() and "hunter22" not in (record.exc_text or "")
    assert "http://me:***@127.0.0.1:9" in record.getMessage()
