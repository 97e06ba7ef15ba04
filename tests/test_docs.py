"""The commands in README.md and docs/ work as written: each document's `sh` and `python` blocks
run in order, in a fresh folder holding a copy of sample_vault, with this environment's
`memcore` first on PATH. A block that talks to a server says which one in a comment right above
it (`<!-- beside: memcore ... serve -->`): the test starts that server, waits until it answers,
runs the block, and stops it. A block that cannot run here says why (`<!-- not run: ... -->`).
And the README's two commands, in order, leave the tests green with the first one's watcher
still running."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import REPO, SAMPLE_VAULT
from tests.support import free_port, wait_until

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BIN = Path(sys.executable).parent
FENCE = re.compile(r"^```(\w*)\s*$")
NOT_RUN = re.compile(r"^<!-- not run: (.+) -->$")
BESIDE = re.compile(r"^<!-- beside: (.+) -->$")
PORT = 8765  # the docs' port; the test serves on a free one instead
INSTALL = re.compile(r"^python3 -m venv \.venv && \.venv/bin/pip install -q \S+ && ")


@dataclass(frozen=True)
class Block:
    lang: str
    code: str
    line: int  # where the block opens, 1-based
    not_run: str | None  # why, when it cannot run here
    beside: str | None = None  # the server it talks to, started for it


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
        beside = BESIDE.match(lines[n - 1]) if n else None
        if opened.group(1) in ("sh", "python"):
            code = "\n".join(lines[n + 1 : end]) + "\n"
            found.append(Block(opened.group(1), code, n + 1, note.group(1) if note else None,
                               beside.group(1) if beside else None))  # fmt: skip
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


def answers(port: int) -> bool:
    try:
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
    except OSError:
        return False
    return True


@contextlib.contextmanager
def server_for(block: Block, cwd: Path, env: dict[str, str]) -> Iterator[str]:
    """The block's server running (on a free port: the block's 8765 is rewritten to it), and
    the block's code to run beside it."""
    if block.beside is None:
        yield block.code
        return
    port = free_port()
    command = f"exec env {block.beside} --port {port}"  # env: a leading VAR=value too
    proc = subprocess.Popen(["bash", "-c", command], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120
        while not answers(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"{block.beside} did not start: {proc.communicate()[0]}")
            time.sleep(0.2)
        yield block.code.replace(str(PORT), str(port))
    finally:
        proc.terminate()
        proc.communicate(timeout=30)  # reaps it and closes its pipe


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
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "MEM0_TELEMETRY": "false"}  # fmt: skip
    tests_command = setup_commands()[1]
    ran = 0
    try:
        for block in blocks_of(doc):
            if block.not_run or block.code.strip() == tests_command:
                continue
            with server_for(block, tmp_path, env) as code:
                here = dataclasses.replace(block, code=code)
                argv = ["bash", "-euo", "pipefail", "-c", as_run_here(here)]
                if block.lang == "python":
                    argv = [sys.executable, "-c", code]
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


# the tests that read or copy sample_vault, where the main job's watcher runs
SAMPLE_READERS = [
    "tests/test_parity.py",
    "tests/test_segmenter.py",
    "tests/test_cli.py::test_with_the_embedder_down_the_context_floor_still_keeps_a_stray_word_out",
    "tests/test_web.py::test_pages_render_markdown_safely_and_answer_bad_input_in_words",
    "tests/test_docs.py::test_the_commands_in_the_docs_work_as_written",
]


@pytest.mark.timeout(900)
def test_the_readmes_two_commands_in_order_leave_the_tests_green() -> None:
    """On a fresh clone: the main job (its watcher left running in sample_vault, socket and
    all), then the tests that read or copy sample_vault, while it runs. The clone's path is
    short, as a person's would be: past ~100 bytes a daemon has no socket."""
    clone = Path(tempfile.mkdtemp(prefix="mc-")) / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True, timeout=120)
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(clone), "MEM0_TELEMETRY": "false"}  # fmt: skip
    main_job = as_run_here(blocks_of(clone / "README.md")[0])
    try:
        ran = subprocess.run(["bash", "-euo", "pipefail", "-c", main_job], cwd=clone, env=env,
                             capture_output=True, text=True, timeout=300)  # fmt: skip
        assert ran.returncode == 0, ran.stderr
        sock = clone / "sample_vault" / ".memcore" / "daemon.sock"
        assert wait_until(sock.exists, timeout=60)  # the watcher's socket: what broke them
        tests = subprocess.run(
            # a temp root of its own: pytest makes /tmp/pytest-of-<user> private again when a
            # session starts, and this session's PostgreSQL (another user) lives under it
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             "--basetemp", str(clone.parent / "tmp"), *SAMPLE_READERS],
            cwd=clone, env=env, capture_output=True, text=True, timeout=800,
        )  # fmt: skip
        assert tests.returncode == 0, tests.stdout[-3000:]
    finally:
        stop_daemons(clone)
        shutil.rmtree(clone.parent, ignore_errors=True)
