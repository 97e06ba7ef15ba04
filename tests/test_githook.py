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
    sh(repo, "git", "commit", "-q", "-m",
       "Fix the DX12 crash [Memory]\n\nReset the command list before execution.")  # fmt: skip
    memory = repo / "MEMORY.md"
    # the commit returned before the entry was written: the hook's work (a `nice`d Python that
    # imports memcore) runs in the background, so git never waits for it
    assert "Fix the DX12 crash" not in memory.read_text()
    assert wait_until(lambda: "Fix the DX12 crash" in memory.read_text(), timeout=60)
    text = memory.read_text()
    short = sh(repo, "git", "rev-parse", "--short", "HEAD").strip()
    assert f"Fix the DX12 crash ({short})" in text and "[Memory]" not in text
    assert "Reset the command list before execution." in text and "`src/render.cpp`" in text
    assert text.startswith("# Memory\n\nThe engine renders with DX12.\n")
    found = memcore(repo, "search", "command list crash", "--json")
    assert '"path": "MEMORY.md"' in found


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


def entries(repo: Path) -> list[str]:
    return [
        line for line in (repo / "MEMORY.md").read_text().splitlines() if line.startswith("## [")
    ]


def test_forty_marked_commits_back_to_back_are_each_recorded_once_in_order(repo: Path) -> None:
    """Each commit's hook is handed its own sha at once; the runs race in the background and
    every entry lands exactly once (the old hook read HEAD late: 3 of 20, one of them x6),
    in commit order."""
    memcore(repo, "hook", "install")
    shas = []
    for n in range(40):
        write(repo, f"src/f{n}.txt", f"{n}\n")
        sh(repo, "git", "add", "-A")
        sh(repo, "git", "commit", "-q", "-m", f"[Memory] Decision number {n}")
        shas.append(sh(repo, "git", "rev-parse", "--short", "HEAD").strip())
    assert wait_until(lambda: len(entries(repo)) >= 40, timeout=120), entries(repo)
    time.sleep(1)  # a late duplicate would land now
    found = entries(repo)
    assert len(found) == 40, found
    for n, short in enumerate(shas):
        assert sum(f"Decision number {n} ({short})" in e for e in found) == 1, (n, found)
    # in commit order, however the background runs finished (50 rapid commits were not)
    assert [int(e.split("Decision number ")[1].split(" ")[0]) for e in found] == list(range(40))


def test_running_the_hook_again_for_a_commit_adds_nothing(repo: Path) -> None:
    sh(repo, "git", "commit", "-q", "--allow-empty", "-m", "[Memory] Chose Vulkan")
    sha = sh(repo, "git", "rev-parse", "HEAD").strip()
    for _ in range(3):
        memcore(repo, "hook", "run", sha)
    sh(repo, "git", "commit", "-q", "--allow-empty", "-m", "[Memory] Next one")
    memcore(repo, "hook", "run", sha)  # the older commit again, after a newer one
    memcore(repo, "hook", "run")
    assert [e.split("] ")[1] for e in entries(repo)] == [
        f"Chose Vulkan ({sha[:7]})",
        f"Next one ({sh(repo, 'git', 'rev-parse', '--short', 'HEAD').strip()})",
    ]


def test_amend_and_rebase_replace_the_rewritten_commits_entries(repo: Path) -> None:
    memcore(repo, "hook", "install")
    sh(repo, "git", "commit", "-q", "--allow-empty", "-m", "[Memory] Use DX11")
    assert wait_until(lambda: len(entries(repo)) == 1, timeout=60)
    sh(repo, "git", "commit", "-q", "--amend", "--allow-empty", "-m", "[Memory] Use DX12")
    amended = sh(repo, "git", "rev-parse", "--short", "HEAD").strip()
    assert wait_until(lambda: entries(repo) == [e for e in entries(repo) if "DX12" in e], 60)
    assert wait_until(lambda: len(entries(repo)) == 1, timeout=60)
    assert f"Use DX12 ({amended})" in entries(repo)[0]
    # an amend that drops the marker drops the entry
    sh(repo, "git", "commit", "-q", "--amend", "--allow-empty", "-m", "Use DX12, no memory")
    assert wait_until(lambda: entries(repo) == [], timeout=60)
    # a rebase rewrites every commit after the base: each keeps one entry, with its new hash
    sh(repo, "git", "commit", "-q", "--allow-empty", "-m", "[Memory] First call")
    sh(repo, "git", "commit", "-q", "--allow-empty", "-m", "[Memory] Second call")
    assert wait_until(lambda: len(entries(repo)) == 2, timeout=60)
    sh(repo, "git", "commit", "-q", "-am", "memory")  # the entries are committed, as people do
    olds = sh(repo, "git", "log", "--format=%h", "-3").split()[1:]
    later = "GIT_COMMITTER_DATE=2030-01-01T00:00:00"  # so that every rebased commit is new
    sh(repo, "env", later, "git", "rebase", "-q", "--force-rebase", "HEAD~3")
    news = sh(repo, "git", "log", "--format=%h", "-3").split()[1:]
    assert not set(olds) & set(news)
    want = {f"Second call ({news[0]})", f"First call ({news[1]})"}
    assert wait_until(lambda: {e.split("] ")[1] for e in entries(repo)} == want, timeout=60), (
        entries(repo)
    )
    time.sleep(1)
    assert len(entries(repo)) == 2


