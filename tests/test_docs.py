"""The commands in README.md and docs/ work as written: each document's `sh` and `python` blocks
run in order, in a fresh folder holding a copy of sample_vault, with this environment's
`memcore` first on PATH. A block that cannot run here says why in a comment right above it
(`<!-- not run: ... -->`)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLE_VAULT

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent
FENCE = re.compile(r"^```(\w*)\s*$")
NOT_RUN = re.compile(r"^<!-- not run: (.+) -->$")
INSTALL = re.compile(r"^python3 -m venv \.venv && \.venv/bin/pip install -q \S+ && ")


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int  # where the block opens, 1-based
    not_run: str | None  # why, when it cannot run here


def blocks_of(path: Path) -> list[Block]:
    """The fenced sh and python blocks of a Markdown file, with their not-run notes."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found, n = [], 0
    while n < len(lines):
        opened = FENCE.match(lines[n])
        if not opened:
            n += 1
            continue
        end = next(i for i in range(n + 1, len(lines)) if lines[i].startswith("```"))
        note = NOT_RUN.match(lines[n - 1]) if n else None
        if opened.group(1) in ("sh", "python"):
            code = "\n".join(lines[n + 1 : end]) + "\n"
            found.append(Block(opened.group(1), code, n + 1, note.group(1) if note else None))
        n = end + 1
    return found


def setup_commands() -> tuple[str, str]:
    """The README's two set-up commands: (main job, tests)."""
    first, second = blocks_of(REPO / "README.md")[:2]
    return first.code.strip(), second.code.strip()


def as_run_here(block: Block) -> str:
    """The README's main job minus its install step, on this environment's memcore."""
    code = block.code.strip()
    if INSTALL.match(code):
        code = INSTALL.sub("", code).replace(".venv/bin/", f"{BIN}/")
    return code + "\n"


def stop_daemons(workspace: Path) -> None:
    for state in workspace.rglob(".memcore"):
        if (state / "daemon.pid").exists() or (state / "daemon.lock").exists():
            subprocess.run(
                [BIN / "memcore", "--vault", str(state.parent), "stop"],
                capture_output=True,
                timeout=60,
                check=False,
            )


@pytest.mark.parametrize(
    "doc", [d for d in DOCS if any(not b.not_run for b in blocks_of(d))], ids=lambda p: p.name
)
def test_the_commands_in_the_docs_work_as_written(doc: Path, tmp_path: Path) -> None:
    shutil.copytree(SAMPLE_VAULT, tmp_path / "sample_vault", ignore=shutil.ignore_patterns(".*"))
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    tests_command = setup_commands()[1]
    ran = 0
    try:
        for block in blocks_of(doc):
            if block.not_run or block.code.strip() == tests_command:
                continue
            argv = ["bash", "-euo", "pipefail", "-c", as_run_here(block)]
            if block.lang == "python":
                argv = [sys.executable, "-c", block.code]
            out = subprocess.run(
                argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=180
            )
            assert out.returncode == 0, (
                f"{doc.name}:{block.line} exited {out.returncode}\n{block.code}\n"
                f"stdout: {out.stdout[-2000:]}\nstderr: {out.stderr[-2000:]}"
            )
            ran += 1
    finally:
        stop_daemons(tmp_path)
    assert ran, f"{doc.name}: no block ran"


def test_the_readme_starts_with_the_two_set_up_commands_and_ci_runs_the_second() -> None:
    main_job, tests = setup_commands()
    assert "sample_vault watch --detach" in main_job and 'search "render engine"' in main_job
    assert tests.endswith("python -m pytest")
    ci = (REPO / ".ci" / "run").read_text(encoding="utf-8")
    assert tests in ci.splitlines(), ".ci/run must run the README's test command verbatim"


def test_every_block_that_is_not_run_says_why() -> None:
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for note in re.findall(r"<!-- not run:(.*?)-->", text):
            assert len(note.strip()) > 10, f"{doc.name}: a not-run note without a reason"
        assert "<!-- not run" not in re.sub(r"<!-- not run: .+ -->\n```", "", text), (
            f"{doc.name}: a not-run note must stand right above its block"
        )


def test_the_readme_stays_short_and_its_links_resolve() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 300
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#:]+\.md)(?:#[^)]*)?\)", doc.read_text("utf-8")):
            assert (doc.parent / target).is_file(), f"{doc.name} links to missing {target}"
