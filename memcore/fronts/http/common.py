"""What every HTTP route group shares: requests parsed and validated against their types
(schemas.py), responses serialized through theirs, the token's scope, and the one mapping of
memcore's errors to statuses and one-line JSON errors (``{"error": {"code", "message"}}``)."""

from __future__ import annotations

import errno
import functools
import json
import re
import tempfile
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import IO, TYPE_CHECKING, Any, TypeVar, overload

import numpy as np
from pydantic import BaseModel, TypeAdapter, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from memcore.core.errors import (
    ConfigError,
    Forbidden,
    InputError,
    KeyReused,
    LLMError,
    MemcoreError,
    NotFound,
    StorageBusy,
    StorageError,
    StorageFull,
    VaultError,
    WriteConflict,
    validation_message,
)
from memcore.core.models import LOCAL, SCOPE_KEYS, Caller, Entity
from memcore.core.redact import redact
from memcore.storage.base import Vector

if TYPE_CHECKING:
    from memcore.memory.port import Memory
    from memcore.service import MemoryService

MAX_BODY = 2_000_000  # a memory may hold 1 MB of text; JSON escaping can double it
# A whole transcript (PUT /api/conversations/{id}): 20k tool-calling messages are ~4 MB.
MAX_TRANSCRIPT_BODY = 64_000_000
Handler = Callable[[Request], Awaitable[Response]]


class BadRequest(Exception):
    """A request memcore cannot take: 400 with this message."""


class TooLarge(BadRequest):
    """A body over the route's size limit: 413."""


def body_limit(method: str, path: str) -> int:
    """The largest body a route takes (see docs/http-api.md)."""
    if method == "PUT" and path.startswith("/api/conversations/"):
        return MAX_TRANSCRIPT_BODY
    return MAX_BODY


def scope_fields(data: BaseModel) -> dict[str, Any]:
    """The user_id, agent_id and run_id a request names (the service binds them)."""
    return data.model_dump(include=set(SCOPE_KEYS))


def caller_of(request: Request) -> Caller:
    """Who sent the request (the Guard in app.py names it from the token): its identity and
    the scope its token holds it to. The service applies the rule (memory/access.py)."""
    return request.scope.get("state", {}).get("caller") or LOCAL


def memories_of(service: MemoryService, request: Request) -> Memory:
    """The memory operations as the request's caller may use them (every route's way in)."""
    return service.memories_for(caller_of(request))


CODES = {
    400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
    405: "method_not_allowed", 409: "conflict", 413: "too_large", 415: "unsupported_media_type",
    421: "misdirected_request", 422: "key_reused", 500: "internal", 501: "not_implemented",
    502: "upstream_failed", 503: "busy",
    507: "insufficient_storage",
}  # fmt: skip


def entities_page(
    entities: Sequence[Entity], request: Request, page: int = 1, size: int | None = None
) -> dict[str, Any]:
    """Mem0's users() answer (the entities the caller may see: ScopedMemory.entities), one
    page of ``size`` (all of them without one); ``count`` is the total."""
    size = size or max(len(entities), 1)
    part = entities[(page - 1) * size : page * size]
    rows = [{"id": e.name, **e.to_dict(), "owner": None, "organization": None, "metadata": {}}
            for e in part]  # fmt: skip
    return {"count": len(entities), "results": rows, **links(page, size, len(entities), request)}


def links(
    page: int, size: int, total: int, request: Request, name: str = "page_size"
) -> dict[str, str | None]:
    """A page's ``next`` and ``previous``: this request's full URL, every query parameter
    kept, on the other page (None past either end). A listing whose filters came in its body
    (POST) is continued by sending the same body to that URL, as on Mem0's platform."""

    def at(n: int) -> str:
        return str(request.url.include_query_params(page=n, **{name: size}))

    return {
        "next": at(page + 1) if page * size < total else None,
        "previous": at(page - 1) if page > 1 else None,
    }


def error(status: int, message: str) -> JSONResponse:
    """The one error shape: ``{"error": {"code": "not_found", "message": "one line"}}``."""
    line = redact(" ".join(message.split())) or CODES.get(status, "error")
    body = {"error": {"code": CODES.get(status, "error"), "message": line}}
    return JSONResponse(body, status_code=status)


STATUS: list[tuple[type[Exception], int]] = [
    (TooLarge, 413),
    (BadRequest, 400),
    (KeyReused, 422),
    (Forbidden, 403),
    (InputError, 400),
    (ConfigError, 400),
    (NotFound, 404),
    (WriteConflict, 409),
    (VaultError, 409),
    (StorageFull, 507),
    (StorageBusy, 503),
    (StorageError, 503),  # the index cannot be reached (a database down): not the caller's fault
    (LLMError, 502),
    (MemcoreError, 500),
]


