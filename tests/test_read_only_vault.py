"""A vault memcore cannot write to (a read-only checkout or mount) is still indexed and
searched, its index in the user's cache folder; a write says the vault is read-only and
changes nothing. The read-only mount is real: a bind mount in a private mount namespace
(`unshare -rm`), so the test needs no privileges beyond what unshare allows here."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.support import write


def in_read_only_mount(
    vault: Path, mount: Path, cache: Path, commands: list[list[str]]
) -> list[tuple[str, int]]:
    """Run memcore commands on ``vault`` mounted read-only at ``mount``: (output, exit code)
    of each."""
    memcore = [sys.executable, "-m", "memcore", "--embedder", "static"]
    steps = "; ".join(f'{shlex.join([*memcore, *c])} 2>&1; echo "== exit $?"' for c in commands)
    script = (
        f"mount --bind {shlex.quote(str(vault))} {shlex.quote(str(mount))} && "
        f"mount -o remount,ro,bind {shlex.quote(str(mount))} && "
        f"cd {shlex.quote(str(mount))} && export XDG_CACHE_HOME={shlex.quote(str(cache))} && "
        f"{steps}"
    )
    out = subprocess.run(
        ["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    parts = re.split(r"== exit (\d+)\n", out.stdout)
    return [(parts[i], int(parts[i + 1])) for i in range(0, len(parts) - 1, 2)]


def test_a_read_only_vault_is_searchable_and_refuses_writes_in_one_line(tmp_path: Path) -> None:
    vault, mount, cache = tmp_path / "vault", tmp_path / "mnt", tmp_path / "cache"
    write(vault, "MEMORY.md", "# Memory\n\nThe cat is called Miso.\n")
    mount.mkdir()
    before = sorted(p.relative_to(vault).as_posix() for p in vault.rglob("*"))
    out = in_read_only_mount(
        vault,
        mount,
        cache,
        [["index"], ["search", "what is the cat called"], ["add", "Alice likes tea"], ["count"]],
    )
    (index, i_code), (search, s_code), (add, a_code), (count, c_code) = out
    assert i_code == 0 and "1 file indexed" in index
    assert s_code == 0 and search.startswith("1. MEMORY.md")
    assert a_code == 1 and add.count("\n") == 1
    assert "the vault is read-only: cannot write memory/core.md; nothing was written" in add
    assert c_code == 0 and count.strip() == "0"  # no memory slipped in
    assert sorted(p.relative_to(vault).as_posix() for p in vault.rglob("*")) == before
    assert list((cache / "memcore").glob("mnt-*/index.db"))  # the index went to the cache
