"""Heading-aware Markdown chunking with markdown-it-py: text in, Chunk values out. Pure."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import re
import threading
from dataclasses import dataclass, field
from functools import lru_cache, partial
from typing import TYPE_CHECKING, Any

from memcore.core.lru import ByIdentity
from memcore.core.models import Chunk
from memcore.vault.files import text_hash
from memcore.vault.memory_format import (
    MemoryFile,
    MemoryItem,
    count_items,
    file_scope,
    is_memory_file,
    parse_memory_file,
    tail_items,
)

if TYPE_CHECKING:
    from markdown_it import MarkdownIt
    from markdown_it.token import Token

_HASHTAG = re.compile(r"(?<![\w/#&])#([^\W\d_][\w\-/]*)")
# #ff0000, #a1b2c3ff: a colour in prose, not a tag (a hex word with a digit in it)
_HEX_COLOUR = re.compile(r"(?=[0-9a-fA-F]*\d)(?:[0-9a-fA-F]{3,4}|[0-9a-fA-F]{6}|[0-9a-fA-F]{8})")
_DATE_IN_NAME = re.compile(r"(\d{4}-\d{2}-\d{2})")
# "Date: 2023/05/21 (Sun) 19:50", "**Date:** 8 May, 2023" near the top of a file
_DATE_LINE = re.compile(r"^\s*(?:[*_]{1,2})?date(?:[*_]{1,2})?\s*:\s*(?:[*_]{1,2})?(.+)$", re.I)
_ISO_DAY = re.compile(r"\b(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})\b")
_DAY_MONTH_YEAR = re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+([A-Za-z]{3,9})\.?,?\s+(\d{4})\b")
_MONTH_DAY_YEAR = re.compile(r"\b([A-Za-z]{3,9})\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b")
_MONTHS = {
    m: i
    for i, m in enumerate(
        ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"),
        start=1,
    )
}
_LINE = re.compile(r"^.*$", re.M)
DATE_LINE_SCAN = 6  # non-blank body lines searched for a "Date:" line

# Bump when a change here alters the chunks of unchanged files: indexes re-chunk on next run.
CHUNKER_VERSION = 4  # 4: a file of headings alone is one chunk
_FRONT_MATTER_END = ("---", "...")


@dataclass(frozen=True, slots=True)
class ChunkerConfig:
    chunk_tokens: int = 200
    overlap_tokens: int = 25
    chars_per_token: int = 4
    split: str = "window"  # "window": pack paragraphs up to chunk_tokens; "paragraph": one each

    @property
    def max_chars(self) -> int:
        return self.chunk_tokens * self.chars_per_token

    @property
    def overlap_chars(self) -> int:
        return self.overlap_tokens * self.chars_per_token


@dataclass(slots=True)
class _Unit:
    """A piece of a block that fits in one window; lines are 1-based inclusive."""

    start: int
    end: int
    text: str
    sep: str  # what joins it to the previous unit in a chunk
    tags: frozenset[str] = frozenset()


@dataclass(slots=True)
class _Section:
    heading_path: tuple[str, ...]
    units: list[_Unit] = field(default_factory=list)
    has_body: bool = False


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt  # only when a file is chunked: a search never needs it

    return MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])


def split_front_matter(text: str) -> tuple[dict[str, Any], int, str | None]:
    """Front matter as a dict, the number of lines it spans, and a parse error if any."""
    lines = text.split("\n", 400)  # only the head: front matter ends within 400 lines
    if not lines or lines[0].strip() != "---":
        return {}, 0, None
    for i in range(1, min(len(lines), 400)):
        if lines[i].strip() in _FRONT_MATTER_END:
            data, error = _yaml("\n".join(lines[1:i]))
            if error is not None:
                return {}, i + 1, error
            if data is None:
                return {}, i + 1, None
            if not isinstance(data, dict):
                return {}, i + 1, "front matter ignored: not a mapping"
            return {str(k): _json_safe(v) for k, v in data.items()}, i + 1, None
    return {}, 0, None


@lru_cache(maxsize=16_384)
def _yaml(block: str) -> tuple[Any, str | None]:
    """A front matter block's YAML (and the parse error, if any). Cached: a memory file's
    front matter stays the same across the writes to it, and YAML is slow to read. Callers
    copy what they keep (split_front_matter builds its dict anew)."""
    simple = _plain_front_matter(block)
    if simple is not None:
        return simple, None
    import yaml  # only when there is front matter to read

    try:
        return yaml.safe_load(block), None
    except yaml.YAMLError as exc:
        first = str(exc).splitlines()[0] if str(exc) else "invalid YAML"
        return None, f"front matter ignored: {first}"


_PLAIN_LINE = re.compile(r'([A-Za-z_][\w-]*): ("(?:[^"\\]|\\.)*"|[A-Za-z][\w-]*)')
_YAML_WORDS = frozenset({"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"})


def _plain_front_matter(block: str) -> dict[str, str] | None:
    """Front matter as memcore writes it (``key: "a JSON string"`` or ``key: word``, one a
    line), read without YAML, which takes a thousand times longer; None for anything else
    (YAML reads it then). JSON strings are YAML's double-quoted ones."""
    out: dict[str, str] = {}
    for line in block.split("\n"):
        m = _PLAIN_LINE.fullmatch(line)
        if m is None or m[1] in out:
            return None
        value = m[2]
        if value.startswith('"'):
            try:
                out[m[1]] = json.loads(value)
            except ValueError:
                return None
        elif value.lower() in _YAML_WORDS:
            return None
        else:
            out[m[1]] = value
    return out or None


