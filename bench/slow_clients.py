"""A slow-body flood against a real `memcore serve` with its default limits (#54): N
connections each send a full head announcing a large body, then one byte a second; meanwhile
/health is asked on a new connection every 100 ms. Prints /health's latency (median, p95, max)
and failures, and how many slow connections the server closed, by when.

    python bench/slow_clients.py [--connections 1005] [--seconds 30]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.http_api import free_port, wait_ready

HEAD = (b"POST /api/memories HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        b"Content-Length: 100000\r\n\r\n{")  # fmt: skip


def health(port: int) -> bool:
    """GET /health on a new connection (the worst case under a flood); whether it was 200."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
            answer = b""
            while chunk := s.recv(65536):
                answer += chunk
    except OSError:
        return False
    return answer.startswith(b"HTTP/1.1 200")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--connections", type=int, default=1005)
    ap.add_argument("--seconds", type=float, default=30.0)
    args = ap.parse_args()
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, args.connections + 500), hard))
    vault = Path(tempfile.mkdtemp()) / "vault"
    (vault / "memory").mkdir(parents=True)
    (vault / "MEMORY.md").write_text("# M\n\nA note.\n")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": "static"}
    cmd = [sys.executable, "-m", "memcore", "--vault", str(vault), "serve", "--port", str(port)]
    proc = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
    try:
        wait_ready(url, 60)
        began = time.monotonic()
        slow = []
        for _ in range(args.connections):
            s = socket.create_connection(("127.0.0.1", port), timeout=5)
            with contextlib.suppress(OSError):
                s.sendall(HEAD)
            slow.append(s)
        opened = time.monotonic() - began
        closed_at: dict[int, float] = {}
        stop = threading.Event()

        def dribble() -> None:
            while not stop.is_set() and len(closed_at) < len(slow):
                for n, s in enumerate(slow):
                    if n not in closed_at:
                        try:
                            s.sendall(b" ")
                        except OSError:
                            closed_at[n] = time.monotonic() - began
                stop.wait(1.0)

        worker = threading.Thread(target=dribble)
        worker.start()
        waits, when, failed = [], [], 0
        while time.monotonic() - began < args.seconds:
            t0 = time.monotonic()
            ok = health(port)
            waits.append(time.monotonic() - t0)
            when.append(t0 - began)
            failed += not ok
            time.sleep(0.1)
        stop.set()
        worker.join()
        for s in slow:
            s.close()
    finally:
        proc.terminate()
        _, log = proc.communicate(timeout=60)
    ms = sorted(w * 1000 for w in waits)
    print(f"{args.connections} slow-body connections opened in {opened:.1f} s")
    print(f"/health: {len(ms)} asks, {failed} failed; median {statistics.median(ms):.1f} ms, "
          f"p95 {ms[int(len(ms) * 0.95) - 1]:.1f} ms, max {ms[-1]:.1f} ms "
          f"(at {when[waits.index(max(waits))]:.1f} s)")  # fmt: skip
    steady = [w * 1000 for w, t in zip(waits, when, strict=True) if t >= 1.0]
    print(
        f"/health from 1 s into the flood on: max {max(steady):.1f} ms "
        f"(the first second holds the server reading {args.connections} heads at once)"
    )
    times = sorted(closed_at.values())
    if times:
        print(f"closed by the server: {len(times)} of {len(slow)}, the last after "
              f"{times[-1]:.1f} s (median {statistics.median(times):.1f} s)")  # fmt: skip
    print(f"server log: {len(log.splitlines())} lines, {log.count('Traceback')} tracebacks")


if __name__ == "__main__":
    main()
