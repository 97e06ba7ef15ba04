"""llama-index-memory-mem0's Mem0Memory against memcore: ``python drive_llama_index.py URL
TOKEN`` prints what each call answered (tests/test_mem0_frameworks.py reads it). Its
``from_client`` passes org_id, which no mem0ai 2.x client takes, so the supported way is the
constructor with a ready client."""

from __future__ import annotations

import json
import sys

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import Memory
from llama_index.memory.mem0 import Mem0Memory
from mem0 import MemoryClient

url, token = sys.argv[1:3]
client = MemoryClient(api_key=token, host=url)


def memory(user: str) -> Mem0Memory:
    context = {"user_id": user}
    return Mem0Memory(primary_memory=Memory.from_defaults(), context=context, client=client)


lena = memory("lena")
lena.put(ChatMessage(role="user", content="Lena keeps bees on her roof in Lisbon"))
memory("omar").put(ChatMessage(role="user", content="Omar grows tomatoes in Porto"))
out = {"system": lena.get(input="Where does Lena keep her bees?")[0].content}
# Mem0Memory itself neither lists nor forgets: those go through the client it holds
out["list"] = client.get_all(filters={"user_id": "lena"})
out["delete_all"] = client.delete_all(user_id="lena")
out["left"] = client.get_all(filters={"user_id": "lena"})
out["other"] = client.get_all(filters={"user_id": "omar"})
print(json.dumps(out, default=str))  # noqa: T201 - the answer, for the test
