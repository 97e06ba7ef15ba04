from __future__ import annotations

import os
from pathlib import Path

import pytest

from memcore.core.errors import VaultError
from memcore.vault.files import could_hold_memory, is_memory_path, read_memory_file, scan_vault
from tests.support import write

INCLUDE = ("MEMORY.md", "memory.md", "memory/**/*.md")


def test_scan_finds_memory_files_and_skips_the_rest(vault: Path) -> None:
    for rel in [
        "MEMORY.md",
        "memory/2024-01-01.md",
        "memory/deep/er/topic.md",
        "notes/other.md",
        "memory/.hidden/x.md",
        "memory/node_modules/pkg/readme.md",
        "memory/.draft.md.swp",
        "memory/file.md~",
        "memory/data.txt",
        ".git/memory/x.md",
    ]:
        write(vault, rel, "x")
    paths = [f.path for f in scan_vault(vault, INCLUDE, ())]
    assert paths == ["MEMORY.md", "memory/2024-01-01.md", "memory/deep/er/topic.md"]


def test_extra_globs_and_excludes(vault: Path) -> None:
    write(vault, "notes/a.md", "x")
    write(vault, "memory/private/secret.md", "x")
    write(vault, "memory/ok.md", "x")
    found = scan_vault(vault, (*INCLUDE, "notes/*.md"), ("memory/private/**",))
    assert [f.path for f in found] == ["memory/ok.md", "notes/a.md"]


def test_symlinks_out_of_the_vault_are_not_followed(vault: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    write(outside, "secret.md", "secret")
    os.symlink(outside / "secret.md", vault / "memory" / "link.md")
    os.symlink(outside, vault / "memory" / "dirlink")
    write(vault, "memory/real.md", "x")
    assert [f.path for f in scan_vault(vault, INCLUDE, ())] == ["memory/real.md"]


def test_missing_vault_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(VaultError, match="does not exist"):
        scan_vault(tmp_path / "nope", INCLUDE, ())


def test_is_memory_path_rejects_temp_files_and_hidden_dirs() -> None:
    assert is_memory_path("memory/a.md", INCLUDE, ())
    assert not is_memory_path("memory/.a.md.swp", INCLUDE, ())
    assert not is_memory_path("memory/4913", INCLUDE, ())
    assert not is_memory_path("memory/a.md.tmp", INCLUDE, ())
    assert not is_memory_path(".obsidian/memory/a.md", INCLUDE, ())
    assert not is_memory_path("other/a.md", INCLUDE, ())


def test_could_hold_memory_prunes_unrelated_folders() -> None:
    assert could_hold_memory("memory", INCLUDE)
    assert could_hold_memory("memory/a/b", INCLUDE)
    assert not could_hold_memory("src", INCLUDE)
    assert not could_hold_memory(".git", ("**/*.md",))
    assert could_hold_memory("any/where", ("**/*.md",))


@pytest.mark.parametrize(
    ("content", "reason"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00", "binary file"),
        (b"caf\xe9 au lait", "invalid UTF-8 at byte 3"),
    ],
)
def test_unreadable_files_give_one_line_reasons(vault: Path, content: bytes, reason: str) -> None:
    (vault / "memory" / "bad.md").write_bytes(content)
    with pytest.raises(VaultError, match=reason):
        read_memory_file(vault, "memory/bad.md", 1_000_000)


def test_huge_files_are_refused_before_reading(vault: Path) -> None:
    (vault / "memory" / "big.md").write_bytes(b"a" * 2_000_001)
    with pytest.raises(VaultError, match=r"over index\.max_file_bytes"):
        read_memory_file(vault, "memory/big.md", 2_000_000)


def test_bom_and_crlf_are_normalised(vault: Path) -> None:
    (vault / "memory" / "win.md").write_bytes(b"\xef\xbb\xbf# T\r\n\r\nline\r\n")
    text, _ = read_memory_file(vault, "memory/win.md", 1_000_000)
    assert text == "# T\n\nline\n"
