"""Scope ids (user, agent, run, app) and the folder names they get in the vault. Pure.

An id is any text an identity provider or chat platform hands out (``auth0|5f3a``,
``+15551234567``, ``Alice Smith``, ``tenant/alice``, ``_internal``, ``张三``): 1 to
``MAX_ID`` characters, not blank, without control characters. It is kept exactly as given
(never case-folded or Unicode-normalised: ``Alice`` and ``alice`` are two users, as they are
to Mem0 and to a database).

Its folder name (``folder_name``) is a reversible encoding that two ids never share, on any
file system:

- ``a-z``, ``0-9``, ``-``, ``_``, ``@``, ``+`` and ``.`` stay as they are (not a leading or
  trailing ``.``), so ``alice`` stays ``alice``;
- a capital letter becomes ``!`` and its small letter (``Alice`` -> ``!alice``), so names
  still differ where the file system ignores case (macOS, Windows);
- letters of scripts without case that Unicode normalisation leaves alone (Chinese,
  Japanese kana, Arabic, Hebrew, ...) stay as they are, so names still differ where the file
  system normalises Unicode (macOS);
- anything else is ``%`` and the two small hex digits of each of its UTF-8 bytes
  (``Alice Smith`` -> ``!alice%20!smith``, ``tenant/alice`` -> ``tenant%2falice``);
- a name longer than ``SEGMENT`` bytes is cut into folders of at most that many bytes, each
  but the last ending in ``~`` (a character the encoding never writes otherwise).
"""

from __future__ import annotations

import re
import unicodedata

from memcore.core.errors import InputError

MAX_ID = 256  # characters
SEGMENT = 200  # bytes of one folder name (file systems allow 255)
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyz0123456789-_@+.")
_JAMO = ((0x1100, 0x11FF), (0x3130, 0x318F), (0xA960, 0xA97F), (0xD7B0, 0xD7FF))
_UNIT = re.compile(r"%[0-9a-f]{2}|![a-z]|[^%!~]")


def check_id(value: object, what: str) -> str:
    """A scope id as given, or an InputError naming ``what`` (``user_id``, ...)."""
    if not isinstance(value, str):
        raise InputError(f"{what} must be text")
    shown = value if len(value) <= 40 else f"{value[:40]}..."
    if not value.strip():
        raise InputError(f"{what} is empty")
    if len(value) > MAX_ID:
        raise InputError(f"{what} {shown!r} is over {MAX_ID} characters")
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in value):
        raise InputError(f"{what} {shown!r} holds a control character or invalid text")
    return value


def _kept(ch: str) -> bool:
    """A character the folder name holds as it is."""
    if ch in _PLAIN:
        return True
    if ord(ch) < 0x80 or unicodedata.category(ch) != "Lo":
        return False
    if any(lo <= ord(ch) <= hi for lo, hi in _JAMO):
        return False  # conjoining jamo compose into syllables under normalisation
    return all(unicodedata.normalize(form, ch) == ch for form in ("NFC", "NFD", "NFKC"))


def _units(value: str) -> list[str]:
    out = []
    last = len(value) - 1
    for n, ch in enumerate(value):
        if ch == "." and n not in (0, last):
            out.append(ch)
        elif "A" <= ch <= "Z":
            out.append("!" + ch.lower())
        elif ch != "." and _kept(ch):
            out.append(ch)
        else:
            out.extend(f"%{b:02x}" for b in ch.encode("utf-8"))
    return out


def folder_name(value: str) -> str:
    """The folder (or folders, joined by ``/``) an id's files live in."""
    segments: list[str] = []
    current = ""
    for unit in _units(value):
        if len((current + unit).encode("utf-8")) > SEGMENT - 1:
            segments.append(current + "~")
            current = ""
        current += unit
    return "/".join([*segments, current])


def id_of_folder(name: str) -> str | None:
    """The id ``folder_name`` gave ``name`` (``a/b`` for a cut one); None when no id has it."""
    parts = name.split("/")
    if any(not p.endswith("~") for p in parts[:-1]) or parts[-1].endswith("~"):
        return None
    joined = "".join(p.removesuffix("~") for p in parts[:-1]) + parts[-1]
    units = _UNIT.findall(joined)
    if "".join(units) != joined:
        return None
    raw = bytearray()
    for unit in units:
        if unit.startswith("%"):
            raw.append(int(unit[1:], 16))
        elif unit.startswith("!"):
            raw += unit[1].upper().encode()
        else:
            raw += unit.encode("utf-8")
    try:
        value = raw.decode("utf-8")
    except UnicodeDecodeError:
        return None
    return value if folder_name(value) == name else None
