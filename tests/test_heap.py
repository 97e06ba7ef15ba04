"""The event loop first (core/heap.py, core/workers.py): bulk work pauses full collections
but not young ones, frees what it built without holding the loop, and runs in worker threads
that yield to the loop's thread."""

from __future__ import annotations

import asyncio
import gc
import os
import sys
import threading

import pytest

from memcore.core.heap import NEVER, drop, paused_collection
from memcore.core.workers import SWITCH_S, WORKER_NICE, loop_first


def test_a_pause_stops_full_collections_only_and_freezes_what_survived() -> None:
    before = gc.get_threshold()
    frozen = gc.get_freeze_count()
    seen: list[int] = []

    def watch(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            seen.append(info["generation"])

    gc.callbacks.append(watch)
    try:
        kept: list[list[int]] = []
        with paused_collection():
            assert gc.get_threshold() == (before[0], before[1], NEVER) and gc.isenabled()
            with paused_collection():  # nested (another request, another thread): still paused
                pass
            assert gc.get_threshold()[2] == NEVER
            for n in range(200_000):  # a bulk operation's heap, and cyclic garbage meanwhile
                kept.append([n])  # a list stays tracked (a dict of numbers would not)
                cycle: list[object] = []
                cycle.append(cycle)
            during = list(seen)
        assert 0 in during and 2 not in during  # young collections ran, no full one
        assert gc.get_threshold() == before
        assert gc.get_freeze_count() >= frozen + len(kept)  # what survived is frozen
    finally:
        gc.callbacks.remove(watch)
        gc.unfreeze()


def test_pauses_from_two_threads_end_with_the_last() -> None:
    before = gc.get_threshold()
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with paused_collection():
            inside.set()
            leave.wait(10)

    thread = threading.Thread(target=other)
    thread.start()
    try:
        inside.wait(10)
        with paused_collection():
            pass
        assert gc.get_threshold()[2] == NEVER  # the other thread's pause still holds
    finally:
        leave.set()
        thread.join()
    assert gc.get_threshold() == before
    gc.unfreeze()


async def test_drop_empties_a_large_list_in_a_worker_while_the_loop_answers() -> None:
    pages = [[{"turn": n, "text": f"message {n}"} for n in range(200)] for _ in range(2_000)]
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    ticker = asyncio.create_task(tick())
    await drop(pages)
    ticker.cancel()
    assert pages == [] and ticks > 1  # the loop ran while the worker freed the pages


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own nice value is Linux's")
async def test_worker_threads_run_below_the_loop_thread_and_switch_fast() -> None:
    loop_nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    switch = sys.getswitchinterval()
    with loop_first():
        assert sys.getswitchinterval() == min(switch, SWITCH_S)
        worker = await asyncio.to_thread(
            lambda: (
                threading.current_thread().name,
                os.getpriority(os.PRIO_PROCESS, threading.get_native_id()),
            )
        )
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == loop_nice
    assert sys.getswitchinterval() == switch
    name, nice = worker
    assert name.startswith("memcore-worker") and nice == min(loop_nice + WORKER_NICE, 19)


ARENAS = """
import ctypes, os, sys, tempfile, threading
from memcore.core.heap import few_malloc_arenas
few = sys.argv[1] == "few" and few_malloc_arenas()
go = threading.Barrier(8)
def work():
    go.wait()  # all at once: each new thread asks malloc for an arena
    kept = [bytes(2000) for _ in range(2000)]
threads = [threading.Thread(target=work) for _ in range(8)]
for t in threads: t.start()
for t in threads: t.join()
libc = ctypes.CDLL(None)
libc.fopen.restype = ctypes.c_void_p
path = os.path.join(tempfile.mkdtemp(), "info.xml")
fh = libc.fopen(path.encode(), b"w")
libc.malloc_info(0, ctypes.c_void_p(fh))
libc.fclose(ctypes.c_void_p(fh))
print(few, open(path).read().count("<heap nr="))
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="malloc arenas are glibc's",
)
def test_a_batch_keeps_malloc_to_two_arenas_where_threads_would_take_one_each() -> None:
    import subprocess

    def heaps(mode: str) -> tuple[str, int]:
        out = subprocess.run([sys.executable, "-c", ARENAS, mode], capture_output=True,
                             text=True, check=True).stdout.split()  # fmt: skip
        return out[0], int(out[1])

    assert heaps("few") == ("True", 2)
    flag, default = heaps("default")
    assert flag == "False" and default > 2
