"""A vault's own words for keyword search: a user dictionary (words jieba keeps whole: a
product's name, a person's, a domain term it would split) and stop words (left out of the
keyword index and of queries). Named by ``keywords.dictionary`` and ``keywords.stop_words``;
the index remembers the words it was tokenized with (``fingerprint``) and tokenizes again,
once, when they change. Pure, but for reading the two files."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from memcore.core.errors import ConfigError

MAX_FILE_BYTES = 16 << 20
MAX_WORD = 64  # characters: longer is not a word


@dataclass(frozen=True, slots=True)
class Words:
    """Dictionary entries (word, frequency or None for "enough to keep it whole") and stop
    words (lower-cased)."""

    entries: tuple[tuple[str, int | None], ...] = ()
    stop: frozenset[str] = frozenset()

    def __bool__(self) -> bool:
        return bool(self.entries or self.stop)

    @property
    def fingerprint(self) -> str:
        """What the keyword index was tokenized with, as a digest; "" for no words of one's
        own (an index from before this setting needs no second tokenizing)."""
        if not self:
            return ""
        text = json.dumps([list(self.entries), sorted(self.stop)], ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()[:32]


NO_WORDS = Words()


def read_words(dictionary: Path | None, stop_words: Path | None) -> Words:
    """The words of the two files (either may be None). Raises ConfigError with one line for
    a file that cannot be read or a line that is not an entry."""
    entries: dict[str, int | None] = {}
    if dictionary is not None:
        for number, line in _lines(dictionary, "keywords.dictionary"):
            # jieba's own format: "word [frequency] [part of speech]" (the last is not used)
            parts = line.split()
            word = parts[0]
            freq = parts[1] if len(parts) > 1 and parts[1].isdigit() else None
            _check_word(word, dictionary, number, "keywords.dictionary")
            entries[word] = int(freq) if freq is not None and int(freq) > 0 else None
    stop: set[str] = set()
    if stop_words is not None:
        for number, line in _lines(stop_words, "keywords.stop_words"):
            for word in line.split():
                _check_word(word, stop_words, number, "keywords.stop_words")
                stop.add(word.lower())
    return Words(tuple(sorted(entries.items())), frozenset(stop))


def _lines(path: Path, setting: str) -> list[tuple[int, str]]:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise ConfigError(f"{setting}: cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_FILE_BYTES:
        raise ConfigError(f"{setting}: {path} is over {MAX_FILE_BYTES >> 20} MB")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ConfigError(f"{setting}: {path} is not UTF-8 text") from None
    out = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()  # "# ..." comments
        if line:
            out.append((number, line))
    return out


def _check_word(word: str, path: Path, number: int, setting: str) -> None:
    if len(word) > MAX_WORD or not any(ch.isalnum() for ch in word):
        raise ConfigError(
            f"{setting}: {path}:{number}: {word[:40]!r} is not a word "
            f"(1-{MAX_WORD} characters, with a letter or digit)"
        )
