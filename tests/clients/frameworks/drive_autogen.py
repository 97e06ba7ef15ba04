"""autogen-ext's Mem0Memory against memcore (``python drive_autogen.py URL TOKEN``). It builds
``MemoryClient(api_key=...)`` itself, so hosted.aim points its module at memcore first."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import autogen_ext.memory.mem0._mem0 as integration
from autogen_core.memory import MemoryContent
from autogen_ext.memory.mem0 import Mem0Memory
from hosted import aim

url, token = sys.argv[1:3]
aim(integration, url)


async def main() -> None:
    out: dict[str, Any] = {}
    ana = Mem0Memory(user_id="ana", is_cloud=True, api_key=token)
    ben = Mem0Memory(user_id="ben", is_cloud=True, api_key=token)
    fact = MemoryContent(content="Ana is allergic to peanuts", mime_type="text/plain",
                         metadata={"kind": "health"})  # fmt: skip
    await ana.add(fact)
    await ben.add(MemoryContent(content="Ben plays the cello", mime_type="text/plain"))
    found = await ana.query("What is Ana allergic to?")
    out["query"] = [[r.content, r.metadata] for r in found.results]
    await ana.clear()
    out["left"] = [r.content for r in (await ana.query("allergic")).results]
    out["other"] = [r.content for r in (await ben.query("What does Ben play?")).results]
    print(json.dumps(out, default=str))  # noqa: T201 - the answer, for the test


asyncio.run(main())
