"""Memories as Markdown: the file format the write API uses, parsed and edited line by line. Pure.

A memory file is a Markdown file whose front matter says ``memcore: memories`` and names its
scope and category. Every top-level list item in it is one memory; its id and fields ride in an
HTML comment at the end of the item, which renders as nothing::

    ---
    memcore: memories
    user_id: alice
    category: core
    ---
    # Memories of alice: core

    - Prefers dark mode in every editor. <!-- memcore {"id": "m-3f9a1c2b7d4e5f60", ...} -->
    - Allergic to peanuts.
      Carries an EpiPen. <!-- memcore {"id": "m-0b1c...", "key": "allergy", ...} -->

People edit the text freely: a changed text keeps its id (an update), deleted lines are a
delete, and an item added by hand without a comment gets a stable id derived from its file and
text until memcore next writes that file and records it. Lines that are not items are kept
as they are and never rewritten.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
import hashlib
import json
import os
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from memcore.core.errors import InputError
from memcore.core.ids import check_id, folder_name
from memcore.core.models import SCOPE_KEYS, TURNS_CATEGORY, MemoryRecord, ScopeIds
from memcore.core.moments import utc_moment

MARK = "memories"  # front matter `memcore: memories`
_COMMENT = re.compile(r"<!--\s*memcore\s+(\{.*\})\s*-->\s*$")
_ITEM = re.compile(r"^[-*+] ")
_NAME = re.compile(r"[^\W_][\w.\-@]{0,127}")  # letters/digits in any script, then . - _ @
MAX_CONTENT_BYTES = 1_000_000
# the folders of a scope's files, outermost first: memory/apps/<a>/users/<u>/agents/<g>/runs/<r>
SCOPE_FOLDERS = (("apps", "app_id"), ("users", "user_id"), ("agents", "agent_id"),
                 ("runs", "run_id"))  # fmt: skip
CATEGORIES = ("core", "daily", TURNS_CATEGORY)


@dataclass(frozen=True, slots=True)
class Scope:
    """Whose memory it is. All None: shared, like the vault's own notes."""

    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    app_id: str | None = None

    def __post_init__(self) -> None:
        for name in SCOPE_KEYS:
            value = getattr(self, name)
            if value is not None:
                check_id(value, name)

    @classmethod
    def of(cls, fields: Mapping[str, object]) -> Scope:
        """The scope named by a mapping's user_id, agent_id, run_id and app_id (others
        ignored; an empty value is no value)."""
        values = {k: fields.get(k) or None for k in SCOPE_KEYS}
        return cls(**values)  # type: ignore[arg-type]

    @property
    def empty(self) -> bool:
        return all(getattr(self, k) is None for k in SCOPE_KEYS)

    def folder(self) -> str:
        """Where this scope's files live under memory/: apps/x/users/alice/agents/bot/runs/r1
        (each id as ``folder_name`` encodes it)."""
        return "/".join(
            f"{kind}/{folder_name(value)}"
            for kind, key in SCOPE_FOLDERS
            if (value := getattr(self, key)) is not None
        )

    def to_dict(self) -> ScopeIds:
        return ScopeIds(
            user_id=self.user_id, agent_id=self.agent_id, run_id=self.run_id, app_id=self.app_id
        )


def check_name(value: str, what: str) -> str:
    """A scope or category name becomes a folder or file name: no paths, no control bytes."""
    if not isinstance(value, str) or not _NAME.fullmatch(value) or ".." in value:
        shown = value if isinstance(value, str) and len(value) <= 40 else f"{str(value)[:40]}..."
        raise InputError(
            f"{what} {shown!r} is not a valid name: use 1-128 letters, digits, '.', '-', '_' "
            "or '@', starting with a letter or digit"
        )
    return value


