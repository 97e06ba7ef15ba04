"""The MCP server, driven by the official SDK's own client over streamable HTTP and stdio."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import httpx2
from mcp import Client
from mcp.client.stdio import StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from memcore.service import MemoryService
from tests.support import write
from tests.test_http import server


def payload(result: Any) -> Any:
    """A tool result's value (structured when the tool returns one, else its text)."""
    assert not result.is_error, result.content
    if result.structured_content is not None:
        value = result.structured_content
        return value.get("result", value) if isinstance(value, dict) else value
    return json.loads(result.content[0].text)


async def test_tools_over_streamable_http(vault: Path, service: MemoryService) -> None:
    write(vault, "MEMORY.md", "# Engine\n\nDiveAdstra uses DX12 by default.\n")
    await service.index()
    auth = httpx2.AsyncClient(headers={"Authorization": "Bearer mcp-t"}, timeout=30)
    async with (
        server(service, token="mcp-t") as url,
        auth,
        Client(streamable_http_client(url + "/mcp", http_client=auth)) as client,
    ):
        if True:  # keeps the tool calls below at one indentation
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"search", "context", "add", "get", "list", "update", "forget",
                    "history"} <= names  # fmt: skip
            added = payload(await client.call_tool("add", {"content": "Alice likes tea",
                                                           "user_id": "alice"}))  # fmt: skip
            mid = added[0]["id"]
            found = payload(await client.call_tool("search", {"query": "tea", "user_id": "alice"}))
            assert [r["id"] for r in found] == [mid]
            block = await client.call_tool("context", {"query": "DX12", "min_score": 0})
            assert block.content[0].text.startswith("## Relevant Memories")
            change = {"memory_id": mid, "content": "Alice likes green tea"}
            payload(await client.call_tool("update", change))
            events = payload(await client.call_tool("history", {"memory_id": mid}))
            assert [e["event"] for e in events] == ["ADD", "UPDATE"]
            bad = await client.call_tool("add", {"content": "x", "user_id": "../etc"})
            assert bad.is_error and "not a valid name" in bad.content[0].text
            gone = await client.call_tool("forget", {"memory_id": mid})
            assert gone.content[0].text == f"forgot {mid}"
    assert await service.memories.count() == 0


async def test_tools_over_stdio(vault: Path) -> None:
    write(vault, "MEMORY.md", "# Engine\n\nDiveAdstra uses DX12 by default.\n")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "memcore", "--vault", str(vault), "mcp"],
        env={**os.environ, "MEMCORE_EMBEDDER_PROVIDER": "static"},
    )
    async with Client(params) as client:
        added = payload(await client.call_tool("add", {"content": "Bob plays chess",
                                                       "user_id": "bob"}))  # fmt: skip
        listed = payload(await client.call_tool("list", {"user_id": "bob"}))
        assert [r["id"] for r in listed] == [added[0]["id"]]
        found = payload(await client.call_tool("search", {"query": "chess", "user_id": "bob"}))
        assert found[0]["memory"] == "Bob plays chess"
    assert "Bob plays chess" in (vault / "memory" / "users" / "bob" / "core.md").read_text()


async def test_many_tool_calls_at_once_over_http(service: MemoryService) -> None:
    async with server(service) as url, Client(url + "/mcp") as client:

        async def add(i: int) -> str:
            added = payload(await client.call_tool("add", {"content": f"parallel {i}",
                                                           "user_id": "p"}))  # fmt: skip
            return str(added[0]["id"])

        async def search(i: int) -> None:
            payload(await client.call_tool("search", {"query": f"parallel {i}"}))

        ids = await asyncio.gather(*(add(i) for i in range(12)), *(search(i) for i in range(12)))
        listed = payload(await client.call_tool("list", {"user_id": "p", "limit": 100}))
    assert {r["id"] for r in listed} == set(ids[:12])
