"""The write transaction's SQL (SqliteWriter): files' rows replaced or deleted, vectors set
and cached, on the writer connection, one hand-off a step."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import aiosqlite

from memcore.core.models import Chunk, FileState, SkippedFile
from memcore.core.vectors import encode_vector
from memcore.storage.base import FileRows, Vector
from memcore.storage.rows import now
from memcore.storage.sqlite import file_rows
from memcore.storage.sqlite.file_rows import BATCH, marks
from memcore.storage.sqlite.snapshot import Queries


class SqliteWriter(Queries, file_rows.Changes):
    """The write transaction in progress. Records which vectors it added and removed
    (``file_rows.Changes``), so the store can update its matrices once it has committed. A
    file's rows are replaced or deleted in one hand-off to the connection's thread."""

    def __init__(self, conn: aiosqlite.Connection) -> None:
        Queries.__init__(self, conn)
        file_rows.Changes.__init__(self)

    async def file_state(self, path: str) -> FileState | None:
        rows = await self._all(
            "SELECT path, content_hash, size, mtime_ns FROM files WHERE path = ?", (path,)
        )
        return FileState(*rows[0]) if rows else None

    async def replace_file(
        self,
        state: FileState,
        chunks: Sequence[Chunk],
        vectors: Sequence[Vector | None],
        model_id: str,
        unchanged: int = 0,
        stored_hash: str | None = None,
    ) -> list[int]:
        return await file_rows.on_thread(
            self.conn, file_rows.replace_file, self, state, chunks, vectors, model_id,
            unchanged, stored_hash,
        )  # fmt: skip

    async def replace_files(self, files: Sequence[FileRows], model_id: str) -> list[str]:
        return await file_rows.on_thread(self.conn, file_rows.replace_files, self, files, model_id)

    async def touch_file(self, state: FileState) -> None:
        await file_rows.on_thread(self.conn, file_rows.touch_file, state)

    async def set_skipped(self, files: Sequence[SkippedFile]) -> None:
        await self.conn.executemany(
            "INSERT INTO skipped_files (path, reason, size, mtime_ns, since) "
            "VALUES (?, ?, ?, ?, ?) ON CONFLICT(path) DO UPDATE SET reason=excluded.reason, "
            "size=excluded.size, mtime_ns=excluded.mtime_ns",
            [(f.path, f.reason, f.size, f.mtime_ns, now()) for f in files],
        )

    async def delete_files(self, paths: Sequence[str]) -> int:
        return await file_rows.on_thread(self.conn, file_rows.delete_files, self, paths)

    async def set_vectors(self, vectors: Sequence[tuple[int, str, Vector]], model_id: str) -> int:
        wanted = {cid: (h, v) for cid, h, v in vectors}
        current: dict[int, str] = {}
        ids = list(wanted)
        for i in range(0, len(ids), BATCH):
            part = ids[i : i + BATCH]
            sql = f"SELECT id, content_hash FROM memory_chunks WHERE id IN ({marks(len(part))})"
            current.update((r[0], r[1]) for r in await self._all(sql, part))
        fresh = [(cid, v) for cid, (h, v) in wanted.items() if current.get(cid) == h]
        if not fresh:
            return 0
        self.chunks_changed = True
        ids = [cid for cid, _ in fresh]  # another model's vectors, replaced now, are kept
        await file_rows.on_thread(self.conn, file_rows.keep_vectors, ids)
        await self.conn.executemany(
            "UPDATE memory_chunks SET embedding = ?, embedding_model = ? WHERE id = ?",
            [(encode_vector(v), model_id, cid) for cid, v in fresh],
        )
        self.removed += [cid for cid, _ in fresh]  # a vector of another model goes away
        self.added += [(cid, model_id, v) for cid, v in fresh]
        return len(fresh)

    async def cache_vectors(self, vectors: Mapping[str, Vector], model_id: str) -> None:
        if not vectors:
            return
        stamp = now()
        await self.conn.executemany(
            "INSERT OR REPLACE INTO embedding_cache VALUES (?, ?, ?, ?)",
            [(h, model_id, encode_vector(v), stamp) for h, v in vectors.items()],
        )

    async def supply_vectors(self, vectors: Mapping[str, Vector], model_id: str) -> int:
        await self.cache_vectors(vectors, model_id)
        hashes = list(vectors)
        holders: list[tuple[int, str, Vector]] = []
        for i in range(0, len(hashes), BATCH):
            part = hashes[i : i + BATCH]
            rows = await self._all(
                f"SELECT id, content_hash FROM memory_chunks WHERE content_hash IN "
                f"({marks(len(part))})",
                part,
            )
            holders += [(cid, h, vectors[h]) for cid, h in rows]
        return await self.set_vectors(holders, model_id)

    async def set_meta(self, key: str, value: str) -> None:
        await self.conn.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, value)
        )