def check_content(text: str) -> str:
    """A memory's text: not blank, not over 1 MB, no NUL bytes, valid Unicode. Returned as
    given: the file keeps it exactly (see ``render_item``)."""
    if not isinstance(text, str):
        raise InputError("memory content must be text")
    if not text.strip():
        raise InputError("memory content is empty")
    try:
        size = len(text.encode("utf-8"))  # a lone surrogate cannot be encoded
    except UnicodeEncodeError:
        raise InputError("memory content is not valid text (invalid UTF-8)") from None
    if size > MAX_CONTENT_BYTES:
        raise InputError(f"memory content is over {MAX_CONTENT_BYTES:,} bytes")
    if "\x00" in text:
        raise InputError("memory content is not valid text (NUL byte)")
    return text


def check_metadata(metadata: object) -> dict[str, object]:
    """Metadata is a JSON object (string keys, JSON values)."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(isinstance(k, str) for k in metadata):
        raise InputError("metadata must be a JSON object with string keys")
    try:
        return dict(json.loads(_STRICT_JSON.encode(dict(metadata))))
    except (TypeError, ValueError) as exc:
        raise InputError(f"metadata is not JSON: {exc}") from None


# A new id's 8 random bytes come from the OS's source 4 KB at a time: one getrandom a new
# id (secrets.token_hex) let go of the GIL and waited to take it back, 8.8 s of a 1M load's
# main thread (py-spy) against ~0.6 us a call alone. A fork starts its own pool.
_RANDOM = bytearray()
_RANDOM_LOCK = threading.Lock()


def _fresh_pool() -> None:
    """In a forked child: none of the parent's bytes, and a lock no parent thread holds."""
    global _RANDOM_LOCK
    _RANDOM_LOCK = threading.Lock()
    _RANDOM.clear()


os.register_at_fork(after_in_child=_fresh_pool)


def new_id() -> str:
    with _RANDOM_LOCK:
        if not _RANDOM:
            _RANDOM.extend(os.urandom(4096))
        raw = bytes(_RANDOM[-8:])
        del _RANDOM[-8:]
    return "m-" + raw.hex()


