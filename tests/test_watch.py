"""The daemon with real watchdog observers on temp vaults, and real SQLite."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from watchdog.observers import Observer

from memcore.core.errors import DaemonError
from memcore.core.settings import Settings, WatchSettings, load_settings
from memcore.fronts.daemon import Daemon
from memcore.fronts.daemon_state import daemon_status
from memcore.service import MemoryService
from tests.conftest import make_service
from tests.support import FakeEmbedder, write

FAST = WatchSettings(debounce_ms=60, max_delay_ms=500, poll_interval_s=0.2, retry_pending_s=0.2)


def fast(settings: Settings) -> Settings:
    return dataclasses.replace(settings, watch=FAST)


def indexed(settings: Settings) -> dict[str, int]:
    with sqlite3.connect(settings.db_path) as conn:
        rows = conn.execute("SELECT source_file, count(*) FROM memory_chunks GROUP BY source_file")
        return dict(rows.fetchall())


def contents(settings: Settings) -> str:
    with sqlite3.connect(settings.db_path) as conn:
        return "\n".join(r[0] for r in conn.execute("SELECT content FROM memory_chunks"))


async def until(predicate: Callable[[], bool], within: float = 10.0) -> None:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if predicate():
            return
        await asyncio.sleep(0.05)
    assert predicate(), "condition not reached in time"


@asynccontextmanager
async def running(
    settings: Settings, embedder: FakeEmbedder | None = None, **kw: object
) -> AsyncIterator[tuple[Daemon, MemoryService]]:
    async with make_service(settings, embedder or FakeEmbedder()) as svc:
        daemon = Daemon(settings, svc, asyncio.Event(), **kw)  # type: ignore[arg-type]
        task = asyncio.create_task(daemon.run())
        await until(lambda: daemon.last_update is not None and daemon._watcher is not None)
        await asyncio.sleep(0.1)  # observers are live
        try:
            yield daemon, svc
        finally:
            daemon.stop.set()
            await asyncio.wait_for(task, 10)


async def test_create_modify_delete_are_followed(vault: Path, settings: Settings) -> None:
    s = fast(settings)
    async with running(s):
        write(vault, "memory/new.md", "# New\n\nfirst version\n")
        await until(lambda: "first version" in contents(s))
        write(vault, "memory/new.md", "# New\n\nsecond version\n")
        await until(lambda: "second version" in contents(s) and "first version" not in contents(s))
        (vault / "memory" / "new.md").unlink()
        await until(lambda: "memory/new.md" not in indexed(s))


async def test_atomic_saves_by_rename_are_followed(vault: Path, settings: Settings) -> None:
    s = fast(settings)
    write(vault, "MEMORY.md", "# M\n\noriginal\n")
    write(vault, "memory/note.md", "# N\n\noriginal note\n")
    async with running(s):
        # VS Code / JetBrains / Obsidian: write a temp file, rename it over the original
        write(vault, "memory/.note.md.tmp-1234", "# N\n\nsaved atomically\n")
        os.replace(vault / "memory" / ".note.md.tmp-1234", vault / "memory" / "note.md")
        # vim: probe file 4913, back up by rename to ~, write a fresh file, drop the backup
        write(vault, "4913", "")
        (vault / "4913").unlink()
        os.rename(vault / "MEMORY.md", vault / "MEMORY.md~")
        write(vault, "MEMORY.md", "# M\n\nvim wrote this\n")
        (vault / "MEMORY.md~").unlink()
        await until(lambda: "saved atomically" in contents(s) and "vim wrote this" in contents(s))
        assert set(indexed(s)) == {"MEMORY.md", "memory/note.md"}


async def test_renames_and_moves_in_and_out(
    vault: Path, settings: Settings, tmp_path: Path
) -> None:
    s = fast(settings)
    write(vault, "memory/a.md", "# A\n\nalpha\n")
    outside = tmp_path / "outside"
    write(outside, "incoming.md", "# In\n\nmoved in\n")
    async with running(s):
        os.rename(vault / "memory" / "a.md", vault / "memory" / "b.md")
        await until(lambda: set(indexed(s)) == {"memory/b.md"})
        shutil.move(str(outside / "incoming.md"), vault / "memory" / "incoming.md")
        await until(lambda: "memory/incoming.md" in indexed(s))
        shutil.move(str(vault / "memory" / "b.md"), outside / "b.md")
        await until(lambda: set(indexed(s)) == {"memory/incoming.md"})


async def test_directory_moves_and_deletes(vault: Path, settings: Settings) -> None:
    s = fast(settings)
    for i in range(3):
        write(vault, f"memory/projects/p{i}.md", f"# P{i}\n\nproject {i}\n")
    async with running(s):
        (vault / "memory" / "archive").mkdir()
        os.rename(vault / "memory" / "projects", vault / "memory" / "archive" / "projects")
        want = {f"memory/archive/projects/p{i}.md" for i in range(3)}
        await until(lambda: set(indexed(s)) == want)
        write(vault, "memory/archive/projects/p3.md", "# P3\n\nnew in moved folder\n")
        await until(lambda: "memory/archive/projects/p3.md" in indexed(s))
        shutil.rmtree(vault / "memory" / "archive")
        await until(lambda: indexed(s) == {})


async def test_memory_folder_created_after_start_is_watched(tmp_path: Path) -> None:
    vault = tmp_path / "late"
    vault.mkdir()
    s = fast(load_settings(vault))
    async with running(s):
        write(vault, "memory/2024-01-01.md", "# Day\n\nwritten into a new folder\n")
        await until(lambda: "memory/2024-01-01.md" in indexed(s))
        write(vault, "memory/2024-01-02.md", "# Day\n\nsecond file\n")
        await until(lambda: "memory/2024-01-02.md" in indexed(s))


async def test_truncate_and_rewrite(vault: Path, settings: Settings) -> None:
    s = fast(settings)
    write(vault, "MEMORY.md", "# M\n\n" + "old words " * 200 + "\n")
    async with running(s):
        with (vault / "MEMORY.md").open("r+") as fh:
            fh.truncate(0)
            fh.flush()
            fh.write("# M\n\nrewritten in place\n")
        await until(
            lambda: (
                contents(s).strip().endswith("rewritten in place")
                and "old words" not in contents(s)
            )
        )


async def test_temp_and_swap_files_are_ignored(vault: Path, settings: Settings) -> None:
    s = fast(settings)
    async with running(s):
        for name in (
            ".MEMORY.md.swp",
            "MEMORY.md~",
            "memory/x.md.tmp",
            "memory/4913",
            "memory/#x.md#",
        ):
            write(vault, name, "# T\n\ntemp\n")
        write(vault, "memory/real.md", "# R\n\nreal\n")
        await until(lambda: "memory/real.md" in indexed(s))
        await asyncio.sleep(0.3)
        assert set(indexed(s)) == {"memory/real.md"}


async def test_a_burst_of_1000_files_is_absorbed(vault: Path, settings: Settings) -> None:
    s = fast(settings)
    async with running(s):
        for i in range(1000):
            write(vault, f"memory/burst/{i:04d}.md", f"# N{i}\n\nburst note {i}\n")
        await until(lambda: len(indexed(s)) == 1000, within=60)


async def test_changes_while_stopped_are_caught_up_at_start(
    vault: Path, settings: Settings
) -> None:
    s = fast(settings)
    write(vault, "memory/keep.md", "# K\n\nkeep\n")
    write(vault, "memory/edit.md", "# E\n\nbefore\n")
    write(vault, "memory/gone.md", "# G\n\ngone\n")
    async with running(s):
        await until(lambda: len(indexed(s)) == 3)
    write(vault, "memory/edit.md", "# E\n\nafter the restart\n")
    (vault / "memory" / "gone.md").unlink()
    write(vault, "memory/added.md", "# A\n\nadded while down\n")
    async with running(s):
        assert set(indexed(s)) == {"memory/keep.md", "memory/edit.md", "memory/added.md"}
        assert "after the restart" in contents(s)


async def test_a_second_daemon_is_refused_and_status_shows_the_first(
    vault: Path, settings: Settings
) -> None:
    s = fast(settings)
    async with running(s):
        info = daemon_status(s)
        assert info is not None and info["pid"] == os.getpid() and info["queue"] == 0
        async with make_service(s, FakeEmbedder()) as svc2:
            with pytest.raises(DaemonError, match=f"pid {os.getpid()}"):
                await Daemon(s, svc2).run()
    assert daemon_status(s) is None


async def test_embedder_down_keeps_full_text_current_and_fills_vectors_later(
    vault: Path, settings: Settings
) -> None:
    s = fast(settings)
    emb = FakeEmbedder(down=True)
    async with running(s, emb) as (_, svc):
        write(vault, "memory/n.md", "# N\n\nembedder outage note\n")
        await until(lambda: "memory/n.md" in indexed(s))
        result = await svc.search("outage note")
        assert result.mode == "keyword" and result.hits[0].path == "memory/n.md"
        emb.down = False
        await until(
            lambda: (
                sqlite3.connect(s.db_path)
                .execute("SELECT count(*) FROM memory_chunks WHERE embedding IS NULL")
                .fetchone()[0]
                == 0
            )
        )
        assert (await svc.search("outage note")).mode == "hybrid"


@contextlib.contextmanager
def index_locked_by_another_process(settings: Settings) -> Iterator[None]:
    """A real fault: another connection holds the database's write lock."""
    other = sqlite3.connect(settings.db_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        other.execute("ROLLBACK")
        other.close()


def pending_vectors(settings: Settings) -> int:
    with sqlite3.connect(settings.db_path) as conn:
        sql = "SELECT count(*) FROM memory_chunks WHERE embedding IS NULL"
        return int(conn.execute(sql).fetchone()[0])


async def test_a_batch_that_fails_on_a_busy_index_is_retried_until_it_lands(
    vault: Path, settings: Settings
) -> None:
    s = dataclasses.replace(
        fast(settings), storage=dataclasses.replace(settings.storage, busy_timeout_s=0.1)
    )
    async with running(s) as (daemon, _):
        with index_locked_by_another_process(s):
            write(vault, "memory/a.md", "# A\n\nwritten while the index was locked\n")
            write(vault, "memory/b.md", "# B\n\nanother locked write\n")
            await until(lambda: {"memory/a.md", "memory/b.md"} <= set(daemon.failing))
            status = daemon_status(s)
            assert status is not None and "memory/a.md" in status["retrying"]  # type: ignore[operator]
        await until(lambda: {"memory/a.md", "memory/b.md"} <= set(indexed(s)), within=15)
        await until(lambda: not daemon.failing)
        assert not daemon.stop.is_set()
        write(vault, "memory/c.md", "# C\n\nafter the fault\n")  # and it keeps following
        await until(lambda: "memory/c.md" in indexed(s))


async def test_the_vector_retry_loop_survives_a_storage_fault(
    vault: Path, settings: Settings
) -> None:
    s = dataclasses.replace(
        fast(settings), storage=dataclasses.replace(settings.storage, busy_timeout_s=0.1)
    )
    emb = FakeEmbedder(down=True)
    async with running(s, emb) as (daemon, svc):
        write(vault, "memory/n.md", "# N\n\nnote stored while embedder is down\n")
        await until(lambda: "memory/n.md" in indexed(s))
        with index_locked_by_another_process(s):
            emb.down = False
            calls = emb.calls
            await until(lambda: emb.calls > calls)  # the loop ran into the lock at least once
            await asyncio.sleep(0.5)
        await until(lambda: pending_vectors(s) == 0, within=15)
        assert not daemon.stop.is_set()
        assert (await svc.search("note stored")).mode == "hybrid"


async def test_polling_mode_follows_changes(vault: Path, settings: Settings) -> None:
    s = fast(settings)
    async with running(s, force_polling=True) as (daemon, _):
        assert daemon._watcher is not None and daemon._watcher.polling
        write(vault, "memory/p.md", "# P\n\npolled\n")
        await until(lambda: "memory/p.md" in indexed(s))


class _NoWatchesLeft(Observer):  # type: ignore[misc,valid-type]
    """A real inotify observer whose kernel has no watches left (as with ENOSPC)."""

    def schedule(self, *args: object, **kwargs: object) -> object:
        raise OSError(errno.ENOSPC, "inotify watch limit reached")


async def test_os_watch_limit_falls_back_to_polling(
    vault: Path, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    s = fast(settings)
    async with running(s, native_observer=_NoWatchesLeft) as (daemon, _):
        assert daemon._watcher is not None and daemon._watcher.polling
        write(vault, "memory/p.md", "# P\n\nstill followed\n")
        await until(lambda: "memory/p.md" in indexed(s))
    assert any("falling back to polling" in r.getMessage() for r in caplog.records)


def test_sigterm_during_a_batch_exits_cleanly_with_whole_files(vault: Path) -> None:
    for i in range(400):
        write(
            vault,
            f"memory/n{i:03d}.md",
            f"# Note {i}\n\n" + f"paragraph {i} " * 60 + f"\n\n## Two\n\nsecond {i}\n",
        )
    env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": "local"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "memcore", "--vault", str(vault), "watch"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    db = vault / ".memcore" / "index.db"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # wait until the initial batch is under way
        if db.exists():
            try:
                with sqlite3.connect(db) as conn:
                    if conn.execute("SELECT count(*) FROM files").fetchone()[0] > 0:
                        break
            except sqlite3.Error:
                pass
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    with sqlite3.connect(db) as conn:
        per_file = conn.execute(
            "SELECT source_file, count(*) FROM memory_chunks GROUP BY source_file"
        ).fetchall()
        files = conn.execute("SELECT count(*) FROM files").fetchone()[0]
    assert per_file and all(n == 2 for _, n in per_file) and len(per_file) == files
    assert not (vault / ".memcore" / "daemon.json").exists()


def test_second_watch_process_is_refused_with_one_line(vault: Path) -> None:
    env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": "static"}
    first = subprocess.Popen(
        [sys.executable, "-m", "memcore", "--vault", str(vault), "watch"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        lock = vault / ".memcore" / "daemon.json"
        deadline = time.monotonic() + 30
        while not lock.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        second = subprocess.run(
            [sys.executable, "-m", "memcore", "--vault", str(vault), "watch"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert second.returncode == 1
        assert (
            second.stderr.strip()
            == f"memcore: another memcore watch (pid {first.pid}) is already watching "
            f"{vault.resolve()}"
        )
        status = subprocess.run(
            [sys.executable, "-m", "memcore", "--vault", str(vault), "status", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert f'"pid": {first.pid}' in status.stdout
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=30)
    assert first.returncode == 0


async def test_a_save_during_the_start_up_catch_up_is_not_lost(
    vault: Path, settings: Settings
) -> None:
    s = fast(settings)
    write(vault, "memory/old.md", "# Old\n\nindexed by the catch-up\n")
    gate, entered = asyncio.Event(), asyncio.Event()

    class Gated(FakeEmbedder):
        async def embed(self, texts):  # type: ignore[no-untyped-def]
            entered.set()
            await gate.wait()  # the catch-up is in progress until the test opens the gate
            return await super().embed(texts)

    async with make_service(s, Gated()) as svc:
        daemon = Daemon(s, svc, asyncio.Event())
        task = asyncio.create_task(daemon.run())
        await asyncio.wait_for(entered.wait(), 10)
        await asyncio.sleep(0.2)  # the watcher is live before the catch-up starts
        write(vault, "memory/during.md", "# During\n\nsaved while the daemon was catching up\n")
        await asyncio.sleep(0.2)
        gate.set()
        try:
            await until(lambda: set(indexed(s)) == {"memory/old.md", "memory/during.md"})
        finally:
            daemon.stop.set()
            await asyncio.wait_for(task, 10)


async def test_the_log_names_skipped_files_once_and_says_why_vectors_wait(
    vault: Path, settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="memcore")
    s = fast(settings)
    (vault / "memory" / "bad.md").write_bytes(b"# Caf\xe9\n")
    write(vault, "memory/good.md", "# G\n\nfine\n")
    async with running(s, FakeEmbedder(down=True)):
        # a folder renamed inside the vault rescans it: the untouched bad file stays quiet
        write(vault, "memory/d/x.md", "# X\n\nin a folder\n")
        await until(lambda: "memory/d/x.md" in indexed(s))
        os.rename(vault / "memory" / "d", vault / "memory" / "e")
        await until(lambda: "memory/e/x.md" in indexed(s) and "memory/d/x.md" not in indexed(s))
    messages = [r.getMessage() for r in caplog.records]
    caught_up = next(m for m in messages if m.startswith("caught up with the vault"))
    assert "1 skipped (memory/bad.md)" in caught_up
    assert "waiting for vectors (embedder unavailable" in caught_up
    assert sum("skipped memory/bad.md: invalid UTF-8" in m for m in messages) == 1


async def test_api_writes_under_a_running_watcher_are_logged_once(
    vault: Path, settings: Settings
) -> None:
    s = fast(settings)
    async with running(s) as (_, svc):
        (added,) = await svc.memories.add("watched write", user_id="w")
        await svc.memories.update(added.id, "watched write, changed")
        await asyncio.sleep(0.6)  # the watcher's debounce passes; it finds nothing new
        events = await svc.memories.history(added.id)
        # a hand edit while it runs is noticed as a person's
        path = vault / added.path
        path.write_text(path.read_text().replace("watched write, changed", "edited by hand"))
        await until(lambda: "edited by hand" in contents(s))
        await asyncio.sleep(0.1)
        after = await svc.memories.history(added.id)
    assert [(e["event"], e["actor"]) for e in events] == [("ADD", "api"), ("UPDATE", "api")]
    assert (after[-1]["event"], after[-1]["actor"], after[-1]["new_memory"]) == (
        "UPDATE", "person", "edited by hand"
    )  # fmt: skip