def memory_file_of(
    path: str, text: str, front: tuple[dict[str, Any], int] | None = None
) -> MemoryFile | None:
    """The file's memories when its front matter marks it a memory file, else None
    (``front``: its front matter and the lines it spans, when the caller has read them).

    The last parse of each of the few files parsed last is kept (it is immutable): a write
    parses its file as it was, which is the text the index read and parsed at the previous
    write to it. One text a file, so a 4 MB file holds at most its own parse here."""
    with _PARSED_LOCK:  # files are parsed in worker threads
        last = _PARSED.get(path)
    if last is not None and last[0] == text:
        return last[1]
    meta, fm_lines = front if front is not None else split_front_matter(text)[:2]
    parsed = parse_memory_file(path, meta, text, fm_lines) if is_memory_file(meta) else None
    with _PARSED_LOCK:
        _PARSED.pop(path, None)
        while len(_PARSED) >= PARSES_KEPT:  # the oldest goes
            del _PARSED[next(iter(_PARSED))]
        _PARSED[path] = (text, parsed)
    return parsed


def memory_items_in(path: str, text: str) -> int | None:
    """How many memories a memory file holds (None: it is not one), counted, not parsed: a
    batch looks at the last page of 10,000 lists before it writes any, and parsing them all
    would be the cost of parsing them again."""
    with _PARSED_LOCK:
        last = _PARSED.get(path)
    if last is not None and last[0] == text:
        return None if last[1] is None else last[1].count()
    meta, fm_lines = split_front_matter(text)[:2]
    return count_items(text, fm_lines) if is_memory_file(meta) else None


PARSES_KEPT = 4
_PARSED: dict[str, tuple[str, MemoryFile | None]] = {}  # path -> its last text and parse
_PARSED_LOCK = threading.Lock()


