"""PostgresRoles: a node's hold on its namespace's node roles, and its row in memcore_nodes.

The roles are a session advisory lock taken on a connection of the node's own. PostgreSQL
frees it the moment that connection ends: at once when the node's process dies (its socket
closes), and within ``LOST_AFTER_S`` when the network between them is lost (TCP keepalives
and the user timeout, set for the session). The node itself gives the roles up sooner than
that: a heartbeat that does not come back within ``BEAT_TIMEOUT_S`` makes ``beat`` say False,
so two nodes never act on the roles for long at once. (Nothing would break if they did: the
index's writes take turns under the namespace's write lock and are idempotent by content.)
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager, suppress

import psycopg

from memcore.core.errors import StorageBusy
from memcore.core.nodes import NodeCard, NodeInfo
from memcore.storage.postgres.server import lock_key, translate

log = logging.getLogger(__name__)

BEAT_TIMEOUT_S = 3.0  # a heartbeat slower than this: the roles may be lost, give them up
LOST_AFTER_S = 10  # the server drops a silent node's connection (and its lock) by then
ALIVE_S = 15.0  # a node row seen within this long is a live node
_SESSION = (  # the server notices a node that vanished from the network within ~LOST_AFTER_S
    "SET tcp_keepalives_idle = 3",
    "SET tcp_keepalives_interval = 2",
    "SET tcp_keepalives_count = 3",
    f"SET tcp_user_timeout = {LOST_AFTER_S * 1000}",  # PostgreSQL 12 and newer
)


def roles_key(namespace: str) -> int:
    return lock_key(f"roles:{namespace}")


def lock_columns(key: int) -> tuple[int, int]:
    """How pg_locks shows an advisory lock on a bigint: (classid, objid), its two halves."""
    return (key >> 32) & 0xFFFFFFFF, key & 0xFFFFFFFF


class PostgresRoles:
    """The node roles of one namespace, for the node ``card`` names. Constructing does no
    I/O; the first ``take`` connects (and registers the node), and a lost connection is
    made again by the next ``take``."""

    def __init__(self, url: str, namespace: str, card: NodeCard) -> None:
        self.url = url
        self.namespace = namespace
        self.card = card
        self.key = roles_key(namespace)
        self.held = False
        self._conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None

    async def take(self) -> bool:
        if not await self.beat() or self.held:
            return self.held
        try:
            conn = await self._connection()
            cur = await asyncio.wait_for(
                conn.execute("SELECT pg_try_advisory_lock(%s)", (self.key,)), BEAT_TIMEOUT_S
            )
            row = await cur.fetchone()
        except (psycopg.Error, OSError, TimeoutError) as exc:
            await self._lost(exc)
            return False
        self.held = bool(row and row[0])
        return self.held

    async def beat(self) -> bool:
        """Refresh the node's row; True while the node is in touch with the database. On the
        roles' own connection: a statement that returns proves that the session, and the
        lock it holds, are still there (a connection made again holds nothing: False for a
        node that held the roles on the old one)."""
        held = self.held
        try:
            conn = await self._connection()
            await asyncio.wait_for(
                conn.execute(
                    "UPDATE memcore_nodes SET seen_at = now() WHERE ns = %s AND node = %s",
                    (self.namespace, self.card.name),
                ),
                BEAT_TIMEOUT_S,
            )
        except (psycopg.Error, OSError, TimeoutError) as exc:
            await self._lost(exc)
            return False
        return self.held or not held

    async def give_up(self) -> None:
        if self.held and self._conn is not None and not self._conn.closed:
            with suppress(psycopg.Error, OSError, TimeoutError):
                await asyncio.wait_for(
                    self._conn.execute("SELECT pg_advisory_unlock(%s)", (self.key,)),
                    BEAT_TIMEOUT_S,
                )
        self.held = False

    async def aclose(self) -> None:
        await self.give_up()
        conn, self._conn = self._conn, None
        if conn is None or conn.closed:
            return
        with suppress(psycopg.Error, OSError, TimeoutError):
            await asyncio.wait_for(
                conn.execute(
                    "DELETE FROM memcore_nodes WHERE ns = %s AND node = %s",
                    (self.namespace, self.card.name),
                ),
                BEAT_TIMEOUT_S,
            )
        with suppress(psycopg.Error, OSError):
            await conn.close()

    async def _connection(self) -> psycopg.AsyncConnection[tuple[object, ...]]:
        if self._conn is not None and not self._conn.closed and not self._conn.broken:
            return self._conn
        self.held = False  # a new session holds no lock
        c = self.card
        conn = await psycopg.AsyncConnection.connect(
            self.url, autocommit=True, connect_timeout=int(BEAT_TIMEOUT_S) + 2,
            application_name=f"memcore node {c.name}"[:63],
            keepalives=1, keepalives_idle=3, keepalives_interval=2, keepalives_count=3,
        )  # fmt: skip
        try:
            for setting in _SESSION:
                with suppress(psycopg.Error):  # an older server lacks one: the rest still help
                    await conn.execute(setting.encode())
            await conn.execute(
                "INSERT INTO memcore_nodes (ns, node, host, pid, kind, url, backend_pid) "
                "VALUES (%s, %s, %s, %s, %s, %s, pg_backend_pid()) "
                "ON CONFLICT (ns, node) DO UPDATE SET backend_pid = excluded.backend_pid, "
                "url = excluded.url, seen_at = now()",
                (self.namespace, c.name, c.host, c.pid, c.kind, c.url),
            )
            await conn.execute(  # nodes that died long ago leave the list
                "DELETE FROM memcore_nodes WHERE ns = %s AND seen_at < now() - interval '1 day'",
                (self.namespace,),
            )
        except BaseException:
            with suppress(psycopg.Error, OSError):
                await conn.close()
            raise
        self._conn = conn
        return conn

    async def _lost(self, exc: BaseException) -> None:
        """The roles' connection failed: whatever it held, PostgreSQL frees with it."""
        if self.held:
            log.warning("lost the database connection that holds the node roles (%s)", exc)
        self.held = False
        conn, self._conn = self._conn, None
        if conn is not None:
            with suppress(psycopg.Error, OSError):
                await conn.close()


