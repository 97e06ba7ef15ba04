"""One rule for credentials wherever settings leave the process: status on every front,
.memcore/daemon.json, logs, warnings and errors. A URL loses its password (``user:***@``, and
``password=***`` parameters); a secret read from the environment (an API key, a token) is
replaced wherever its text appears. Memory text is never redacted: it is the user's own."""

from __future__ import annotations

import re
import threading

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (type checkers read it)
if TYPE_CHECKING:
    from typing import Any

MASK = "***"
MIN_SECRET = 8  # shorter values would mask ordinary words
_URL = re.compile(r"\b[a-zA-Z][a-zA-Z0-9+.-]*://[^\s'\"<>`]+")
_SECRETS: frozenset[str] = frozenset()  # replaced whole, so a reader never sees it change
_LOCK = threading.Lock()


def redact_url(url: str) -> str:
    """A URL without its password: none in ``user:password@`` (the last @ ends the user
    part, as URL parsers read it) nor in a ``password=`` / ``sslpassword=`` parameter."""
    url = re.sub(r"(://[^:/@]*):[^/]*@", rf"\1:{MASK}@", url)
    return re.sub(r"(?i)\b((?:ssl)?password=)[^&#]*", rf"\1{MASK}", url)


def keep_secret(value: str | None) -> None:
    """Remember ``value`` (an API key, a token read from the environment) so that redact()
    masks it wherever it appears."""
    global _SECRETS
    if value and len(value) >= MIN_SECRET:
        with _LOCK:
            _SECRETS = _SECRETS | {value}


def redact(text: str) -> str:
    """``text`` with every URL's password and every kept secret masked."""
    if "://" in text:
        text = _URL.sub(lambda m: redact_url(m.group(0)), text)
    for secret in _SECRETS:
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def redacted(value: Any) -> Any:
    """``value`` (a JSON-like document) with redact() applied to every string in it."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, dict):
        return {k: redacted(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redacted(v) for v in value]
    return value


def redact_log_records() -> None:
    """Every log record of this process, any logger's (uvicorn's and asyncio's too), is
    redacted as it is made: its message formatted and masked, its traceback too."""
    import logging  # here: a command its daemon answers never logs, nor imports logging

    if getattr(logging.getLogRecordFactory(), "redacts", False):
        return
    make = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # a bad format: logging reports it later, as it would have
            return record
        record.msg, record.args = redact(message), None
        if record.exc_info and record.exc_info[1] is not None:
            record.exc_text = redact(logging.Formatter().formatException(record.exc_info))
        return record

    factory.redacts = True  # type: ignore[attr-defined]
    logging.setLogRecordFactory(factory)
