"""A node of a shared index: it serves at once, and holds the node roles (the watcher with its
catch-up, expiry archiving, forgetting) whenever no other live node does.

Every node runs the same loop, so nodes start alike and replace each other: one that finds the
roles free takes them and goes on duty (Daemon.on_duty); the others stand by, asking again
every ``TAKEOVER_S``. The holder says it is alive every ``BEAT_S``; when it cannot (the
database is out of reach) it leaves its duty at once, since another node may have taken over.
A node that dies loses the roles with its database connection, and the first standby to ask
takes them and catches up with whatever changed meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from typing import TYPE_CHECKING, Protocol

from memcore.core.errors import StorageError

if TYPE_CHECKING:
    from memcore.service import MemoryService
    from memcore.storage.base import NodeRoles

log = logging.getLogger("memcore.fronts.node")


class Daemon(Protocol):
    """What a node needs of the daemon it runs (fronts/daemon.py)."""

    service: MemoryService
    stop: asyncio.Event
    role: str | None
    demoted: bool

    @property
    def ending(self) -> bool: ...

    @property
    def off_duty(self) -> bool: ...

    def publish(self) -> None: ...

    def demote(self) -> None: ...

    async def warm(self) -> None: ...

    async def on_duty(self) -> None: ...


TAKEOVER_S = 1.0  # a standby node asks for the roles this often
BEAT_S = 1.0  # the holder says it is alive this often


async def run_node(daemon: Daemon, roles: NodeRoles) -> None:
    """Stand by or hold the roles, until the daemon stops."""
    try:
        await daemon.warm()  # a standby node answers searches too: load what they need
        daemon.service.readiness.phase = "ready"  # the index is shared: it serves at once
        while not daemon.ending:
            if await roles.take():
                await _on_duty(daemon, roles)
                daemon.service.readiness.phase = "ready"  # a catch-up cut short: still serving
            elif daemon.role != "standby":
                daemon.role = "standby"
                daemon.publish()
                log.info("standing by: another node holds the node roles")
            await _pause(daemon, TAKEOVER_S)
    finally:
        await roles.aclose()


async def _on_duty(daemon: Daemon, roles: NodeRoles) -> None:
    daemon.role, daemon.demoted = "watcher", False
    daemon.publish()
    log.info("holding the node roles: watching, catching up, archiving and forgetting")
    beating = asyncio.create_task(_beat(daemon, roles))
    try:
        await daemon.on_duty()
    except* StorageError as failed:  # the database went away under the catch-up: stand by
        log.warning("left the watcher's work: %s", failed.exceptions[0])
        daemon.demote()
    finally:
        beating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await beating
        await roles.give_up()
        daemon.role = "standby"
        daemon.publish()
    if daemon.demoted:
        log.warning("gave up the node roles: the database did not answer; standing by")


async def _beat(daemon: Daemon, roles: NodeRoles) -> None:
    while not daemon.off_duty:
        await asyncio.sleep(BEAT_S)
        if not await roles.beat():
            daemon.demote()
            return


async def _pause(daemon: Daemon, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(daemon.stop.wait(), seconds)