async def live_nodes(
    db: psycopg.AsyncConnection[tuple[object, ...]], namespace: str
) -> list[NodeInfo]:
    """The namespace's nodes seen lately, oldest first, each saying whether it holds the
    roles (its connection holds the lock in pg_locks: the truth, not what a row claims)."""
    classid, objid = lock_columns(roles_key(namespace))
    cur = await db.execute(
        "SELECT n.node, n.host, n.pid, n.kind, n.url, n.started_at, n.seen_at, "
        "EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted "
        "AND l.pid = n.backend_pid AND l.classid::bigint = %s AND l.objid::bigint = %s "
        "AND l.objsubid = 1) "
        "FROM memcore_nodes n WHERE n.ns = %s AND n.seen_at > now() - make_interval(secs => %s) "
        "ORDER BY n.started_at, n.node",
        (classid, objid, namespace, ALIVE_S),
    )
    nodes = []
    for name, host, pid, kind, url, started, seen, holds in await cur.fetchall():
        card = NodeCard(str(name), str(host), int(str(pid)), str(kind), str(url))
        nodes.append(NodeInfo(card, _iso(started), _iso(seen), bool(holds)))
    return nodes


def _iso(value: object) -> str:
    iso = getattr(value, "isoformat", None)
    return str(iso(timespec="seconds")) if iso is not None else str(value)


class FileHolds:
    """Vault files held for a write against every node of the namespace: a session advisory
    lock a file, taken with try-and-wait on one connection of this process's own (a blocking
    wait would hold the connection from every other file's holder meanwhile)."""

    def __init__(self, url: str, namespace: str, busy_timeout_s: float) -> None:
        self.url = url
        self.namespace = namespace
        self.busy_timeout_s = busy_timeout_s
        self._conn: psycopg.AsyncConnection[tuple[object, ...]] | None = None
        self._connecting = asyncio.Lock()

    @asynccontextmanager
    async def hold(self, paths: Sequence[str]) -> AsyncIterator[None]:
        # sorted: two nodes holding several files never wait for each other in a circle
        keys = sorted({lock_key(f"file:{self.namespace}:{p}") for p in paths})
        taken: list[int] = []
        try:
            conn = await self._connection()
            deadline = time.monotonic() + self.busy_timeout_s
            rest = keys
            while rest:
                got = await self._try_all(conn, rest)
                # the keys up to the first one another node holds are kept (a sorted prefix,
                # as one at a time would take them); those after it go back until it is free
                first = got.index(False) if False in got else len(got)
                taken += rest[:first]
                after = zip(rest[first:], got[first:], strict=True)
                await self._release([k for k, ok in after if ok])
                if first == len(rest):
                    break
                await self._take(conn, rest[first], deadline, paths)
                taken.append(rest[first])
                rest = rest[first + 1 :]
            yield
        except psycopg.Error as exc:
            raise translate(exc, "file lock") from exc
        finally:
            await self._release(taken)

    async def _try_all(
        self, conn: psycopg.AsyncConnection[tuple[object, ...]], keys: list[int]
    ) -> list[bool]:
        """Try each key once, in order, in one round trip (a write of 1,000 files asked
        1,000 times); whether each was taken."""
        cur = await conn.execute(
            "SELECT pg_try_advisory_lock(u.k) FROM unnest(%s::int8[]) WITH ORDINALITY "
            "AS u(k, n) ORDER BY u.n",
            (keys,),
        )
        return [bool(r[0]) for r in await cur.fetchall()]

    async def _take(
        self,
        conn: psycopg.AsyncConnection[tuple[object, ...]],
        key: int,
        deadline: float,
        paths: Sequence[str],
    ) -> None:
        delay = 0.002
        while True:
            cur = await conn.execute("SELECT pg_try_advisory_lock(%s)", (key,))
            row = await cur.fetchone()
            if row and row[0]:
                return
            if time.monotonic() > deadline:
                raise StorageBusy(
                    f"{', '.join(paths)} is being written by another memcore node; try again"
                )
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.05)

    async def _release(self, keys: list[int]) -> None:
        conn = self._conn
        if not keys or conn is None or conn.closed or conn.broken:
            return  # a connection that ended took its locks with it
        with suppress(psycopg.Error):
            await conn.execute(
                "SELECT pg_advisory_unlock(u.k) FROM unnest(%s::int8[]) AS u(k)", (keys,)
            )

    async def _connection(self) -> psycopg.AsyncConnection[tuple[object, ...]]:
        async with self._connecting:
            if self._conn is None or self._conn.closed or self._conn.broken:
                self._conn = await psycopg.AsyncConnection.connect(
                    self.url, autocommit=True, connect_timeout=10,
                    application_name="memcore file locks",
                )  # fmt: skip
            return self._conn

    async def aclose(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            with suppress(psycopg.Error, OSError):
                await conn.close()
