"""The history says which front took each change (#54): through a `memcore serve` started from
the CLI, as people run it, memcore's HTTP API and Mem0's REST API say ``api``, MCP says
``agent``, the web page ``web`` and a CLI command sent to the running server ``cli``. The
server's own start (a CLI command) must not leak into what its requests change."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.support import free_port, wait_ready, write
from tests.test_web import csrf_of

TOKEN = "via-token-123"


async def mcp_call(url: str, token: str, tool: str, arguments: dict[str, Any]) -> str:
    """One tool call with the official MCP client over streamable HTTP; its text."""
    auth = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    async with auth, Client(streamable_http_client(url + "/mcp", http_client=auth)) as client:
        result = await client.call_tool(tool, arguments)
    return "".join(getattr(part, "text", "") for part in result.content)


def test_every_front_of_a_running_serve_names_itself_in_the_history(tmp_path: Path) -> None:
    vault = tmp_path / "vault"
    write(vault, "MEMORY.md", "# M\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMCORE_")}
    env |= {"MEMCORE_EMBEDDER_PROVIDER": "static", "MEMCORE_TOKEN": TOKEN}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    memcore = [sys.executable, "-m", "memcore", "--vault", str(vault)]
    proc = subprocess.Popen([*memcore, "serve", "--port", str(port)], env=env,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert wait_ready(url, 120)
        auth = {"Authorization": f"Bearer {TOKEN}"}
        with httpx.Client(base_url=url, headers=auth, timeout=60) as http:
            mem0 = {"messages": "from Mem0 REST", "user_id": "u1"}
            answers = {
                "api": http.post("/api/memories", json={"content": "from the HTTP API"}),
                "mem0": http.post("/v1/memories/", json=mem0),
            }
            ids = {k: r.json()["results"][0]["id"] for k, r in answers.items()}
            added = asyncio.run(mcp_call(url, TOKEN, "add", {"content": "from MCP"}))
            assert "from MCP" in added, added
            cli = subprocess.run([*memcore, "add", "from the CLI"], env=env,
                                 capture_output=True, text=True, timeout=120)  # fmt: skip
            assert cli.returncode == 0, cli.stderr
            listed = http.get("/api/memories", params={"limit": 50}).json()["results"]
            by_text = {m["memory"]: m["id"] for m in listed}
            ids["mcp"] = by_text["from MCP"]
            ids["cli"] = by_text["from the CLI"]
            with httpx.Client(base_url=url, timeout=60) as person:  # the page: a session
                assert person.post("/login", data={"token": TOKEN}).status_code == 303
                csrf = csrf_of(person.get(f"/memories/{ids['api']}").text)
                edit = {"csrf": csrf, "content": "edited on the page"}
                saved = person.post(f"/memories/{ids['api']}/edit", data=edit)
                assert saved.status_code == 303, saved.text
            history = {f: http.get(f"/api/memories/{m}/history").json() for f, m in ids.items()}
            vias = {f: [e["via"] for e in h["results"]] for f, h in history.items()}
    finally:
        proc.terminate()
        proc.communicate(timeout=60)
    assert vias == {"api": ["api", "web"], "mem0": ["api"], "mcp": ["agent"], "cli": ["cli"]}