# Resources the machine ran out of, wherever in a write it happened: 507 (the disk) and 503
# (file handles), with the cause named, never a 409 "conflict" or a 500
EXHAUSTED = {
    errno.ENOSPC: (507, "the disk is full"),
    errno.EDQUOT: (507, "the disk quota is used up"),
    errno.EMFILE: (503, "the server has no file handles left"),
    errno.ENFILE: (503, "the machine has no file handles left"),
}


def exhausted(exc: BaseException) -> tuple[int, str] | None:
    """The status and message for an error caused by a full disk or no file handles."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in EXHAUSTED:
            status, cause = EXHAUSTED[seen.errno]
            return status, f"{cause}: {exc}"
        seen = seen.__cause__ or seen.__context__
    return None


def handle(fn: Handler) -> Handler:
    """Map memcore's errors to one-line JSON responses (the one place that does)."""

    @functools.wraps(fn)
    async def wrapped(request: Request) -> Response:
        try:
            return await fn(request)
        except Exception as exc:
            if (short := exhausted(exc)) is not None:
                return error(*short)
            for kind, status in STATUS:
                if isinstance(exc, kind):
                    return error(status, str(exc))
            raise

    return wrapped


MAX_DEPTH = 32  # nesting of a request body: metadata deeper than this is refused
B = TypeVar("B", bound=BaseModel)


