"""The git hooks: commits whose message carries a marker ("[Memory]") become dated entries in
MEMORY.md, written through the service like any other write.

``install`` adds a marked block to ``.git/hooks/post-commit`` and ``post-rewrite`` (keeping
whatever else they do). The post-commit block reads the new commit's sha at once (a few ms)
and starts ``memcore hook run <sha>`` in the background, so a commit never waits for the write
and never fails because of it: errors go to ``.memcore/hook.log``. An entry is known by its
commit's hash (the ``(abc1234)`` ending its heading), so running the hook twice for a commit
writes one entry, and post-rewrite (``commit --amend``, rebase) replaces the rewritten
commits' entries with their new commits'. The transforms here are pure; the caller applies
them with the writer's compare-and-swap, so hooks running at once never lose an entry.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import re
import shlex
import subprocess
import sys
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path

from memcore.core.errors import VaultError
from memcore.core.lines import split_lines
from memcore.core.places import make_private_dir, open_private
from memcore.vault.files import append_text

BEGIN = "# >>> memcore >>> (managed by `memcore hook install`; --uninstall removes this block)"
END = "# <<< memcore <<<"
HOOKS = ("post-commit", "post-rewrite")
_ENTRY = re.compile(r"^## \[[^\]\n]*\] .*\(([0-9a-f]{4,40})\)\s*$", re.M)


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
                  tuple(f for f in split_lines(files) if f))  # fmt: skip


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


def hook_block(vault: Path, extra_args: list[str], hook: str) -> str:
    """The shell lines memcore adds to a hook: the commit (or the rewritten pairs on stdin)
    read at once, the rest in the background at low priority. During a rebase post-commit
    leaves the work tree alone (git is still rewriting it); post-rewrite records the result."""
    base = [sys.executable, "-m", "memcore", "--vault", str(vault), *extra_args, "hook"]
    if hook == "post-commit":
        run = shlex.join([*base, "run"])
        lines = [
            "{ read -r sha; read -r merge; read -r apply; } <<GIT_ANSWER",
            "$(git rev-parse HEAD --git-path rebase-merge --git-path rebase-apply)",
            "GIT_ANSWER",
            f'[ -n "$sha" ] && [ ! -d "$merge" ] && [ ! -d "$apply" ] && '
            f'(nice {run} "$sha" >/dev/null 2>&1 &) || true',
        ]
    else:
        run = shlex.join([*base, "rewritten"])
        lines = [
            # git says amend or rebase in $1; ORIG_HEAD is the branch before a rebase (the
            # commits it dropped are those of ORIG_HEAD that are neither in HEAD nor rewritten)
            "orig=$(git rev-parse -q --verify ORIG_HEAD 2>/dev/null)",
            f'pairs=$(cat) && (printf "%s\\n" "$pairs" | nice {run} "${{1:-amend}}" '
            '--orig-head "$orig" >/dev/null 2>&1 &) || true',
        ]
    return "\n".join([BEGIN, *lines, END])


def dropped_commits(repo: Path, orig_head: str, rewritten: Sequence[str]) -> list[str]:
    """The commits a rebase left out: those of the branch before it (``orig_head``) that are
    neither in HEAD now nor among the ``rewritten`` ones (picked, reworded, squashed)."""
    if not orig_head:
        return []
    before = split_lines(git(repo, "rev-list", orig_head, "--not", "HEAD"))
    done = set(rewritten)
    return [sha for sha in before if sha and sha not in done]


def wait_for_rebase(repo: Path, seconds: float = 60.0) -> None:
    """Wait while a rebase is still finishing (git applies its autostash after post-rewrite
    runs, then removes its state folder): the entries are written after it, never under it."""
    asked = git(repo, "rev-parse", "--git-path", "rebase-merge", "--git-path", "rebase-apply")
    folders = [repo / p for p in split_lines(asked)]
    deadline = time.monotonic() + seconds
    while any(f.is_dir() for f in folders) and time.monotonic() < deadline:
        time.sleep(0.05)


# `memcore hook install` turns on rebase.autoStash where the repository has no choice of its
# own: the hook's entry in MEMORY.md is an uncommitted change, and without the stash
# `git rebase` refuses to start ("You have unstaged changes"). This marks that memcore set it,
# so that --uninstall takes back only its own setting.
AUTOSTASH_MARK = "memcore.autostash"


def enable_autostash(repo: Path) -> bool:
    """Set rebase.autoStash unless the repository (or the user) chose a value; True if set."""
    if _config(repo, "rebase.autoStash") is not None:
        return False
    git(repo, "config", "--local", "rebase.autoStash", "true")
    git(repo, "config", "--local", AUTOSTASH_MARK, "true")
    return True


def disable_autostash(repo: Path) -> bool:
    """Take back the rebase.autoStash that ``enable_autostash`` set; True if it did."""
    if _config(repo, AUTOSTASH_MARK) != "true":
        return False
    with contextlib.suppress(VaultError):  # the person may have unset it already
        git(repo, "config", "--local", "--unset", "rebase.autoStash")
    git(repo, "config", "--local", "--unset", AUTOSTASH_MARK)
    return True


def _config(repo: Path, key: str) -> str | None:
    out = subprocess.run(
        ["git", "-C", str(repo), "config", "--get", key], capture_output=True, text=True,
        timeout=30,
    )  # fmt: skip
    return out.stdout.strip() if out.returncode == 0 else None


def install(repo: Path, vault: Path, extra_args: list[str]) -> tuple[list[Path], bool]:
    """Add (or refresh) the memcore blocks; returns the hooks' paths and whether any changed."""
    paths, changed = [], False
    for name in HOOKS:
        hook = hooks_dir(repo) / name
        old = hook.read_text(encoding="utf-8") if hook.exists() else ""
        kept = _without_block(old) or "#!/bin/sh\n"
        new = kept.rstrip("\n") + "\n" + hook_block(vault, extra_args, name) + "\n"
        paths.append(hook)
        if new == old:
            continue
        hook.parent.mkdir(parents=True, exist_ok=True)
        hook.write_text(new, encoding="utf-8")
        hook.chmod(hook.stat().st_mode | 0o111)
        changed = True
    return paths, enable_autostash(repo) or changed


