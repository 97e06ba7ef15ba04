"""The local model in a helper process, for a one-shot search or add on two cores or more.

A one-shot `memcore search` with no daemon spends nearly all its time starting: importing
numpy, onnxruntime and tokenizers and loading the model, beside importing memcore's own modules
and opening the index. In one process all of it but the model's session shares one GIL, so the
two halves take turns on one core. The model's half needs nothing from the other, so ``start``
forks a helper as one of the command's first steps (once it knows no daemon holds the vault,
before the settings are read, while the process has no other thread): it imports the model's
libraries at once, loads the model when it is told the model's settings, and answers
embedding requests over two pipes. The command's process never imports onnxruntime or
tokenizers, and each half has a core.

The vectors are the in-process model's, bit for bit: the helper runs the same
``OnnxMiniLMEmbedder`` with the same settings. Should the helper end or answer something
unreadable, the command loads the model itself and goes on (``local.HelperEmbedder``).

Frames: a 4-byte little-endian length, then the payload. The first request is the model's
settings (JSON), each next one a JSON list of texts; each answer is ``V`` and the float32 rows,
or ``E`` and an error's one line. The helper ends at the end of its request pipe (the command
ended, or let it go) and on any error of its own; the command kills it as soon as it is done
with it (the kernel's reaping is left to the command's own end), so nothing outlives the
command.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import struct
import sys
from collections.abc import Sequence

from memcore.core.errors import EmbedderError

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers read it)
if TYPE_CHECKING:  # numpy and the model load after the fork: the helper must start first
    from memcore.embedders.local import Matrix

LENGTH = struct.Struct("<I")


class Helper:
    """The command's side of a helper process: its pid and the two pipes."""

    def __init__(self, pid: int, requests: int, answers: int) -> None:
        self.pid = pid
        self._requests = requests
        self._answers = answers
        self._ended = False

    @classmethod
    def start(cls) -> Helper | None:
        """Fork a helper, or None where one would not help: fewer than two cores to run on,
        no fork, or threads already running (a fork copies only the calling one)."""
        if not hasattr(os, "fork") or _cores() < 2:
            return None
        running = sys.modules.get("threading")
        if running is not None and running.active_count() > 1:
            return None
        fds: list[int] = []
        try:
            fds += os.pipe()
            fds += os.pipe()
            pid = os.fork()
        except OSError:  # out of file handles, processes or memory: the model loads here
            for fd in fds:
                os.close(fd)
            return None
        request_r, request_w, answer_r, answer_w = fds
        if pid == 0:  # the helper: never returns
            code = 1
            try:
                os.close(request_w)
                os.close(answer_r)
                _quiet()
                _serve(request_r, answer_w)
                code = 0
            finally:
                os._exit(code)  # never the command's exit handlers or buffered output
        os.close(request_r)
        os.close(answer_w)
        return cls(pid, request_w, answer_r)

    def load(self, batch_size: int, threads: int) -> bool:
        """Tell the helper the model's settings, for it to load the model while the command
        opens the index; False when it is gone already."""
        try:
            _write(self._requests, json.dumps({"batch_size": batch_size, "threads": threads}))
        except OSError:
            return False
        return True

    def embed(self, texts: Sequence[str]) -> Matrix | None:
        """The helper's vectors for these texts, or None when it did not answer (it ended, or
        answered something that is not vectors). Raises EmbedderError with the model's own."""
        import numpy as np

        try:
            _write(self._requests, json.dumps(list(texts), ensure_ascii=False))
            answer = _read(self._answers)
        except OSError:
            return None
        if answer is None:
            return None
        kind, body = answer[:1], answer[1:]
        if kind == b"E":
            raise EmbedderError(body.decode("utf-8", "replace"))
        rows = np.frombuffer(body, dtype=np.float32)
        if kind != b"V" or not texts or rows.size % len(texts):
            return None
        return rows.reshape(len(texts), -1).copy()

    def discard(self) -> None:
        """End the helper, wherever it is (importing, loading, waiting). Once only: its pipes'
        numbers and its pid may belong to something else afterwards. It is reaped if it is
        gone already, else left to be reaped when the command ends: waiting for its memory to
        be released would hold the command ~7 ms."""
        if self._ended:
            return
        self._ended = True
        for fd in (self._requests, self._answers):
            with contextlib.suppress(OSError):
                os.close(fd)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, os.WNOHANG)


def _cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def _quiet() -> None:
    """The helper's standard streams on /dev/null: what it has to say goes through its pipe,
    and a reader of the command's output sees its end when the command ends."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)


def _serve(requests: int, answers: int) -> None:
    """The helper's life: the libraries now, the model once its settings come, then one
    answer per request until the request pipe ends."""
    import numpy as np

    from memcore.embedders.local import OnnxMiniLMEmbedder

    OnnxMiniLMEmbedder.import_libraries()  # while the command reads its settings
    frame = _read(requests)
    if frame is None:
        return
    config = json.loads(frame)
    model = OnnxMiniLMEmbedder(int(config["batch_size"]), int(config["threads"]))
    with contextlib.suppress(EmbedderError):
        model.load()  # now; a failure is raised again, and answered, at the first request
    while (frame := _read(requests)) is not None:
        try:
            rows = model.embed_sync(json.loads(frame))
        except EmbedderError as exc:
            _write(answers, b"E" + str(exc).encode())
        else:
            _write(answers, b"V" + np.ascontiguousarray(rows, dtype=np.float32).tobytes())


def _write(fd: int, payload: str | bytes) -> None:
    data = payload.encode() if isinstance(payload, str) else payload
    view = memoryview(LENGTH.pack(len(data)) + data)
    while view:
        view = view[os.write(fd, view) :]


def _read(fd: int) -> bytes | None:
    """One frame's payload, or None at the pipe's end (a frame cut short counts as its end)."""
    head = _exactly(fd, LENGTH.size)
    if head is None:
        return None
    return _exactly(fd, LENGTH.unpack(head)[0])


def _exactly(fd: int, n: int) -> bytes | None:
    parts, left = [], n
    while left:
        part = os.read(fd, min(left, 1 << 20))
        if not part:
            return None
        parts.append(part)
        left -= len(part)
    return b"".join(parts)