def _unique(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose keys are all different: a repeated key is refused (JSON leaves it
    undefined which one counts; a proxy and memcore could read two different requests)."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"the key {key!r} appears twice in one object")
            seen.add(key)
    return out


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not a JSON number")


# Only a \\u escape of a surrogate can put one in a string json.loads returns (raw UTF-8
# cannot hold one), so a body without such an escape needs no string-by-string check.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def check_json(data: Any, strings: bool = True, depth: int = 1) -> None:
    """Refuse what JSON allows and memcore cannot store: nesting deeper than MAX_DEPTH, and
    (with ``strings``) strings with lone surrogates ("\\ud800"), which are not Unicode text."""
    stack = [(data, depth)]  # depth: how deep ``data`` stands in the body
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise BadRequest(f"the body is nested deeper than {MAX_DEPTH} levels")
        if isinstance(value, dict):
            if strings:
                stack += [(k, depth) for k in value]
            stack += [(v, depth + 1) for v in value.values() if isinstance(v, dict | list | str)]
        elif isinstance(value, list):
            stack += [(v, depth + 1) for v in value if isinstance(v, dict | list | str)]
        elif strings and isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError:
                raise BadRequest("a string holds a lone surrogate (not Unicode text)") from None


def one_line(exc: ValidationError) -> str:
    return validation_message(exc.errors(include_url=False, include_context=False))


async def parsed(request: Request, model: type[B]) -> B:
    """The JSON body, validated against ``model`` (schemas.py): a one-line 400 otherwise."""
    raw = await request.body()
    try:
        data = json.loads(raw or b"{}", parse_constant=_no_constant, object_pairs_hook=_unique)
    except RecursionError:
        raise BadRequest(f"the body is nested deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:
        raise BadRequest(f"the body is not JSON: {exc}") from None
    if not isinstance(data, dict):
        raise BadRequest("the body must be a JSON object")
    check_json(data, strings=_SURROGATE_ESCAPE.search(raw) is not None)
    return validated(model, data)


SPOOL_IN_MEMORY = 1_000_000  # a body past this is spooled to a temporary file, not kept


async def spooled(request: Request) -> IO[bytes]:
    """The body, streamed into a temporary file (in memory while small): a large body is
    never one bytes object, and reading it never holds the event loop (the Guard's cap on
    its size applies as it streams)."""
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL_IN_MEMORY)  # noqa: SIM115 - returned
    try:
        async for chunk in request.stream():
            spool.write(chunk)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool


_SPACE = re.compile(r"[ \t\n\r]*")


class _Scan:
    """A JSON text read a value at a time (json's own raw_decode): see ``parsed_list``."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.at = 0
        self.decoder = json.JSONDecoder(parse_constant=_no_constant, object_pairs_hook=_unique)

    def peek(self) -> str:
        """The next character that is not white space ("" at the end)."""
        self.at = _SPACE.match(self.text, self.at).end()  # type: ignore[union-attr]
        return self.text[self.at : self.at + 1]

    def take(self, char: str, what: str) -> None:
        if self.peek() != char:
            raise BadRequest(f"the body is not JSON: expected {what} at char {self.at}")
        self.at += 1

    def value(self) -> Any:
        self.peek()
        try:
            found, self.at = self.decoder.raw_decode(self.text, self.at)
        except RecursionError:
            raise BadRequest(f"the body is nested deeper than {MAX_DEPTH} levels") from None
        except ValueError as exc:
            raise BadRequest(f"the body is not JSON: {exc}") from None
        return found


class JsonItems(Sequence[dict[str, Any]]):
    """Validated items of a JSON list, each kept as its compact JSON text and parsed again
    when read: 200k messages cost ~50 MB of short strings, not 200k dicts (~150 MB), and
    reading one is a short json.loads (C code that holds the GIL only for that item)."""

    def __init__(self, texts: list[str]) -> None:
        self._texts = texts

    def __len__(self) -> int:
        return len(self._texts)

    @overload
    def __getitem__(self, index: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, index: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, index: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(index, slice):
            return [json.loads(text) for text in self._texts[index]]
        loaded: dict[str, Any] = json.loads(self._texts[index])
        return loaded


def parsed_list(spool: IO[bytes], field: str, model: type[BaseModel]) -> JsonItems:
    """A body ``{"<field>": [...]}`` (nothing else), its items validated against ``model``
    and read back dumped as they came (fields not sent stay out; see ``JsonItems``).
    Blocking: run it in a worker thread. The items are parsed and validated one at a time,
    so no single step holds the GIL for long (the event loop's thread answers meanwhile);
    errors are one line naming the item (``messages.3.role: ...``)."""
    with spool:
        try:
            scan = _Scan(spool.read().decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise BadRequest(f"the body is not UTF-8 ({exc.reason})") from None
    if not scan.peek():  # an empty body is an empty object, as ``parsed`` reads it
        raise BadRequest(f"missing field(s): {field}")
    if scan.peek() != "{":
        raise BadRequest("the body must be a JSON object")
    scan.at += 1
    if scan.peek() == "}":
        raise BadRequest(f"missing field(s): {field}")
    if (key := scan.value()) != field:
        raise BadRequest(f"unknown field(s): {key}")
    scan.take(":", "':'")
    scan.take("[", f"a list for {field}")
    texts: list[str] = []
    if scan.peek() == "]":
        scan.at += 1
    else:
        while True:
            item = _item(scan.value(), field, len(texts), model)
            texts.append(json.dumps(item, ensure_ascii=False, separators=(",", ":")))
            if scan.peek() == "]":
                scan.at += 1
                break
            scan.take(",", "',' or ']'")
    if scan.peek() == ",":
        scan.at += 1
        again = scan.value()
        what = "appears twice in one object" if again == field else "is an unknown field"
        raise BadRequest(f"the key {again!r} {what}")
    scan.take("}", "'}'")
    if scan.peek():
        raise BadRequest("the body is not JSON: extra data after the object")
    return JsonItems(texts)


def _item(value: Any, field: str, n: int, model: type[BaseModel]) -> dict[str, Any]:
    check_json(value, depth=3)  # the body, its list, then the item
    try:
        return model.model_validate(value).model_dump(exclude_unset=True)
    except ValidationError as exc:
        errors = [
            {**e, "loc": (field, n, *e.get("loc", ()))}
            for e in exc.errors(include_url=False, include_context=False)
        ]
        raise BadRequest(validation_message(errors)) from None


def query_of(request: Request, model: type[B]) -> B:
    """The query parameters, validated against ``model``: a one-line 400 otherwise."""
    params = dict(request.query_params)
    check_json(params)
    return validated(model, params)


def validated(model: type[B], data: Mapping[str, Any]) -> B:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise BadRequest(one_line(exc)) from None


@functools.cache
def _adapter(kind: Any) -> TypeAdapter[Any]:
    return TypeAdapter(kind)


def reply(
    kind: Any, data: Any, status: int = 200, headers: Mapping[str, str] | None = None
) -> Response:
    """``data`` serialized through its response type ``kind`` (a model, or ``list[Model]``):
    fields the data leaves out stay out."""
    adapter = _adapter(kind)
    body = adapter.dump_json(adapter.validate_python(data), exclude_unset=True)
    return Response(body, status_code=status, media_type="application/json", headers=headers)


@dataclass(frozen=True, slots=True)
class Contract:
    """What a route takes and answers, for the OpenAPI document (app.py)."""

    out: Any
    body: type[BaseModel] | None = None
    query: type[BaseModel] | None = None
    summary: str = ""
    # path parameter -> where the answer holds a value for it ("$response.body#/results/0/id"):
    # OpenAPI links to the operations that take it (a fuzzer follows them)
    links: Mapping[str, str] | None = None


def contract(
    out: Any,
    body: type[BaseModel] | None = None,
    query: type[BaseModel] | None = None,
    links: Mapping[str, str] | None = None,
) -> Callable[[Handler], Handler]:
    """Mark a handler with its request and response types (read by the OpenAPI document)."""

    def mark(fn: Handler) -> Handler:
        doc = (fn.__doc__ or "").strip().split("\n")[0]
        fn.contract = Contract(out, body, query, doc, links)  # type: ignore[attr-defined]
        return fn

    return mark


def vector_of(values: list[Any] | None) -> Vector | None:
    """A query vector from JSON: a list of numbers (the searcher rejects an empty, zero or
    non-finite one, and one of the wrong size, with a one-line 400)."""
    if values is None:
        return None
    if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        raise BadRequest("query_vector must be a list of numbers")
    return np.asarray(values, dtype=np.float32)