def uninstall(repo: Path) -> tuple[list[Path], bool]:
    paths, changed = [], False
    for name in HOOKS:
        hook = hooks_dir(repo) / name
        paths.append(hook)
        if not hook.exists() or BEGIN not in (old := hook.read_text(encoding="utf-8")):
            continue
        rest = _without_block(old)
        if rest.strip() in ("", "#!/bin/sh"):
            hook.unlink()
        else:
            hook.write_text(rest, encoding="utf-8")
        changed = True
    return paths, disable_autostash(repo) or changed


def entry_span(text: str, sha: str) -> tuple[int, int] | None:
    """Where the entry of commit ``sha`` stands in ``text`` (character offsets from its
    heading to the next heading of level 1 or 2, or the end), or None."""
    for m in _ENTRY.finditer(text):
        if sha.startswith(m.group(1)):
            nxt = re.compile(r"^#{1,2} ", re.M).search(text, m.end())
            return m.start(), nxt.start() if nxt else len(text)
    return None


def later_commits(repo: Path, sha: str) -> set[str]:
    """The commits made after ``sha`` on the branch (its descendants up to HEAD): hooks run in
    the background and race, so a later commit's entry may already be written."""
    return set(split_lines(git(repo, "rev-list", f"{sha}..HEAD")))


def with_entry(text: str, sha: str, entry: str, later: Collection[str] = ()) -> str | None:
    """``text`` with the commit's entry in commit order: before the first entry of a commit
    in ``later`` (made after it), else at the end; None when it already has one."""
    if entry_span(text, sha) is not None:
        return None
    for m in _ENTRY.finditer(text):
        if any(full.startswith(m.group(1)) for full in later):
            return text[: m.start()] + entry + "\n\n" + text[m.start() :]
    return append_text(text, entry)


def with_rewrites(
    text: str, rewrites: list[tuple[str, str, str | None]], dropped: Sequence[str] = ()
) -> str | None:
    """``text`` after commits were rewritten: each (old sha, new sha, new entry or None when
    the new commit is not marked). An old commit's entry gives way to the new commit's, in
    place, or goes when the new commit has no entry or already has one; a new marked commit
    whose old one had no entry (a reword) gets its entry. The entries of ``dropped`` commits
    (a rebase left them out) go. None: no change."""
    out = text
    for sha in dropped:
        if (span := entry_span(out, sha)) is not None:
            out = out[: span[0]] + out[span[1] :].lstrip("\n")
    for old, new, entry in rewrites:
        if old == new:  # rebased onto the same parent within the same second: nothing changed
            continue
        span = entry_span(out, old)
        has_new = entry_span(out, new) is not None
        if span is None:
            if entry is not None and not has_new:
                out = append_text(out, entry)
            continue
        start, end = span
        block = entry + "\n\n" if entry is not None and not has_new else ""
        out = out[:start] + block + out[end:].lstrip("\n")
    out = out.rstrip("\n") + "\n"
    return None if out == text else out


def _without_block(text: str) -> str:
    if BEGIN not in text:
        return text
    start = text.index(BEGIN)
    end = text.find(END, start)
    end = len(text) if end < 0 else end + len(END)
    return (text[:start] + text[end:].lstrip("\n")).rstrip("\n") + "\n"


def log_line(state_dir: Path, message: str) -> None:
    """One line to .memcore/hook.log (the hook's only output)."""
    make_private_dir(state_dir)
    stamp = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    path = state_dir / "hook.log"
    with os.fdopen(open_private(path, os.O_WRONLY | os.O_APPEND), "a", encoding="utf-8") as fh:
        fh.write(f"{stamp} {message}\n")
