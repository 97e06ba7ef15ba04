"""Test doubles that stand in only at edges: a deterministic embedder and HTTP wire servers.

The suite's rule on time: no test asserts an absolute wall time, CPU time, throughput or sleep
length that holds only on a machine as slow (or as fast) as the one it was written on. Compare
with something measured in the same run (another thread's CPU, a second pass), count what was
done instead of how long it took, or wait with ``wait_until`` under a generous hang guard;
speed targets belong to the benchmarks under ``bench/``.
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np
import numpy.typing as npt

from memcore.core.errors import EmbedderUnavailable

DIM = 64


def hash_vector(text: str, dim: int = DIM) -> npt.NDArray[np.float32]:
    """Bag of lower-cased words hashed into dim buckets: similar words -> similar vectors."""
    vec = np.zeros(dim, dtype=np.float32)
    for word in re.findall(r"\w+", text.lower()):
        h = int(hashlib.md5(word.encode()).hexdigest(), 16)
        vec[h % dim] += 1.0 if (h >> 8) % 2 else -1.0
    norm = np.linalg.norm(vec)
    return vec / norm if norm else vec


class Crash(BaseException):
    """Simulates the process dying (not an Exception, so nothing catches it)."""


@dataclass
class FakeEmbedder:
    """Deterministic in-process embedder that counts what it embeds and can fail on demand."""

    model_id: str = "test:hash64"
    reads_cjk: bool = True
    in_process: bool = True
    batch_size: int = 16
    concurrency: int = 1
    down: bool = False
    crash_after_calls: int | None = None
    calls: int = 0
    texts: list[str] = field(default_factory=list)

    async def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        if self.down:
            raise EmbedderUnavailable("test embedder is down")
        if self.crash_after_calls is not None and self.calls >= self.crash_after_calls:
            raise Crash()
        self.calls += 1
        self.texts.extend(texts)
        return np.stack([hash_vector(t) for t in texts])

    async def aclose(self) -> None:
        return None


@dataclass
class WireBehaviour:
    """What the loopback server does: failures first, then answers."""

    fail_status: int = 503
    fail_first: int = 0
    delay_s: float = 0.0
    known_models: tuple[str, ...] = ("nomic-embed-text", "text-embedding-3-small")
    dim: int = 16
    requests: list[dict[str, Any]] = field(default_factory=list)
    chat_replies: list[Any] = field(default_factory=list)  # dicts or functions, in order
    in_flight: int = 0
    max_in_flight: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)


def _make_handler(b: WireBehaviour) -> type[BaseHTTPRequestHandler]:  # noqa: C901 - one fake API
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            return None

        def _send(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", 0))
            payload = json.loads(self.rfile.read(length) or b"{}")
            with b.lock:
                b.requests.append(
                    {"path": self.path, "body": payload, "headers": dict(self.headers)}
                )
                b.in_flight += 1
                b.max_in_flight = max(b.max_in_flight, b.in_flight)
                failing = len(b.requests) <= b.fail_first
            try:
                if b.delay_s:
                    time.sleep(b.delay_s)
                if failing:
                    self._send(b.fail_status, {"error": "server busy, try again"})
                    return
                model = payload.get("model", "")
                if self.path in ("/api/chat", "/v1/chat/completions"):
                    self._chat(model)
                    return
                texts = payload.get("input", [])
                texts = [texts] if isinstance(texts, str) else texts
                vectors = [hash_vector(t, b.dim).tolist() for t in texts]
                if self.path == "/api/embed":
                    if model not in b.known_models:
                        msg = f'model "{model}" not found, try pulling it first'
                        self._send(404, {"error": msg})
                        return
                    self._send(200, {"model": model, "embeddings": vectors})
                elif self.path == "/v1/embeddings":
                    if self.headers.get("Authorization") != "Bearer sk-test":
                        self._send(
                            401,
                            {
                                "error": {
                                    "message": "Incorrect API key",
                                    "type": "invalid_request_error",
                                    "code": "invalid_api_key",
                                }
                            },
                        )
                        return
                    if model not in b.known_models:
                        self._send(
                            404,
                            {
                                "error": {
                                    "message": f"model {model} does not exist",
                                    "type": "invalid_request_error",
                                }
                            },
                        )
                        return
                    data = [
                        {"object": "embedding", "index": i, "embedding": v}
                        for i, v in reversed(list(enumerate(vectors)))  # order must not matter
                    ]
                    self._send(
                        200,
                        {
                            "object": "list",
                            "data": data,
                            "model": model,
                            "usage": {"prompt_tokens": 1, "total_tokens": 1},
                        },
                    )
                else:
                    self._send(404, {"error": "no such endpoint"})
            finally:
                with b.lock:
                    b.in_flight -= 1

        def _chat(self, model: str) -> None:
            status, body = chat_answer(b, self.path, model, self.headers, b.requests[-1])
            self._send(status, body)

    return Handler


def chat_answer(
    b: WireBehaviour, path: str, model: str, headers: Any, request: dict[str, Any]
) -> tuple[int, dict[str, Any]]:
    """A scripted chat model: the next reply in line (a dict, or a function of the request's
    user message), answered as JSON text in Ollama's or OpenAI's response shape."""
    with b.lock:
        script = b.chat_replies.pop(0) if b.chat_replies else {}
    if callable(script):
        script = script(request["body"]["messages"][-1]["content"])
    reply = json.dumps(script)
    if path == "/api/chat":
        return 200, {
            "model": model, "created_at": "2026-11-23T00:00:00Z",
            "message": {"role": "assistant", "content": reply},
            "done": True, "done_reason": "stop",
        }  # fmt: skip
    if headers.get("Authorization") != "Bearer sk-test":
        return 401, {"error": {"message": "Incorrect API key", "type": "invalid_request_error"}}
    return 200, {
        "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": model,
        "choices": [{"index": 0, "finish_reason": "stop",
                     "message": {"role": "assistant", "content": reply}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }  # fmt: skip


class WireServer:
    """A real HTTP server on 127.0.0.1 that speaks the Ollama and OpenAI embedding and chat
    APIs (chat answers are scripted by the test)."""

    def __init__(self, behaviour: WireBehaviour | None = None) -> None:
        self.behaviour = behaviour or WireBehaviour()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self.behaviour))
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def __enter__(self) -> WireServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def error_message(resp: Any) -> str:
    """The message of an HTTP error answer, checked to have the one error shape:
    ``{"error": {"code": "...", "message": "one line"}}``."""
    error = resp.json()["error"]
    assert set(error) == {"code", "message"} and error["code"], error
    assert "\n" not in error["message"], error
    return str(error["message"])


def wait_ready(url: str, seconds: float = 60) -> bool:
    """Poll a `memcore serve` at ``url`` until /ready answers 200; whether it did in time."""
    import httpx

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/ready", timeout=2).status_code == 200:
                return True
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    return False


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write(root: Any, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def wait_until(predicate: Callable[[], bool], timeout: float = 10.0, every: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return predicate()
