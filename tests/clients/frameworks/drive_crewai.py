"""crewai's ExternalMemory on Mem0Storage against memcore (``python drive_crewai.py URL
TOKEN``), searching at crewai's default threshold (0.6). Mem0Storage builds
``MemoryClient(api_key=...)`` itself: hosted.aim points its module at memcore first."""

from __future__ import annotations

import json
import sys
from typing import Any

import crewai.memory.storage.mem0_storage as integration
from crewai.memory.external.external_memory import ExternalMemory
from hosted import aim

url, token = sys.argv[1:3]
aim(integration, url)


def memory(user: str) -> Any:
    config = {"user_id": user, "api_key": token}
    # a Crew calls set_crew on the memory it is given, which builds the storage
    return ExternalMemory(embedder_config={"provider": "mem0", "config": config}).set_crew(None)


kim, lou = memory("kim"), memory("lou")
kim.save("Kim's flight to Oslo leaves at 7:40 on Monday", metadata={"task": "travel"})
lou.save("Lou's flight to Rome leaves on Friday")
out = {"search": kim.search("When does Kim's flight to Oslo leave?")}
client = kim.storage.memory  # Mem0Storage lists and forgets through its client
out["list"] = client.get_all(version="v2", filters={"user_id": "kim"})
out["delete_all"] = client.delete_all(user_id="kim")
out["left"] = client.get_all(version="v2", filters={"user_id": "kim"})
out["other"] = lou.search("When does Lou fly to Rome?")
print(json.dumps(out, default=str))  # noqa: T201 - the answer, for the test