def derived_id(path: str, text: str) -> str:
    """A hand-written item's id until memcore records one: stable while its text is."""
    return "h-" + hashlib.sha1(f"{path}\n{text}".encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One memory as written in its file. Lines are 1-based and inclusive."""

    id: str
    text: str
    key: str | None = None
    created: str = ""
    updated: str = ""
    metadata: Mapping[str, object] = field(default_factory=dict)
    start_line: int = 0
    end_line: int = 0
    recorded: bool = True  # False: no comment in the file yet (a hand-added item)
    expires: str | None = None  # an ISO date: reads leave it out after that day (UTC)
    immutable: bool = False  # the API refuses to change it (a person still may)

    def fields(self) -> dict[str, object]:
        out: dict[str, object] = {"id": self.id}
        if self.key is not None:
            out["key"] = self.key
        out |= {"created": self.created, "updated": self.updated}
        if self.metadata:
            out["metadata"] = dict(self.metadata)
        if self.expires is not None:
            out["expires"] = self.expires
        if self.immutable:
            out["immutable"] = True
        if visible_text(self.text) != self.text:
            out["text"] = self.text  # what the item's lines cannot say exactly (see render_item)
        return out


class MemoryFile:
    """A parsed memory file: its scope, category and items, plus its lines for editing.

    The items are parsed when first asked for: an append to a page of a thousand memories
    needs none of them when every item is known to carry its id in its comment
    (``recorded``, see ``holds``), and parsing them all was most of a batch's page writes."""

    __slots__ = (
        "_first",
        "_ids",
        "_items",
        "_path",
        "category",
        "lines",
        "recorded",
        "scope",
        "text",
    )

    def __init__(
        self,
        scope: Scope,
        category: str,
        items: tuple[MemoryItem, ...] | None,
        lines: tuple[str, ...],
        *,
        path: str = "",
        first: int = 0,
        text: str | None = None,
    ) -> None:
        self.scope = scope
        self.category = category
        self.lines = lines
        self.text = "\n".join(lines) if text is None else text
        # every item's id is written in its comment (none was added by hand since memcore
        # last wrote this text): known to the writer that wrote it (see file_writes._apply)
        self.recorded = False
        self._items = items  # None: parsed from lines ``first`` on when asked for
        self._ids: frozenset[str] | None = None
        self._path = path
        self._first = first

    @property
    def items(self) -> tuple[MemoryItem, ...]:
        if self._items is None:  # two threads may both parse: the same items either way
            spans = _item_spans(self.lines, self._first)
            self._items = tuple(_item(self._path, self.lines, s, e) for s, e in spans)
        return self._items

    def count(self) -> int:
        """How many items it holds, without parsing them."""
        if self._items is None:
            return len(_item_spans(self.lines, self._first))
        return len(self._items)

    def holds(self, memory_id: str) -> bool:
        """Whether an item has this id. When every id is written in the text (``recorded``),
        an id the text does not contain is answered without parsing an item; an item added by
        hand has an id derived from its text, which only a parse can say."""
        if self.recorded and memory_id not in self.text:
            return False
        if self._ids is None:
            self._ids = frozenset(i.id for i in self.items)
        return memory_id in self._ids

    def unrecorded(self) -> list[MemoryItem]:
        """The items added by hand, whose ids are not written in the file yet."""
        return [] if self.recorded else [i for i in self.items if not i.recorded]

    def find(self, memory_id: str) -> MemoryItem | None:
        return next((i for i in self.items if i.id == memory_id), None)

    def find_key(self, key: str) -> MemoryItem | None:
        return next((i for i in self.items if i.key == key), None)

    def record(self, item: MemoryItem, path: str) -> MemoryRecord:
        """One of its items as a record of the memory at ``path``, with the item's lines."""
        return MemoryRecord(
            id=item.id, text=item.text, path=path, start_line=item.start_line,
            end_line=item.end_line, category=self.category, user_id=self.scope.user_id,
            agent_id=self.scope.agent_id, run_id=self.scope.run_id, app_id=self.scope.app_id,
            key=item.key,
            created=item.created, updated=item.updated, metadata=item.metadata,
            expiration_date=item.expires, immutable=item.immutable,
        )  # fmt: skip


def is_memory_file(front_matter: Mapping[str, object]) -> bool:
    return front_matter.get("memcore") == MARK


def parse_memory_file(
    path: str, front_matter: Mapping[str, object], text: str, first_body_line: int
) -> MemoryFile:
    """Items of a memory file, parsed when asked for; never raises (a malformed comment makes
    a hand-added item)."""
    scope, category = file_scope(front_matter)
    lines = tuple(text.split("\n"))
    return MemoryFile(scope, category, None, lines, path=path, first=first_body_line, text=text)


def file_scope(front_matter: Mapping[str, object]) -> tuple[Scope, str]:
    """The scope and category a memory file's front matter names."""
    scope_values = {}
    for name in SCOPE_KEYS:
        raw = front_matter.get(name)
        scope_values[name] = str(raw) if raw not in (None, "") else None
    try:
        scope = Scope(**scope_values)
    except InputError:
        scope = Scope()  # a hand-broken scope name: shared, rather than lost
    return scope, str(front_matter.get("category") or "core")


def tail_items(path: str, tail: str, first_line: int) -> tuple[MemoryItem, ...] | None:
    """The items ``parse_memory_file`` finds in ``tail``, the end of a memory file from line
    ``first_line`` (0-based) on, when what comes before it ends with a whole item (only blank
    lines after it) and the tail's first line that is not blank starts a new item. None
    otherwise: the tail could continue the item before it, and only a whole parse can say."""
    lines = tail.split("\n")
    first = next((line for line in lines if line.strip()), None)
    if first is None or not _ITEM.match(first):
        return None
    return tuple(
        _placed(path, "\n".join(lines[start : end + 1]), start + first_line, end + first_line)
        for start, end in _item_spans(lines, 0)
    )


def count_items(text: str, first_body_line: int) -> int:
    """How many items ``parse_memory_file`` finds in a memory file's text, without building
    them (what paging needs of a long page)."""
    return len(_item_spans(text.split("\n"), first_body_line))


def _item_spans(lines: Sequence[str], first: int) -> list[tuple[int, int]]:
    """0-based inclusive line spans of top-level list items at or after line ``first``."""
    spans: list[tuple[int, int]] = []
    start: int | None = None
    last = 0
    in_fence = False
    for n in range(first, len(lines)):
        line = lines[n]
        if start is None and line.lstrip().startswith(("```", "~~~")):
            in_fence = not in_fence
        if in_fence:
            continue
        if _ITEM.match(line):
            if start is not None:
                spans.append((start, last))
            start, last = n, n
        elif start is not None and line.startswith(("  ", "\t")) and line.strip():
            last = n
        elif start is not None and line.strip():
            spans.append((start, last))
            start = None
    if start is not None:
        spans.append((start, last))
    return spans


def _item(path: str, lines: Sequence[str], start: int, end: int) -> MemoryItem:
    return _placed(path, "\n".join(lines[start : end + 1]), start, end)


@functools.lru_cache(maxsize=65_536)
def _placed(path: str, block: str, start: int, end: int) -> MemoryItem:
    """The item of a block at its lines. Cached as well: an append leaves every other item
    of the file where it was, and placing one (a dataclass replace) costs more than parsing."""
    return dataclasses.replace(_item_of_block(path, block), start_line=start + 1, end_line=end + 1)


@functools.lru_cache(maxsize=65_536)
def _item_of_block(path: str, block: str) -> MemoryItem:
    """An item's fields from its raw lines. Cached: a write to a file of a thousand memories
    re-reads it, and all but the changed ones parse to what they did before."""
    body = block.split("\n")
    body = [body[0][2:]] + [_dedent(line) for line in body[1:]]
    fields: dict[str, object] = {}
    at = body[-1].rfind("<!--")  # memcore's comment is last, and its JSON holds no "<"
    match = _COMMENT.match(body[-1], at) if at >= 0 else None
    if match:
        try:
            loaded = json.loads(match.group(1))
            fields = loaded if isinstance(loaded, dict) else {}
        except ValueError:
            fields = {}
        if fields.get("id"):
            body[-1] = body[-1][:at]
    text = "\n".join(body).strip()
    exact = fields.get("text")
    if isinstance(exact, str) and visible_text(exact) == text:
        text = exact  # unless a person has edited the lines since memcore wrote them
    meta = fields.get("metadata")
    key = fields.get("key")
    expires = fields.get("expires")
    return MemoryItem(
        id=str(fields.get("id") or derived_id(path, text)),
        text=text,
        key=str(key) if key is not None else None,
        created=str(fields.get("created") or ""),
        updated=str(fields.get("updated") or ""),
        metadata=meta if isinstance(meta, dict) else {},
        recorded=bool(fields.get("id")),
        # a date edited into something else is no expiry (the memory stays visible)
        expires=expires if isinstance(expires, str) and _is_day(expires) else None,
        immutable=fields.get("immutable") is True,
    )


def _is_day(text: str) -> bool:
    try:
        return len(text) == 10 and bool(dt.date.fromisoformat(text))
    except ValueError:
        return False


def check_expiry(value: object) -> str | None:
    """An expiration date as memcore keeps it: an ISO date (Mem0's ``YYYY-MM-DD``); the
    memory is visible through that day (UTC) and hidden from the next."""
    if value is None:
        return None
    if not isinstance(value, str) or not _is_day(value):
        raise InputError(f"expiration_date must be a date like 2025-12-31, got {value!r}")
    return value


def check_moment(value: object) -> str | None:
    """A ``timestamp`` (Mem0's: Unix seconds; or an ISO date / date and time) as memcore's
    created time: ISO 8601 in UTC, to the second."""
    if value is None:
        return None
    try:
        return utc_moment(value)
    except ValueError:
        raise InputError(
            f"timestamp must be Unix seconds or an ISO time like 2024-05-31T09:00:00Z, "
            f"got {value!r}"
        ) from None


def _dedent(line: str) -> str:
    if line.startswith("\t"):
        return line[1:]
    return line[2:] if line.startswith("  ") else line.lstrip(" ")


def _text_lines(text: str) -> list[str]:
    """The item's text as list-item lines: ``- first``, the rest indented two spaces. Carriage
    returns end lines on reading, as they would in any editor."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return ["- " + lines[0]] + [("  " + t) if t.strip() else "" for t in lines[1:]]


@functools.lru_cache(maxsize=65_536)
def visible_text(text: str) -> str:
    """What ``text`` reads back as from its item's lines alone: the same text for almost
    every memory. Where it differs (surrounding white space, carriage returns, blank-looking
    lines with spaces), the exact text rides in the item's comment as well."""
    first, *rest = _text_lines(text)
    return "\n".join([first[2:], *map(_dedent, rest)]).strip()


_JSON = json.JSONEncoder(ensure_ascii=False)  # one encoder, not one per call (20k-item writes)
_STRICT_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False)


