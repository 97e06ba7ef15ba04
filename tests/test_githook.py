"""The post-commit hook in a real git repository: marked commits land in MEMORY.md."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memcore.vault.githook import BEGIN
from tests.support import wait_until, write


def sh(repo: Path, *args: str) -> str:
    who = {f"GIT_{role}_{key}": value for role in ("AUTHOR", "COMMITTER")
           for key, value in (("NAME", "t"), ("EMAIL", "t@x"))}  # fmt: skip
    env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": "static", **who}
    out = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout


def memcore(repo: Path, *args: str) -> str:
    return sh(repo, sys.executable, "-m", "memcore", "--vault", str(repo), *args)


@pytest.fixture
def repo(vault: Path) -> Path:
    sh(vault, "git", "init", "-q")
    write(vault, "MEMORY.md", "# Memory\n\nThe engine renders with DX12.\n")
    sh(vault, "git", "add", "-A")
    sh(vault, "git", "commit", "-q", "-m", "start")
    return vault


def test_a_marked_commit_becomes_a_searchable_entry(repo: Path) -> None:
    assert "installed:" in memcore(repo, "hook", "install")
    write(repo, "src/render.cpp", "// reset the command list\n")
    sh(repo, "git", "add", "-A")
    started = time.monotonic()
    sh(repo, "git", "commit", "-q", "-m",
       "Fix the DX12 crash [Memory]\n\nReset the command list before execution.")  # fmt: skip
    commit_s = time.monotonic() - started
    memory = repo / "MEMORY.md"
    assert wait_until(lambda: "Fix the DX12 crash" in memory.read_text(), timeout=60)
    text = memory.read_text()
    short = sh(repo, "git", "rev-parse", "--short", "HEAD").strip()
    assert f"Fix the DX12 crash ({short})" in text and "[Memory]" not in text
    assert "Reset the command list before execution." in text and "`src/render.cpp`" in text
    assert text.startswith("# Memory\n\nThe engine renders with DX12.\n")
    found = memcore(repo, "search", "command list crash", "--json")
    assert '"path": "MEMORY.md"' in found
    assert commit_s < 5  # the hook runs in the background (bench-free sanity bound)


def test_an_unmarked_commit_adds_nothing(repo: Path) -> None:
    memcore(repo, "hook", "install")
    write(repo, "notes.txt", "x\n")
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-q", "-m", "Routine change")
    memcore(repo, "hook", "run")  # what the hook ran, in the foreground
    assert "Routine change" not in (repo / "MEMORY.md").read_text()


def test_install_is_idempotent_keeps_an_existing_hook_and_uninstalls(repo: Path) -> None:
    hook = repo / ".git" / "hooks" / "post-commit"
    hook.write_text("#!/bin/sh\necho existing hook\n")
    hook.chmod(0o755)
    memcore(repo, "hook", "install")
    assert "already installed" in memcore(repo, "hook", "install")
    text = hook.read_text()
    assert text.count(BEGIN) == 1 and "echo existing hook" in text
    assert "removed memcore" in memcore(repo, "hook", "install", "--uninstall")
    assert hook.read_text() == "#!/bin/sh\necho existing hook\n"
    assert "no memcore hook" in memcore(repo, "hook", "install", "--uninstall")


def test_a_failing_hook_run_logs_and_never_fails(repo: Path) -> None:
    (repo / "MEMORY.md").write_bytes(b"\xff\xfe not utf-8")
    sh(repo, "git", "add", "-A")
    sh(repo, "git", "commit", "-q", "-m", "[Memory] something")
    memcore(repo, "hook", "run")  # exits 0
    log = (repo / ".memcore" / "hook.log").read_text()
    assert "not valid UTF-8" in log
