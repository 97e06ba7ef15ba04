"""strands' Mem0MemoryStore (mem0-strands) against memcore (``python drive_strands.py URL
TOKEN``): it takes a host."""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from mem0_strands import Mem0MemoryStore

url, token = sys.argv[1:3]


async def main() -> None:
    out: dict[str, Any] = {}
    cleo = Mem0MemoryStore(user_id="cleo", api_key=token, host=url, metadata={"team": "ops"})
    dev = Mem0MemoryStore(user_id="dev", api_key=token, host=url)
    out["add"] = await cleo.add("Cleo deploys on Tuesdays only")
    turn = {"role": "user", "content": [{"text": "Cleo prefers Terraform over Pulumi"}]}
    out["add_messages"] = await cleo.add_messages([turn])  # type: ignore[list-item]
    await dev.add("Dev deploys on Fridays")
    found = await cleo.search("When does Cleo deploy?")
    out["search"] = [[e.content, e.metadata] for e in found]
    client = cleo.client.mem0  # the store itself neither lists nor forgets
    out["list"] = client.get_all(filters={"user_id": "cleo"})
    out["delete_all"] = client.delete_all(user_id="cleo")
    out["left"] = client.get_all(filters={"user_id": "cleo"})
    out["other"] = [e.content for e in await dev.search("When does Dev deploy?")]
    print(json.dumps(out, default=str))  # noqa: T201 - the answer, for the test


asyncio.run(main())
