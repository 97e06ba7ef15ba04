"""Nodes: the memcore processes (`serve`, `watch`) that share one index, as value types."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class NodeCard:
    """What a node says of itself to the others: ``name`` is ``host:pid``, unique among the
    live nodes of a database; ``url`` is where its HTTP API answers ("" for `watch`)."""

    name: str
    host: str
    pid: int
    kind: str  # "serve" or "watch"
    url: str = ""


def this_node(kind: str, url: str = "") -> NodeCard:
    host = socket.gethostname()
    return NodeCard(f"{host}:{os.getpid()}", host, os.getpid(), kind, url)


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A live node of the index as the database knows it (``status`` lists them)."""

    card: NodeCard
    started_at: str
    seen_at: str
    holds_roles: bool  # the watcher, catch-up, expiry archiving and forgetting are its

    def to_dict(self) -> dict[str, object]:
        c = self.card
        return {
            "node": c.name, "host": c.host, "pid": c.pid, "kind": c.kind, "url": c.url,
            "started_at": self.started_at, "seen_at": self.seen_at,
            "roles": self.holds_roles,
        }  # fmt: skip
