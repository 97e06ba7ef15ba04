"""A write is applied and acknowledged, or refused and not applied. Faults are real where they
can be: another process holding the index's write lock, an index whose inserts fail (a real
SQLite or PostgreSQL trigger), a file that would grow past the size limit; a full disk is a
patched fsync. After every refusal the vault is byte for byte what it was (the Markdown and
the history), and a retry with the same idempotency key applies once."""

from __future__ import annotations

import asyncio
import errno
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest

from memcore.compose import open_service
from memcore.core.errors import InputError, StorageBusy, StorageError, VaultWriteError
from memcore.core.settings import Settings, load_settings
from memcore.storage.postgres.server import lock_key
from memcore.vault import safe_file
from tests.conftest import make_service
from tests.support import FakeEmbedder


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, vault: Path) -> Settings:
    quick = {"storage.busy_timeout_s": 0.3, "index.max_file_bytes": 20_000}
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
        namespace = request.getfixturevalue("namespace")
        return load_settings(vault, {"storage.url": url, "storage.namespace": namespace, **quick})
    return load_settings(vault, quick)


def files_of(vault: Path) -> dict[str, bytes]:
    """Every file of the vault but the index: the Markdown, the history, any temp file."""
    return {
        p.relative_to(vault).as_posix(): p.read_bytes()
        for p in sorted(vault.rglob("*"))
        if p.is_file() and ".memcore" not in p.relative_to(vault).parts
    }