def _comment_json(fields: Mapping[str, object]) -> str:
    """The fields as JSON with no ``<`` or ``>`` in it, so that nothing inside can open or
    close an HTML comment (JSON's own syntax has neither character)."""
    return _JSON.encode(dict(fields)).replace("<", "\\u003c").replace(">", "\\u003e")


def render_item(item: MemoryItem) -> list[str]:
    """The item's lines: ``- text`` (continuations indented) with its comment at the end.
    Raises InputError if they would not read back as this item (nothing is written then)."""
    out = _text_lines(item.text)
    if len(out) > 1 and not out[-1]:
        out[-1] = "  "  # the comment's line must stay indented, or it leaves the item
    out[-1] = f"{out[-1]} <!-- memcore {_comment_json(item.fields())} -->"
    if _reads_back(item.text):
        return out
    back = _item_of_block("", "\n".join(out))
    if _item_spans(out, 0) != [(0, len(out) - 1)] or (
        back.id,
        back.text,
        back.key,
        dict(back.metadata),
    ) != (item.id, item.text, item.key, dict(item.metadata)):
        raise InputError(f"memory {item.id} cannot be written so that it reads back the same")
    return out


def _reads_back(text: str) -> bool:
    """Whether a text certainly reads back as itself from ``- text <!-- memcore {...} -->``
    without parsing it again: one line, no comment opener of its own (the reader looks for
    the last one), nothing around it that reading strips. Everything else is checked."""
    return "\n" not in text and "\r" not in text and "<!--" not in text and text == text.strip()


