"""Replacing a file only if nobody changed it since it was read (vault/safe_file.py), at the
level of one file: with Linux's atomic exchange, a save landing between the check and the
swap is put back; without it (a file system that has none), a file changed or replaced since
it was read is still never overwritten. No temp file is left behind either way."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memcore.vault import safe_file
from memcore.vault.safe_file import replace_if_unchanged


def _names(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("exchange", [True, False])
def test_a_file_is_replaced_only_while_it_holds_what_was_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exchange: bool
) -> None:
    if not exchange:
        monkeypatch.setattr(safe_file, "_renameat2", None)
    page = tmp_path / "core.md"
    assert replace_if_unchanged(page, "first\n", None) and page.read_text() == "first\n"
    assert not replace_if_unchanged(page, "again\n", None)  # must not exist: it does
    page.chmod(0o600)
    assert replace_if_unchanged(page, "second\n", b"first\n")
    assert page.read_text() == "second\n" and page.stat().st_mode & 0o777 == 0o600
    page.write_text("a person's edit\n")  # in place
    assert not replace_if_unchanged(page, "third\n", b"second\n")
    person = tmp_path / "saved"
    person.write_text("a person's save\n")
    os.replace(person, page)  # an editor's save: a new file renamed over it
    assert not replace_if_unchanged(page, "third\n", b"a person's edit\n")
    assert page.read_text() == "a person's save\n"
    assert _names(tmp_path) == ["core.md"]


def test_a_save_landing_between_the_check_and_the_swap_is_put_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "core.md"
    page.write_text("read\n")
    swaps: list[bool] = []
    exchange = safe_file._exchange

    def racing(a: Path, b: Path) -> bool:
        if not swaps:  # the first swap: a person saves just before it
            (tmp_path / "saved").write_text("a person's save\n")
            os.replace(tmp_path / "saved", b)
        swaps.append(exchange(a, b))
        return swaps[-1]

    monkeypatch.setattr(safe_file, "_exchange", racing)
    if safe_file._renameat2 is None:
        pytest.fail("this Linux has no renameat2: the exchange path cannot be tested")
    assert not replace_if_unchanged(page, "memcore's write\n", b"read\n")
    assert swaps == [True, True]  # swapped, seen, swapped back
    assert page.read_text() == "a person's save\n"
    assert _names(tmp_path) == ["core.md"]
