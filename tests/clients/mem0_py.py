"""Drive an installed Python ``mem0ai`` MemoryClient (any generation) against a memcore server,
as a migrating app would: ``python mem0_py.py URL TOKEN`` prints one JSON object, each call's
answer or the error the client raised (tests/test_mem0_clients.py reads it). Runs with the old
client first on sys.path (PYTHONPATH), so it imports nothing of memcore's."""

from __future__ import annotations

import inspect
import json
import sys
import warnings
from typing import Any

from mem0 import MemoryClient

warnings.simplefilter("ignore")  # old clients warn about their own deprecated defaults


def main(url: str, token: str) -> None:
    client = MemoryClient(api_key=token, host=url)
    out: dict[str, Any] = {"org": [client.org_id, client.project_id]}

    def call(name: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            out[name] = fn(*args, **kwargs)
        except Exception as exc:  # the client's own error for a 4xx/5xx: kept as text
            out[name] = {"error": f"{type(exc).__name__}: {exc}"}
        return out[name]

    msgs = [{"role": "user", "content": "Erin sails on weekends"}]
    call("add", client.add, msgs, user_id="erin", metadata={"topic": "sport"})
    for n in range(5):
        client.add([{"role": "user", "content": f"Frank fact {n}"}], user_id="frank")
    versions = "version" in inspect.signature(client.get_all).parameters
    if versions:  # 0.1.x: v1 by default, v2 on request
        call("list_v1", client.get_all, user_id="erin")
        call("search_v1", client.search, "sails", user_id="erin")
        v2: dict[str, Any] = {"version": "v2"}
    else:  # 1.0.x: always v2
        v2 = {}
    either = {"OR": [{"user_id": "erin"}, {"user_id": "frank"}]}
    call("list_v2", client.get_all, filters=either, page=2, page_size=4, **v2)
    scoped = call("list_v2_scope", client.get_all, user_id="frank", **v2)
    if "Top-level entity parameters" in str(scoped):  # 2.x takes the scope in filters only
        call("list_v2_scope", client.get_all, filters={"user_id": "frank"})
    call("search_v2", client.search, "sails", filters={"user_id": "erin"}, **v2)
    mid = out["add"]["results"][0]["id"] if "results" in out["add"] else out["add"][0]["id"]
    call("get", client.get, mid)
    call("update", client.update, mid, text="Erin sails often")
    call("history", client.history, mid)
    call("history_unknown", client.history, "m-0000000000000000")
    call("users", client.users)
    call("export", client.get_memory_export, user_id="erin")
    call("delete", client.delete, mid)
    call("delete_all", client.delete_all, user_id="frank")
    call("delete_users_none", client.delete_users, user_id="nobody")
    call("left", client.get_all, filters={"user_id": "erin"}, **v2)
    print(json.dumps(out))  # noqa: T201 - the answer, for the test


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