def new_memory_file(scope: Scope, category: str) -> str:
    """The text of an empty memory file for a scope and category."""
    front = ["---", f"memcore: {MARK}"]
    for name, value in scope.to_dict().items():
        if value is not None:
            front.append(f"{name}: {json.dumps(value, ensure_ascii=False)}")
    front += [f"category: {json.dumps(category, ensure_ascii=False)}", "---"]
    whose = ", ".join(f"{k.removesuffix('_id')} {v}" for k, v in scope.to_dict().items() if v)
    title = f"# Memories: {category}" + (f" ({whose})" if whose else "")
    return "\n".join([*front, title, ""]) + "\n"


def edit_lines(
    lines: Sequence[str],
    replace: Mapping[str, list[str]],
    items: Sequence[MemoryItem],
    append: Sequence[list[str]] = (),
) -> str:
    """The file with some items' lines replaced (an empty list deletes the item) and new items
    appended; every other line stays exactly as it was."""
    out: list[str] = []
    spans = {i.start_line - 1: i for i in items}
    n = 0
    while n < len(lines):
        item = spans.get(n)
        if item is not None and item.id in replace:
            out += replace[item.id]
            n = item.end_line
            continue
        out.append(lines[n])
        n += 1
    while out and not out[-1].strip():
        out.pop()
    if append and out and not (_ITEM.match(out[-1]) or out[-1].startswith(("  ", "\t"))):
        out.append("")  # a blank line between a heading or paragraph and the first item
    for new in append:
        out += new
    return "\n".join(out) + "\n"
