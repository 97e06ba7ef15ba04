"""Drives mem0-mcp-server's tools with the official MCP client, the server aimed at memcore
(``python drive_mem0_mcp.py URL TOKEN``); prints each tool's answers in call order."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

url, token = sys.argv[1:3]
HERE = os.path.dirname(os.path.abspath(__file__))


async def main() -> None:
    out: dict[str, list[Any]] = {}
    env = {**os.environ, "MEM0_API_KEY": token, "MEM0_DEFAULT_USER_ID": "mara"}
    server = os.path.join(HERE, "serve_mem0_mcp.py")
    params = StdioServerParameters(command=sys.executable, args=[server, url], env=env, cwd=HERE)
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        out["tools"] = sorted(t.name for t in (await session.list_tools()).tools)

        async def call(name: str, **args: Any) -> None:
            got = await session.call_tool(name, args)
            text = got.content[0].text if got.content else ""  # type: ignore[union-attr]
            try:
                value = json.loads(text)
            except ValueError:
                value = text
            out.setdefault(name, []).append({"is_error": got.isError, "value": value})

        await call("add_memory", text="Mara runs the night shift at the bakery")
        await call("add_memory", text="Nils runs the day shift at the bakery", user_id="nils")
        await call("search_memories", query="Who works nights at the bakery?")
        await call("get_memories")
        await call("list_entities")
        await call("delete_all_memories")
        await call("get_memories")
        await call("get_memories", filters={"user_id": "nils"})
    print(json.dumps(out, default=str))  # noqa: T201 - the answer, for the test


asyncio.run(main())