def test_the_installed_hook_costs_a_commit_only_milliseconds(repo: Path) -> None:
    """The post-commit block only reads HEAD and starts the run in the background."""
    memcore(repo, "hook", "install")
    hook = (repo / ".git" / "hooks" / "post-commit").read_text()
    assert "git rev-parse HEAD --git-path rebase-merge" in hook
    assert "(nice " in hook and '"$sha" >/dev/null 2>&1 &)' in hook
    rewrite = (repo / ".git" / "hooks" / "post-rewrite").read_text()
    assert "pairs=$(cat)" in rewrite and "hook rewritten" in rewrite


def test_an_interactive_rebase_runs_over_the_hooks_entries_and_drops_a_dropped_commits(
    repo: Path,
) -> None:
    """Issue 41: the hook's entries, uncommitted in MEMORY.md, made `git rebase -i` refuse
    ("You have unstaged changes"), and the entry of a commit the rebase dropped stayed. Now
    `hook install` turns on rebase.autoStash (where the repository made no choice), and
    post-rewrite removes the dropped commits' entries once the rebase has finished."""
    memcore(repo, "hook", "install")
    assert sh(repo, "git", "config", "--get", "rebase.autoStash").strip() == "true"
    for name in ("First", "Second", "Third"):
        sh(repo, "git", "commit", "-q", "--allow-empty", "-m", f"[Memory] {name} call")
    assert wait_until(lambda: len(entries(repo)) == 3, timeout=60)
    assert "MEMORY.md" in sh(repo, "git", "status", "--porcelain")  # not committed
    first, second = (
        sh(repo, "git", "rev-parse", "--short", r).strip() for r in ("HEAD~2", "HEAD~1")
    )
    drop = f"sed -i -e 's/^pick {second} /drop {second} /'"
    later = "GIT_COMMITTER_DATE=2030-01-01T00:00:00"
    sh(repo, "env", f"GIT_SEQUENCE_EDITOR={drop}", later, "git", "rebase", "-q", "-i", "HEAD~3")
    third = sh(repo, "git", "rev-parse", "--short", "HEAD").strip()
    want = {f"First call ({first})", f"Third call ({third})"}
    assert wait_until(lambda: {e.split("] ")[1] for e in entries(repo)} == want, timeout=60), (
        entries(repo)
    )
    assert sh(repo, "git", "stash", "list") == ""  # the autostash came back, none left behind
    assert (repo / "MEMORY.md").read_text().startswith("# Memory\n\nThe engine renders with DX12.")


def test_install_leaves_a_chosen_autostash_alone_and_uninstall_takes_back_only_its_own(
    repo: Path,
) -> None:
    memcore(repo, "hook", "install")
    memcore(repo, "hook", "install", "--uninstall")
    out = subprocess.run(["git", "config", "--get", "rebase.autoStash"], cwd=repo,
                         capture_output=True, text=True)  # fmt: skip
    assert out.returncode == 1  # unset again
    sh(repo, "git", "config", "rebase.autoStash", "false")  # the person's choice
    memcore(repo, "hook", "install")
    memcore(repo, "hook", "install", "--uninstall")
    assert sh(repo, "git", "config", "--get", "rebase.autoStash").strip() == "false"
