"""The web page's login and its forms' CSRF tokens.

A person types the token once into a plain HTML form (``POST /login``, no JavaScript needed).
The server answers with a session cookie it sets itself: ``HttpOnly`` (no script reads it),
``SameSite=Strict``, ``Path=/``, named after the server's port (``memcore_session_8765``) and
holding a random session id, never the token. Browsers send a host's cookies to every port of
that host, so a page served from another local port cannot read the cookie or use its name,
and a server on another port that receives it gets an id that is good only here, until logout
or a restart. Each form carries a CSRF token bound to the session (or to this process, without
a token), and the Guard refuses a write from another origin.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from collections.abc import Collection, Mapping
from urllib.parse import parse_qs

SESSION_TTL_S = 12 * 3600
MAX_SESSIONS = 1000  # the oldest go first past this


class Sessions:
    """Live sessions (id -> the token it stands for), kept in this process only."""

    def __init__(self, tokens: Collection[str]) -> None:
        self._secret = secrets.token_bytes(32)
        self._tokens = tuple(tokens)
        self._live: dict[str, tuple[str, float]] = {}

    @property
    def needed(self) -> bool:
        """Whether this server asks for a token at all."""
        return bool(self._tokens)

    def valid(self, token: str) -> bool:
        given = token.strip().encode()
        return any(hmac.compare_digest(given, t.encode()) for t in self._tokens)

    def issue(self, token: str) -> str:
        """A new session for a token already checked with ``valid``."""
        now = time.monotonic()
        self._live = {s: v for s, v in self._live.items() if v[1] > now}
        while len(self._live) >= MAX_SESSIONS:
            self._live.pop(next(iter(self._live)))
        sid = secrets.token_urlsafe(32)
        self._live[sid] = (token.strip(), now + SESSION_TTL_S)
        return sid

    def token_of(self, sid: str | None) -> str | None:
        if not sid:
            return None
        found = self._live.get(sid)
        if found is None or found[1] <= time.monotonic():
            return None
        return found[0]

    def drop(self, sid: str | None) -> None:
        if sid:
            self._live.pop(sid, None)

    def csrf(self, sid: str | None) -> str:
        """The CSRF token of a session (of this process, for a server without a token)."""
        mac = hmac.new(self._secret, (sid or "-").encode(), hashlib.sha256)
        return mac.hexdigest()[:32]

    def csrf_ok(self, sid: str | None, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(self.csrf(sid), given)


def cookie_name(port: int | None) -> str:
    return f"memcore_session_{port or 0}"


def session_of(headers: Mapping[str, str], port: int | None) -> str | None:
    """The session id in a request's cookies, for this port's cookie."""
    name = cookie_name(port)
    for part in headers.get("cookie", "").split(";"):
        key, _, value = part.strip().partition("=")
        if key == name and value:
            return value
    return None


def set_cookie(port: int | None, sid: str) -> str:
    return f"{cookie_name(port)}={sid}; HttpOnly; SameSite=Strict; Path=/; Max-Age={SESSION_TTL_S}"


def clear_cookie(port: int | None) -> str:
    return f"{cookie_name(port)}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0"


def form_fields(body: bytes) -> dict[str, list[str]]:
    """An ``application/x-www-form-urlencoded`` body (what an HTML form posts)."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return {}
    return parse_qs(text, keep_blank_values=True, max_num_fields=20_000)


def safe_next(target: str | None) -> str:
    """Where a login sends the person back: a path on this server, never another site."""
    if not target or not target.startswith("/") or target.startswith(("//", "/\\")):
        return "/"
    return target
