"""agno's Mem0Tools against memcore (``python drive_agno.py URL TOKEN``), with its default
``infer=True``. It builds ``MemoryClient(api_key=...)`` itself: hosted.aim points it first."""

from __future__ import annotations

import json
import sys

import agno.tools.mem0 as integration
from agno.run import RunContext
from agno.tools.mem0 import Mem0Tools
from hosted import aim

url, token = sys.argv[1:3]
aim(integration, url)
ivy, jon = Mem0Tools(api_key=token, user_id="ivy"), Mem0Tools(api_key=token, user_id="jon")
run = RunContext(run_id="r1", session_id="s1")
out = {"add": json.loads(ivy.add_memory(run, "Ivy's cat is called Miso"))}
jon.add_memory(run, {"pet": "dog", "name": "Rex"})
out["search"] = json.loads(ivy.search_memory(run, "What is the name of Ivy's cat?"))
out["list"] = json.loads(ivy.get_all_memories(run))
out["delete_all"] = ivy.delete_all_memories(run)
out["left"] = json.loads(ivy.get_all_memories(run))
out["other"] = json.loads(jon.get_all_memories(run))
print(json.dumps(out, default=str))  # noqa: T201 - the answer, for the test
