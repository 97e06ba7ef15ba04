"""jieba, loaded as cheaply as the text at hand allows.

Loading jieba's dictionary (500k words and their prefixes) takes most of a second, so a
one-shot Chinese search without a daemon paid that for a query of a few characters. Here:
- jieba is imported without pkg_resources (its own fallback for reading its files; importing
  pkg_resources alone cost ~0.12 s);
- once a process has loaded the whole dictionary it writes a compact copy to the user's cache
  (an SQLite table, written once per jieba dictionary), and a process that has not loaded it
  segments a query with only the entries the query can touch, read from that copy: jieba looks
  up nothing but substrings of the text it cuts, so the words come out the same
  (tests/test_segmenter.py compares both on real text).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import sys
import tempfile
import threading
from array import array
from functools import lru_cache
from pathlib import Path
from typing import Any

from memcore.core.places import user_cache_dir

_lock = threading.Lock()
_IN_LIST = 500  # words per IN (...) query, under SQLite's variable limit


@lru_cache(maxsize=1)
def _import() -> Any:
    """``import jieba`` without pkg_resources, unless something already imported that. (For
    that moment an import of pkg_resources in another thread would fail: nothing memcore
    runs imports it.)"""
    block = "pkg_resources" not in sys.modules
    if block:
        sys.modules["pkg_resources"] = None  # type: ignore[assignment]  # ImportError
    try:
        import jieba
    finally:
        if block and sys.modules.get("pkg_resources", 0) is None:
            del sys.modules["pkg_resources"]
    jieba.setLogLevel(30)  # warnings only (it logs its loading at debug level)
    return jieba


@lru_cache(maxsize=1)
def full() -> Any:
    """jieba with its whole dictionary loaded: from the compact copy when there is one
    (~0.2 s), else by jieba itself (~0.7 s: its cache is one marshal.load of 500k entries,
    GIL held throughout), which leaves the copy for later processes."""
    with _lock:
        jieba = _import()
        if not jieba.dt.initialized:
            whole = read_whole(compact_path())
            if whole is not None:
                jieba.dt.FREQ, jieba.dt.total = whole
                jieba.dt.initialized = True
            else:
                jieba.initialize()
    with contextlib.suppress(OSError, sqlite3.Error):  # a cache is a nicety: never an error
        save_compact(jieba.dt.FREQ, jieba.dt.total)
    return jieba


def read_whole(path: Path) -> tuple[dict[str, int], int] | None:
    """The whole dictionary (jieba's FREQ and total) from the compact copy at ``path``; None
    when there is no readable copy. Kept there as one text of the words and one array of
    their counts, which build the dict in a quarter of the time jieba's own cache takes."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            row = db.execute("SELECT words, counts FROM whole").fetchone()
            total = db.execute("SELECT value FROM meta WHERE key = 'total'").fetchone()
    except sqlite3.Error:
        return None
    if row is None or total is None:
        return None
    words, counts = str(row[0]).split("\n"), array("q")
    counts.frombytes(bytes(row[1]))
    if sys.byteorder != "little":
        counts.byteswap()
    if len(words) != len(counts):
        return None
    return dict(zip(words, counts.tolist(), strict=True)), int(total[0])


def loaded() -> bool:
    return full.cache_info().currsize > 0


def compact_path() -> Path:
    """Where the compact copy of jieba's dictionary lives: named for the dictionary file it
    was made from (a jieba upgrade with another dictionary makes another copy)."""
    spec = _dictionary_file()
    try:
        st = spec.stat()
        tag = f"{st.st_size}-{st.st_mtime_ns}"
    except OSError:
        tag = "unknown"
    # v2: with the table ``whole`` (a copy made before lacks it, and is replaced)
    return user_cache_dir() / "memcore" / f"jieba-dict-v2-{tag}.sqlite"


def _dictionary_file() -> Path:
    import importlib.util

    found = importlib.util.find_spec("jieba")
    origin = found.origin if found is not None else None
    return Path(origin).parent / "dict.txt" if origin else Path("dict.txt")


def save_compact(freq: dict[str, int], total: int, target: Path | None = None) -> None:
    """Write the compact copy (atomically: a temp file renamed into place) unless it exists."""
    target = target or compact_path()
    if target.exists():
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".jieba-", suffix=".sqlite", dir=target.parent)
    os.close(fd)
    try:
        with contextlib.closing(sqlite3.connect(tmp)) as db:
            db.execute(
                "CREATE TABLE freq (word TEXT PRIMARY KEY, n INTEGER NOT NULL) WITHOUT ROWID"
            )
            db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
            db.execute("CREATE TABLE whole (words TEXT NOT NULL, counts BLOB NOT NULL)")
            db.executemany("INSERT INTO freq VALUES (?, ?)", freq.items())
            counts = array("q", freq.values())
            if sys.byteorder != "little":
                counts.byteswap()
            db.execute("INSERT INTO whole VALUES (?, ?)", ("\n".join(freq), counts.tobytes()))
            longest = max((len(w) for w in freq), default=0)
            db.executemany(
                "INSERT INTO meta VALUES (?, ?)", [("total", total), ("longest", longest)]
            )
            db.commit()
        os.replace(tmp, target)
        for old in target.parent.glob("jieba-dict-*.sqlite"):  # of a dictionary since replaced
            if old != target and target.name.startswith("jieba-dict-"):
                with contextlib.suppress(OSError):
                    old.unlink()
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def for_text(text: str) -> Any:
    """A jieba tokenizer that cuts ``text`` (or any part of it) as the fully loaded one does:
    the loaded one itself when this process has it, else one holding only the dictionary
    entries that are substrings of ``text``, from the compact copy (the whole dictionary is
    loaded when there is no copy yet)."""
    if loaded():
        return full().dt
    compact = compact_tokenizer(text, compact_path())
    return compact if compact is not None else full().dt


