"""The git post-commit hook: commits whose message carries a marker ("[Memory]") become dated
entries in MEMORY.md, written through the service like any other write.

``install`` adds a marked block to ``.git/hooks/post-commit`` (keeping whatever else the hook
does); the block starts ``memcore hook run`` in the background, so a commit never waits for
it and never fails because of it: its errors go to ``.memcore/hook.log``.
"""

from __future__ import annotations

import datetime as dt
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from memcore.core.errors import VaultError

BEGIN = "# >>> memcore >>> (managed by `memcore hook install`; --uninstall removes this block)"
END = "# <<< memcore <<<"


@dataclass(frozen=True, slots=True)
class Commit:
    sha: str
    short: str
    subject: str
    body: str
    day: str
    files: tuple[str, ...]


def git(repo: Path, *args: str) -> str:
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), *args], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise VaultError(f"git failed: {exc}") from None
    if out.returncode:
        raise VaultError(f"git {args[0]} failed: {out.stderr.strip() or out.returncode}")
    return out.stdout


def hooks_dir(repo: Path) -> Path:
    """The repository's hooks folder (honours core.hooksPath)."""
    path = git(repo, "rev-parse", "--git-path", "hooks").strip()
    return (repo / path).resolve()


def read_commit(repo: Path, rev: str = "HEAD") -> Commit:
    sha, short, day, subject, *body = git(
        repo, "log", "-1", "--format=%H%n%h%n%cs%n%s%n%b", rev
    ).split("\n")
    files = git(repo, "diff-tree", "--no-commit-id", "--name-only", "-r", "--root", rev)
    return Commit(sha, short, subject, "\n".join(body).strip(), day,
                  tuple(f for f in files.splitlines() if f))  # fmt: skip


def marked(commit: Commit, markers: tuple[str, ...]) -> bool:
    message = f"{commit.subject}\n{commit.body}".lower()
    return any(m.lower() in message for m in markers)


def summary(commit: Commit, markers: tuple[str, ...]) -> str:
    """The MEMORY.md entry for a marked commit: date, short hash, subject, body, files."""

    def strip(text: str) -> str:
        for m in markers:
            while (at := text.lower().find(m.lower())) >= 0:
                text = text[:at] + text[at + len(m) :]
        return " ".join(text.split(" ")).strip()

    lines = [f"## [{commit.day}] {strip(commit.subject) or 'commit'} ({commit.short})", ""]
    body = "\n".join(strip(line) for line in commit.body.split("\n")).strip()
    if body:
        lines += [body, ""]
    if commit.files:
        shown = ", ".join(f"`{f}`" for f in commit.files[:20])
        more = f" and {len(commit.files) - 20} more" if len(commit.files) > 20 else ""
        lines.append(f"Files: {shown}{more}")
    return "\n".join(lines).strip()


def hook_block(vault: Path, extra_args: list[str]) -> str:
    cmd = [sys.executable, "-m", "memcore", "--vault", str(vault), *extra_args, "hook", "run"]
    return "\n".join([BEGIN, f"({shlex.join(cmd)} >/dev/null 2>&1 &) || true", END])


def install(repo: Path, vault: Path, extra_args: list[str]) -> tuple[Path, bool]:
    """Add (or refresh) the memcore block; returns the hook's path and whether it changed."""
    hook = hooks_dir(repo) / "post-commit"
    old = hook.read_text(encoding="utf-8") if hook.exists() else ""
    kept = _without_block(old) or "#!/bin/sh\n"
    new = kept.rstrip("\n") + "\n" + hook_block(vault, extra_args) + "\n"
    if new == old:
        return hook, False
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text(new, encoding="utf-8")
    hook.chmod(hook.stat().st_mode | 0o111)
    return hook, True


def uninstall(repo: Path) -> tuple[Path, bool]:
    hook = hooks_dir(repo) / "post-commit"
    if not hook.exists() or BEGIN not in (old := hook.read_text(encoding="utf-8")):
        return hook, False
    rest = _without_block(old)
    if rest.strip() in ("", "#!/bin/sh"):
        hook.unlink()
    else:
        hook.write_text(rest, encoding="utf-8")
    return hook, True


def _without_block(text: str) -> str:
    if BEGIN not in text:
        return text
    start = text.index(BEGIN)
    end = text.find(END, start)
    end = len(text) if end < 0 else end + len(END)
    return (text[:start] + text[end:].lstrip("\n")).rstrip("\n") + "\n"


def log_line(state_dir: Path, message: str) -> None:
    """One line to .memcore/hook.log (the hook's only output)."""
    state_dir.mkdir(exist_ok=True)
    stamp = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    with (state_dir / "hook.log").open("a", encoding="utf-8") as fh:
        fh.write(f"{stamp} {message}\n")