@contextmanager
def write_lock_held(settings: Settings) -> Iterator[None]:
    """Another process's write transaction, holding the index's write lock."""
    if settings.database_url:
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            conn.execute("SELECT pg_advisory_lock(%s)", (lock_key(settings.namespace),))
            yield
        return
    conn = sqlite3.connect(settings.db_path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        yield
    finally:
        conn.close()


@contextmanager
def inserts_failing(settings: Settings) -> Iterator[None]:
    """An index that takes no new chunk, as a broken one would: a trigger aborts the insert."""
    message = "database disk image is malformed"
    if settings.database_url:
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            conn.execute(
                "CREATE OR REPLACE FUNCTION memcore_test_boom() RETURNS trigger "
                f"LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION '{message}'; END $$"
            )
            conn.execute(
                "CREATE TRIGGER memcore_test_boom BEFORE INSERT ON memory_chunks FOR EACH ROW "
                f"WHEN (NEW.ns = '{settings.namespace}') EXECUTE FUNCTION memcore_test_boom()"
            )
            try:
                yield
            finally:
                conn.execute("DROP TRIGGER memcore_test_boom ON memory_chunks")
        return
    conn = sqlite3.connect(settings.db_path, isolation_level=None)
    try:
        conn.execute(
            "CREATE TRIGGER memcore_test_boom BEFORE INSERT ON memory_chunks "
            f"BEGIN SELECT RAISE(ABORT, '{message}'); END"
        )
        yield
    finally:
        conn.execute("DROP TRIGGER memcore_test_boom")
        conn.close()


async def test_a_busy_index_refuses_an_add_and_an_update_and_leaves_no_trace(
    backend: Settings, vault: Path
) -> None:
    async with make_service(backend, FakeEmbedder()) as svc:
        (first,) = await svc.memories.add("the build runs on Jenkins", user_id="alice")
        before = files_of(vault)
        with write_lock_held(backend):
            with pytest.raises(StorageBusy) as added:
                await svc.memories.add("lunch is at noon", user_id="alice", idempotency_key="r1")
            with pytest.raises(StorageBusy):
                await svc.memories.update(first.id, "the build runs on GitHub")
            with pytest.raises(StorageBusy):
                await svc.memories.delete(first.id)
        assert "nothing was written" in str(added.value) and "\n" not in str(added.value)
        assert files_of(vault) == before
        # the client retries with the same key: applied once
        again = await svc.memories.add("lunch is at noon", user_id="alice", idempotency_key="r1")
        once_more = await svc.memories.add(
            "lunch is at noon", user_id="alice", idempotency_key="r1"
        )
        assert [r.id for r in again] == [r.id for r in once_more]
        texts = [r.text for r in await svc.memories.get_all(user_id="alice")]
        assert texts == ["the build runs on Jenkins", "lunch is at noon"]
        assert [e["event"] for e in await svc.memories.history(again[0].id)] == ["ADD"]


async def test_an_index_that_fails_its_inserts_refuses_the_add_and_the_markdown_is_put_back(
    backend: Settings, vault: Path
) -> None:
    async with make_service(backend, FakeEmbedder()) as svc:
        await svc.memories.add("kept", user_id="alice")
        before = files_of(vault)
        with inserts_failing(backend), pytest.raises(StorageError) as err:
            await svc.memories.add("refused", user_id="alice")
        assert not isinstance(err.value, StorageBusy) and "\n" not in str(err.value)
        assert files_of(vault) == before
        assert [r.text for r in await svc.memories.get_all(user_id="alice")] == ["kept"]


async def test_a_full_disk_is_a_one_line_error_and_nothing_is_half_written(
    backend: Settings, vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with make_service(backend, FakeEmbedder()) as svc:
        await svc.memories.add("kept", user_id="alice")
        before = files_of(vault)

        def full(fd: int) -> None:
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(safe_file.os, "fsync", full)
        with pytest.raises(VaultWriteError) as err:
            await svc.memories.add("refused", user_id="alice")
        monkeypatch.undo()
        assert "No space left on device" in str(err.value) and "\n" not in str(err.value)
        assert files_of(vault) == before  # no temp file left either


@pytest.mark.parametrize(
    ("scope", "what"),
    [
        ({"user_id": "alice\n"}, "user_id"),
        ({"user_id": " "}, "user_id"),
        ({"agent_id": ""}, "agent_id"),
        ({"run_id": "a\x00b"}, "run_id"),
        ({"app_id": "x" * 257}, "app_id"),
    ],
)
async def test_bad_scope_names_are_refused_before_any_file_is_touched(
    vault: Path, settings: Settings, scope: dict[str, str], what: str
) -> None:
    async with make_service(settings, FakeEmbedder()) as svc:
        await svc.memories.add("kept")
        before = files_of(vault)
        with pytest.raises(InputError, match=what):
            await svc.memories.add("refused", **scope)  # type: ignore[arg-type]
        assert files_of(vault) == before


async def test_a_memory_that_would_push_its_file_past_the_size_limit_is_refused(
    backend: Settings, vault: Path
) -> None:
    async with make_service(backend, FakeEmbedder()) as svc:
        await svc.memories.add("kept", user_id="alice")
        before = files_of(vault)
        with pytest.raises(InputError, match="max_file_bytes"):
            await svc.memories.add("x" * 25_000, user_id="alice")
        assert files_of(vault) == before


# A process adding a memory with an idempotency key, killed with SIGKILL at a step of the write
# the test chooses (the step's function is patched to kill the process when it is reached).
CRASHING_ADD = """
import asyncio, os, signal, sys
from memcore import load_settings, open_service
from memcore.index import indexer
from memcore.memory import file_writes, writer
from memcore.vault import history

vault, step = sys.argv[1], sys.argv[2]

def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)

if step == "after-plan":  # PENDING logged, the Markdown not yet written
    file_writes.replace_if_unchanged = die
if step == "after-markdown":  # the Markdown written, its ADD not yet logged
    append = history.HistoryLog.append
    async def append_or_die(self, events, *args, **kwargs):
        if any(e.event == "ADD" for e in events):
            die()
        return await append(self, events, *args, **kwargs)
    history.HistoryLog.append = append_or_die
if step == "after-history":  # logged, not yet indexed
    index = indexer.Indexer.index
    async def index_or_die(self, paths=None, **kw):
        if kw.get("count_pending") is False:
            die()
        return await index(self, paths, **kw)
    indexer.Indexer.index = index_or_die
if step == "after-index":  # indexed, not yet answered
    records = writer.MemoryWriter.records
    async def records_or_die(self, ids, missing_ok=False, writing=False):
        if writing:
            die()
        return await records(self, ids, missing_ok, writing)
    writer.MemoryWriter.records = records_or_die

async def main():
    async with open_service(load_settings(vault, {"embedder.provider": "static"})) as svc:
        await svc.memories.add("lunch is at noon", user_id="alice", idempotency_key="k-1")
        await svc.memories.add("tea at four", user_id="alice", idempotency_key="k-2")

asyncio.run(main())
"""


@pytest.mark.parametrize("caught_up", [False, True], ids=["retried-first", "caught-up-first"])
@pytest.mark.parametrize("step", ["after-plan", "after-markdown", "after-history", "after-index"])
async def test_a_retry_after_kill_9_at_any_step_of_a_keyed_add_makes_one_memory(
    vault: Path, step: str, caught_up: bool
) -> None:
    """Issue 41: killed between the Markdown write and the history append, the memory survived
    as a person's edit without its key, and the retry added a second copy. Now the write is
    planned in the history first (PENDING), so a retry finds it wherever the crash left it:
    in the index, in its file only, or nowhere (written now, under the id it was meant to
    have). Retried from a fresh process, before or after a catch-up with the vault (the
    daemon restarting first)."""

    settings = load_settings(vault, {"embedder.provider": "static"})
    async with make_service(settings, FakeEmbedder()):
        pass  # an index exists: the retry below opens it without a catch-up
    crashed = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", CRASHING_ADD, str(vault), step],
        capture_output=True, timeout=120,
    )  # fmt: skip
    assert crashed.returncode == -9, crashed.stderr.decode()
    async with open_service(settings, catch_up=False) as svc:
        if caught_up:
            await svc.index()
        first = await svc.memories.add("lunch is at noon", user_id="alice", idempotency_key="k-1")
        again = await svc.memories.add("lunch is at noon", user_id="alice", idempotency_key="k-1")
        assert [r.id for r in first] == [r.id for r in again]
        assert first[0].text == "lunch is at noon"
        assert await svc.memories.count(user_id="alice") == 1
        await svc.index(full=True)  # what the daemon's catch-up would find: still one
        assert await svc.memories.count(user_id="alice") == 1
        history = await svc.memories.history(first[0].id)
        assert [e["event"] for e in history] == ["ADD"]  # one, the API's
        assert history[0]["actor"] == "api" and history[0]["new_memory"] == "lunch is at noon"
    markdown = (vault / "memory/users/alice/core.md").read_text()
    assert markdown.count("lunch is at noon") == 1 and first[0].id in markdown


@pytest.mark.parametrize(
    ("before", "after", "kept"),
    [
        (b"- a\n", b"- a\n- b\n", True),  # an append: cut back, no text kept
        (b"- a\n- b\n", b"- a\n- B\n", False),  # changed in place: the texts are kept
        (None, b"- a\n", True),  # created: removed
    ],
)
def test_an_undo_puts_back_what_a_write_changed_unless_a_person_saved_since(
    tmp_path: Path, before: bytes | None, after: bytes, kept: bool
) -> None:
    page = tmp_path / "core.md"
    undo = safe_file.Undo.of(before, after)
    assert (undo.before is None and undo.after is None) == kept  # small where it can be
    page.write_bytes(after)
    assert safe_file.restore_if_unchanged(page, undo)
    assert (page.read_bytes() if page.exists() else None) == before
    page.write_bytes(after + b"- a person's line\n")  # saved since: theirs stays
    assert not safe_file.restore_if_unchanged(page, undo)
    assert page.read_bytes() == after + b"- a person's line\n"