def compact_tokenizer(text: str, path: Path) -> Any:
    """A tokenizer holding the entries of the compact copy at ``path`` that are substrings of
    ``text``; None when there is no readable copy there."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
            meta = dict(db.execute("SELECT key, value FROM meta").fetchall())
            words = _substrings(text, int(meta["longest"]))
            freq: dict[str, int] = {}
            for i in range(0, len(words), _IN_LIST):
                part = words[i : i + _IN_LIST]
                sql = f"SELECT word, n FROM freq WHERE word IN ({','.join('?' * len(part))})"
                freq.update(db.execute(sql, part).fetchall())
    except (sqlite3.Error, KeyError, ValueError):
        return None  # no copy yet (or a broken one)
    jieba = _import()
    tokenizer = jieba.Tokenizer()
    tokenizer.FREQ, tokenizer.total, tokenizer.initialized = freq, int(meta["total"]), True
    return tokenizer


def _substrings(text: str, longest: int) -> list[str]:
    return list(
        {text[i:j] for i in range(len(text)) for j in range(i + 1, min(len(text), i + longest) + 1)}
    )


_layered: dict[tuple[int, tuple[tuple[str, int | None], ...]], Any] = {}


def layered(base: Any, entries: tuple[tuple[str, int | None], ...], text: str | None = None) -> Any:
    """A tokenizer that cuts as ``base`` does and keeps these dictionary entries whole (a
    vault's own words, core/own_words.py), ``base`` left as it is. An entry without a
    frequency gets what jieba's ``suggest_freq`` gives: just enough to be cut whole. With
    ``text``, only the entries found in it (a query's tokenizer, made for that text); without,
    the tokenizer is kept for the next call with the same base and entries."""
    if text is not None:
        entries = tuple(e for e in entries if e[0] in text)
        if not entries:
            return base
    else:
        found = _layered.get((id(base), entries))
        if found is not None:
            return found
    from collections import ChainMap

    jieba = _import()
    own: dict[str, int] = {}
    tokenizer = jieba.Tokenizer()
    tokenizer.FREQ, tokenizer.total, tokenizer.initialized = (
        ChainMap(own, base.FREQ),
        base.total,
        True,
    )
    for word, freq in entries:
        n = freq if freq is not None else int(tokenizer.suggest_freq(word, tune=False))
        own[word] = n
        tokenizer.total += n
        for end in range(1, len(word)):  # jieba's prefix entries: how it finds longer words
            if word[:end] not in tokenizer.FREQ:
                own[word[:end]] = 0
    if text is None:
        with _lock:
            _layered[(id(base), entries)] = tokenizer
    return tokenizer
