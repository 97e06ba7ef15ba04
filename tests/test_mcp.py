"""The MCP server, driven by the official SDK's own client over streamable HTTP and stdio."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any
from unittest.mock import ANY

import httpx2
import pytest
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
                    "write_memory", "history"} <= names  # fmt: skip
            added = payload(await client.call_tool("add", {"content": "Alice likes tea",
                                                           "user_id": "alice"}))  # fmt: skip
            mid = added[0]["id"]
            found = payload(await client.call_tool("search", {"query": "tea", "user_id": "alice"}))
            assert [r["id"] for r in found["results"]] == [mid] and found["warnings"] == []
            block = await client.call_tool("context", {"query": "DX12", "min_score": 0})
            assert block.content[0].text.startswith("## Relevant Memories")
            change = {"memory_id": mid, "content": "Alice likes green tea"}
            payload(await client.call_tool("update", change))
            events = payload(await client.call_tool("history", {"memory_id": mid}))
            assert [e["event"] for e in events] == ["ADD", "UPDATE"]
            keyed = {"content": "Alice likes tea", "user_id": "alice", "idempotency_key": "k"}
            kept = payload(await client.call_tool("add", keyed))[0]["id"]
            reused = await client.call_tool("add", {**keyed, "content": "Alice likes coffee"})
            assert reused.is_error and "used with another request" in reused.content[0].text
            await client.call_tool("forget", {"memory_id": kept})
            bad = await client.call_tool("add", {"content": "x", "user_id": " "})
            assert bad.is_error and "user_id is empty" in bad.content[0].text
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
        assert found["results"][0]["memory"] == "Bob plays chess"
    assert "Bob plays chess" in (vault / "memory" / "users" / "bob" / "core.md").read_text()


@pytest.mark.parametrize(
    ("tool", "arguments", "message"),
    [
        ("search", {"query": "x", "limit": -1}, "search: limit: Input should be greater than"),
        ("search", {"query": "x", "limit": "?"}, "search: limit: Input should be a valid integer"),
        ("search", {"query": "x", "limit": 1001}, "search: limit: Input should be less than"),
        ("search", {"query": "x", "threshold": 2}, "search: threshold: Input should be less"),
        ("search", {"query": "x", "since": "soon"}, "since must be a date"),
        ("search", {}, "search: missing field(s): query"),
        ("list", {"offset": -5}, "list: offset: Input should be greater than or equal to 0"),
        ("forget", {}, "forget needs memory_id, memory_ids, or key"),
        ("get", {"memory_id": "m-nope"}, "no memory"),
    ],
)  # fmt: skip
async def test_tool_errors_are_one_line_and_change_nothing(
    service: MemoryService, tool: str, arguments: dict[str, Any], message: str
) -> None:
    await service.memories.add("Carol runs", user_id="carol")
    async with server(service) as url, Client(url + "/mcp") as client:
        result = await client.call_tool(tool, arguments)
        assert result.is_error
        text = result.content[0].text
        assert message in text and "\n" not in text, text
    assert await service.memories.count() == 1


async def test_server_names_its_version_and_reports_status(service: MemoryService) -> None:
    from memcore import __version__

    async with server(service) as url, Client(url + "/mcp") as client:
        assert client.server_info is not None and client.server_info.version == __version__
        status = payload(await client.call_tool("status", {}))
        assert status["readiness"] == {"phase": "ready", "files_done": 0, "files_total": 0}
        assert status == {**(await service.status_document()), "last_indexed": ANY}


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