def _json_safe(value: Any) -> Any:
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [_json_safe(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


def _front_matter_tags(meta: dict[str, Any]) -> tuple[str, ...]:
    raw = meta.get("tags", [])
    if isinstance(raw, str):
        raw = re.split(r"[,\s]+", raw)
    if not isinstance(raw, list):
        return ()
    return tuple(str(t).lstrip("#") for t in raw if str(t).strip())


def parse_day(text: str) -> str | None:
    """The calendar day in a free-form date ("2023/05/21 (Sun)", "8 May, 2023", "May 8th 2023")
    as YYYY-MM-DD, or None."""
    m = _ISO_DAY.search(text)
    if m:
        y, mo, d = int(m[1]), int(m[2]), int(m[3])
    else:
        m = _DAY_MONTH_YEAR.search(text)
        if m:
            d, mo, y = int(m[1]), _MONTHS.get(m[2][:3].lower(), 0), int(m[3])
        else:
            m = _MONTH_DAY_YEAR.search(text)
            if not m:
                return None
            mo, d, y = _MONTHS.get(m[1][:3].lower(), 0), int(m[2]), int(m[3])
    try:
        return dt.date(y, mo, d).isoformat()
    except ValueError:
        return None


def _date_line(body: str) -> str | None:
    """The day of a "Date: ..." line among the first few non-blank lines of the body."""
    seen = 0
    for found in _LINE.finditer(body):  # lazily: only the top of a (possibly huge) body is read
        line = found.group()
        if not line.strip():
            continue
        m = _DATE_LINE.match(line)
        if m:
            return parse_day(m.group(1))
        seen += 1
        if seen >= DATE_LINE_SCAN:
            return None
    return None


def file_date(path: str, meta: dict[str, Any], fallback: str | None, body: str = "") -> str | None:
    """The date a memory file is about: front matter, then a YYYY-MM-DD file name, then a
    "Date:" line at the top of the body, then ``fallback`` (the file's mtime)."""
    for key in ("date", "created", "created_at"):
        value = meta.get(key)
        if isinstance(value, str) and re.match(r"\d{4}-\d{2}-\d{2}", value):
            return value[:10]
    m = _DATE_IN_NAME.search(path.rsplit("/", 1)[-1])
    if m:
        return m.group(1)
    return _date_line(body) or fallback


def _inline_tags(tokens: list[Token], start: int, end: int) -> frozenset[str]:
    tags: set[str] = set()
    for tok in tokens[start:end]:
        if tok.type != "inline" or not tok.children:
            continue
        for child in tok.children:
            if child.type == "text":
                tags.update(
                    t for t in _HASHTAG.findall(child.content) if not _HEX_COLOUR.fullmatch(t)
                )
    return frozenset(tags)


def _sections(body: str, line_offset: int, max_chars: int) -> list[_Section]:
    tokens = _parser().parse(body)
    lines = body.split("\n")
    sections = [_Section(())]
    stack: list[tuple[int, str]] = []
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        j = i + 1
        if tok.nesting == 1:  # find the matching close token of this block
            depth = 1
            while depth and j < len(tokens):
                depth += tokens[j].nesting
                j += 1
        if tok.level != 0 or tok.map is None:
            i = j
            continue
        start, end = tok.map
        text = "\n".join(lines[start:end]).rstrip()
        tags = _inline_tags(tokens, i, j)
        if tok.type == "heading_open":
            level = int(tok.tag[1])
            title = tokens[i + 1].content.strip() if i + 1 < len(tokens) else ""
            while stack and stack[-1][0] >= level:
                stack.pop()
            stack.append((level, title))
            sections.append(_Section(tuple(t for _, t in stack)))
            sections[-1].units.append(
                _Unit(start + 1 + line_offset, end + line_offset, text, "", tags)
            )
        elif text.strip():
            sections[-1].has_body = True
            sections[-1].units.extend(
                _split_block(text, start + 1 + line_offset, max_chars, "\n\n", tags)
            )
        i = j
    kept = [s for s in sections if s.has_body]
    if kept or not any(s.units for s in sections):
        return kept
    # headings alone (a title waiting for text, an outline): one chunk of them all, so the
    # file is found by its headings
    whole = _Section(next(s.heading_path for s in sections if s.units), has_body=True)
    whole.units = [dataclasses.replace(u, sep="\n\n") for s in sections for u in s.units]
    return [whole]


def _split_block(
    text: str, first_line: int, max_chars: int, sep: str, tags: frozenset[str]
) -> list[_Unit]:
    """A block as one unit if it fits, else line groups, else word windows of a long line."""
    if len(text) <= max_chars:
        return [_Unit(first_line, first_line + text.count("\n"), text, sep, tags)]
    units: list[_Unit] = []
    for n, line in enumerate(text.split("\n")):
        line_no = first_line + n
        piece_sep = sep if not units else "\n"
        if len(line) <= max_chars:
            units.append(_Unit(line_no, line_no, line, piece_sep, tags))
            continue
        for piece in _word_windows(line, max_chars):
            units.append(_Unit(line_no, line_no, piece, piece_sep, tags))
            piece_sep = " "
    return units


def _word_windows(line: str, max_chars: int) -> list[str]:
    pieces, current = [], ""
    for word in line.split(" "):
        while len(word) > max_chars:  # one enormous "word" (base64, minified text)
            if current:
                pieces.append(current)
                current = ""
            pieces.append(word[:max_chars])
            word = word[max_chars:]
        if current and len(current) + 1 + len(word) > max_chars:
            pieces.append(current)
            current = word
        else:
            current = f"{current} {word}" if current else word
    if current:
        pieces.append(current)
    return pieces


def _tail(text: str, n_chars: int) -> str:
    """The last ~n_chars of text, starting at a word boundary."""
    if n_chars <= 0:
        return ""
    if len(text) <= n_chars:
        return text
    cut = text[-n_chars:]
    space = cut.find(" ")
    return cut[space + 1 :] if 0 <= space < len(cut) // 2 else cut


def _windows(units: list[_Unit], cfg: ChunkerConfig) -> list[tuple[list[_Unit], str]]:
    """Pack units into windows of max_chars; each later window carries the previous tail."""
    windows: list[tuple[list[_Unit], str]] = []
    current: list[_Unit] = []
    size, overlap = 0, ""
    for unit in units:
        added = len(unit.text) + (len(unit.sep) if current else 0)
        new_block = cfg.split == "paragraph" and unit.sep == "\n\n"
        only_heading = (
            len(current) == 1 and current[0].sep == "" and current[0].text.startswith("#")
        )
        if current and (size + added > cfg.max_chars or (new_block and not only_heading)):
            windows.append((current, overlap))
            overlap = "" if new_block else _tail(_join(current), cfg.overlap_chars)
            current, size = [], len(overlap) + 1 if overlap else 0
            added = len(unit.text)
        current.append(unit)
        size += added
    if current:
        windows.append((current, overlap))
    return windows


def _after_lines(text: str, n: int) -> str:
    """``text`` without its first ``n`` lines: ``"\\n".join(text.split("\\n")[n:])``, without
    splitting every line of a big memory file that an add rewrites."""
    at = 0
    for _ in range(n):
        at = text.find("\n", at) + 1
        if not at:
            return ""
    return text[at:]


def _join(units: list[_Unit]) -> str:
    return "".join((u.sep if i else "") + u.text for i, u in enumerate(units))


def chunk_markdown(
    text: str,
    path: str,
    config: ChunkerConfig | None = None,
    fallback_date: str | None = None,
) -> tuple[list[Chunk], list[str]]:
    """Split one memory file into chunks. Returns the chunks and warnings (never raises)."""
    cfg = config or ChunkerConfig()
    meta, fm_lines, fm_error = split_front_matter(text)
    body = _after_lines(text, fm_lines)
    fm_tags = _front_matter_tags(meta)
    date = file_date(path, meta, fallback_date, body)
    if (
        is_memory_file(meta)
        and (parsed := memory_file_of(path, text, (meta, fm_lines))) is not None
    ):
        return memory_chunks(parsed, path, date), []
    budget = max(cfg.max_chars - cfg.overlap_chars - 1, cfg.chars_per_token)
    chunks: list[Chunk] = []
    for section in _sections(body, fm_lines, budget):
        for units, overlap in _windows(section.units, cfg):
            own = _join(units)
            chunk_text = f"{overlap}\n{own}" if overlap else own
            heading = " > ".join(section.heading_path)
            tags = tuple(sorted(set(fm_tags).union(*(u.tags for u in units))))
            chunks.append(
                Chunk(
                    path=path,
                    index=len(chunks),
                    heading_path=section.heading_path,
                    start_line=units[0].start,
                    end_line=units[-1].end,
                    text=chunk_text,
                    content_hash=text_hash(f"{heading}\n{chunk_text}"),
                    tags=tags,
                    date=date,
                    metadata=meta,
                )
            )
    return chunks, [fm_error] if fm_error else []


def memory_heading(category: str) -> str:
    """The heading every memory chunk of a category's file carries."""
    return f"{category} memories"


def memory_embed_text(category: str, text: str) -> str:
    """What the embedder will see of a memory holding ``text`` (its chunk's ``embed_text``),
    known before the memory is written: the writer has it embedded while the write waits."""
    return f"{memory_heading(category)}\n{text}"


@lru_cache(maxsize=65_536)
def _memory_digest(heading: str, text: str) -> tuple[str, tuple[str, ...]]:
    """(content hash, hashtags) of a memory's chunk; cached, as a file of a thousand memories
    is chunked again on every write to it."""
    tags = frozenset(_HASHTAG.findall(text))
    return text_hash(f"{heading}\n{text}"), tuple(
        sorted(t for t in tags if not _HEX_COLOUR.fullmatch(t))
    )


def memory_chunks(parsed: MemoryFile, path: str, date: str | None, first: int = 0) -> list[Chunk]:
    """One chunk per memory of a memory file, carrying its id, scope and fields (``first``:
    the number of the first one, when ``parsed`` holds the items of the file's end only)."""
    heading = memory_heading(parsed.category)
    return [
        _CHUNKS.get(
            item,
            (path, n, parsed.scope, parsed.category, date),
            partial(_memory_chunk, item, path, n, parsed, heading, date),
        )
        for n, item in enumerate(parsed.items, first)
    ]


def memory_tail_chunks(
    text: str, tail: str, path: str, first: int, fallback_date: str | None = None
) -> list[Chunk] | None:
    """The chunks ``chunk_markdown`` makes of the memories in ``tail``, the end of the memory
    file ``text`` whose first ``first`` memories come before it (see index/tails.py): without
    parsing those. None when the tail cannot be read on its own (``tail_items``), or holds a
    memory without its recorded id or with an id the file names before (only a whole parse
    can say what that one is)."""
    meta, fm_lines, _ = split_front_matter(text)
    if not is_memory_file(meta):
        return None
    head = text[: len(text) - len(tail)]
    items = tail_items(path, tail, head.count("\n"))
    if not items or not all(i.recorded and i.id not in head for i in items):
        return None
    scope, category = file_scope(meta)
    date = file_date(path, meta, fallback_date, _after_lines(text, fm_lines))
    return memory_chunks(MemoryFile(scope, category, items, ()), path, date, first)


# The chunk of each memory, by its item: the parser hands out the same item for a memory
# that did not change or move (memory_format._placed), so a write to a file of a thousand
# memories builds the chunks of the ones it touched, not a thousand (nor does the index's
# comparison of the rows it keeps encode a thousand chunks' fields again: rows.fresh_chunk_fields).
_CHUNKS: ByIdentity[MemoryItem, Chunk] = ByIdentity(16_384)


def _memory_chunk(
    item: MemoryItem, path: str, n: int, parsed: MemoryFile, heading: str, date: str | None
) -> Chunk:
    # no app_id unless there is one: the chunks of files from before apps stay as they were
    scope = {k: v for k, v in parsed.scope.to_dict().items() if v is not None or k != "app_id"}
    record = {**item.fields(), **scope, "category": parsed.category}
    digest, tags = _memory_digest(heading, item.text)
    return Chunk(
        path=path,
        index=n,
        heading_path=(heading,),
        start_line=item.start_line,
        end_line=item.end_line,
        text=item.text,
        content_hash=digest,
        tags=tags,
        date=(item.created[:10] or date) if item.created else date,
        metadata={"memory": record},
    )
