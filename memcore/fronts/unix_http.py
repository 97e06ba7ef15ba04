"""HTTP/1.1 over the daemon's Unix socket, written out with the standard library's socket
alone: a one-shot command asking the daemon imports neither asyncio nor http.client (whose
email parsing costs about 10 ms); the daemon is memcore's own server."""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping

from memcore.core.errors import MemcoreError


class DaemonGone(MemcoreError):
    """The daemon's socket took no connection: the request was not sent."""


def post_unix(
    path: str, endpoint: str, payload: object, headers: Mapping[str, str] | None = None
) -> tuple[int, str, bytes]:
    """POST JSON to the daemon's Unix socket (blocking): one HTTP/1.1 request, the connection
    closed after it; (status, reason, body). Raises DaemonGone when nothing was sent, and
    MemcoreError when the exchange broke off after."""
    body = json.dumps(payload).encode()
    extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
    head = (
        f"POST {endpoint} HTTP/1.1\r\nHost: memcore\r\nContent-Type: application/json\r\n"
        f"{extra}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return _exchange(path, head + body)


def get_unix(path: str, endpoint: str) -> tuple[int, str, bytes]:
    """GET from the daemon's Unix socket (blocking), as ``post_unix`` posts."""
    head = f"GET {endpoint} HTTP/1.1\r\nHost: memcore\r\nConnection: close\r\n\r\n"
    return _exchange(path, head.encode())


def _exchange(path: str, request: bytes) -> tuple[int, str, bytes]:
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(60)
            try:
                sock.connect(path)
            except OSError as exc:  # nothing was sent: the caller may do it itself
                raise DaemonGone(f"cannot reach the daemon at {path}: {exc}") from None
            sock.sendall(request)
            chunks = []
            while chunk := sock.recv(65536):
                chunks.append(chunk)
    except OSError as exc:
        raise MemcoreError(f"cannot reach the daemon at {path}: {exc}") from None
    return _response(b"".join(chunks), path)


def _response(raw: bytes, where: str) -> tuple[int, str, bytes]:
    """(status, reason, body) of a whole HTTP/1.1 response (Content-Length or chunked)."""
    head, sep, body = raw.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ", 2)
    if not sep or len(parts) < 2 or not parts[1].isdigit():
        raise MemcoreError(f"the daemon at {where} answered something that is not HTTP")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines[1:])}
    if headers.get("transfer-encoding", "").lower() == "chunked":
        body = _unchunked(body)
    elif (length := headers.get("content-length", "")).isdigit():
        body = body[: int(length)]
    return int(parts[1]), parts[2] if len(parts) > 2 else "", body


def _unchunked(data: bytes) -> bytes:
    out: list[bytes] = []
    at = 0
    while True:
        end = data.index(b"\r\n", at)
        size = int(data[at:end].split(b";")[0], 16)
        if size == 0:
            return b"".join(out)
        out.append(data[end + 2 : end + 2 + size])
        at = end + 2 + size + 2


def error_message(data: object, reason: str) -> str:
    """The one-line message of an error answer's JSON: memcore's ``{"error": {"message"}}``,
    else what stands there, else the reason phrase."""
    problem = data.get("error", reason) if isinstance(data, dict) else data
    return str(problem.get("message", reason) if isinstance(problem, dict) else problem)
