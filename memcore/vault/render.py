"""Markdown as safe HTML for the web page (markdown-it-py, the chunker's parser). Pure.

Raw HTML in a memory or note is shown as text, never run; links keep to markdown-it's safe
schemes; a query's words are marked in text only, never inside markup or an entity.
"""

from __future__ import annotations

import functools
import re
from typing import Any

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml


def _words(query: str) -> re.Pattern[str] | None:
    words = sorted({w for w in re.findall(r"\w+", query.lower()) if len(w) > 1}, key=len)
    if not words:
        return None
    return re.compile("|".join(re.escape(w) for w in reversed(words)), re.IGNORECASE)


def _marked(text: str, pattern: re.Pattern[str] | None) -> str:
    """``text`` escaped, with the query's words marked: the words are found in the text itself,
    then each piece is escaped (a word never matches inside ``&#39;``)."""
    if pattern is None:
        return escapeHtml(text)
    out, at = [], 0
    for m in pattern.finditer(text):
        out += [escapeHtml(text[at : m.start()]), f"<mark>{escapeHtml(m.group(0))}</mark>"]
        at = m.end()
    out.append(escapeHtml(text[at:]))
    return "".join(out)


def _text_rule(self: Any, tokens: Any, idx: int, options: Any, env: Any) -> str:
    return _marked(tokens[idx].content, env.get("words"))


@functools.cache
def _parser() -> MarkdownIt:
    """CommonMark with tables and strikethrough, raw HTML off, text marked as it renders."""
    md = MarkdownIt("commonmark", {"html": False, "breaks": True})
    md.enable(["table", "strikethrough"])
    md.add_render_rule("text", _text_rule)
    return md


def render_markdown(
    text: str, query: str = "", target_line: int | None = None, offset: int = 0
) -> str:
    """Markdown rendered safely: raw HTML is shown as text, links only to safe schemes
    (markdown-it's own check), the query's words marked in text only (never in markup). With
    ``target_line`` (1-based, of the file), the block holding it gets ``id="hit"``; ``offset``:
    lines before ``text`` in its file (front matter)."""
    md = _parser()
    tokens = md.parse(text)
    if target_line is not None:
        for token in tokens:
            if token.map and token.nesting == 1 and token.level == 0:
                first, last = token.map[0] + 1 + offset, token.map[1] + offset
                if first <= target_line <= max(first, last):
                    token.attrSet("id", "hit")
                    token.attrSet("class", "target")
                    break
    return str(md.renderer.render(tokens, md.options, {"words": _words(query)}))
