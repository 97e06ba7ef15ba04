"""The plain forms of search, context and add are answered without typer (cli/quick.py): beside a
running daemon before asyncio or the settings load, without one by opening the index; either
way they print exactly what the typer command prints, and anything else is left to it."""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from memcore.cli import quick
from memcore.core.settings import load_settings
from memcore.fronts.daemon_state import daemon_status
from tests.support import wait_until, write

# Runs the entry point and says on stderr's last line which heavy modules it loaded.
ENTRY = """
import sys
from memcore.cli import main
code = 0
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
sys.stdout.flush()
heavy = ("typer", "asyncio", "numpy", "memcore.core.settings", "memcore.core.models",
         "logging")  # logging: ~6 ms of a 40 ms answer from the daemon
sys.stderr.write("\\nLOADED:" + ",".join(m for m in heavy if m in sys.modules))
sys.exit(code)
"""
# The same command line on typer alone (what every command ran before cli/quick.py).
TYPER = """
import sys
from memcore.cli import app, hoist_global_options
app.main(hoist_global_options(sys.argv[1:]))
"""


def env() -> dict[str, str]:
    return {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": "static"}


def run(program: str, vault: Path, *args: str) -> tuple[int, str, str, str]:
    """(exit code, stdout, stderr, heavy modules loaded) of one command line."""
    done = subprocess.run(
        [sys.executable, "-c", program, "--vault", str(vault), *args],
        env=env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    err, sep, loaded = done.stderr.rpartition("\nLOADED:")
    return done.returncode, done.stdout, err if sep else done.stderr, loaded


@pytest.fixture
def daemon(vault: Path) -> Iterator[Path]:
    write(vault, "MEMORY.md", "# M\n\n## Engine\n\nDiveAdstra uses DX12 by default.\n")
    write(vault, "memory/2024-05-21.md", "# 会议\n\n## 记忆系统\n\n中文搜索必须分词。\n")
    started = subprocess.run(
        [sys.executable, "-m", "memcore", "--vault", str(vault), "watch", "--detach"],
        env=env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert started.returncode == 0, started.stderr
    settings = load_settings(vault, {"embedder.provider": "static"})
    try:
        assert wait_until(lambda: bool((daemon_status(settings) or {}).get("socket")))
        yield vault
    finally:
        subprocess.run(
            [sys.executable, "-m", "memcore", "--vault", str(vault), "stop"],
            env=env(), capture_output=True, timeout=60,
        )  # fmt: skip


@pytest.mark.parametrize(
    "args",
    [
        ("search", "DX12"),
        ("search", "DX12", "--json", "-n", "1"),
        ("search", "renderer default", "--limit=2"),
        ("search", "中文搜索"),
        ("context", "DX12 crash"),
        ("context", "zebra migration patterns"),
    ],
)
def test_the_daemon_answers_a_plain_read_before_typer_loads_and_it_prints_the_same(
    daemon: Path, args: tuple[str, ...]
) -> None:
    code, out, err, loaded = run(ENTRY, daemon, *args)
    assert loaded == "", f"{args} loaded {loaded}"
    assert code == 0 and (out or err)
    assert (code, out, err) == run(TYPER, daemon, *args)[:3]


VOLATILE = re.compile(
    r'R=\S+|"(retrievability|stability_days|difficulty)": [\d.e-]+|"reviews": \d+|'
    r'"last_review": "[^"]*"'
)


def steady(printed: str) -> str:
    """What a command printed without the strength numbers (a get is a use: every read of a
    memory moves them on, so two reads in a row differ there and only there)."""
    return VOLATILE.sub("", printed)


def test_the_reads_beside_a_daemon_print_what_typer_prints_without_loading_it(
    daemon: Path,
) -> None:
    """list, count, get, history and entities through the daemon's socket: what the typer
    command prints, byte for byte, without typer, asyncio or the settings."""
    made = run(TYPER, daemon, "add", "Bob deploys on Fridays", "--user", "bob", "--json")[1]
    run(TYPER, daemon, "add", "Ann reviews shaders", "--user", "ann", "--category", "daily")
    mid = json.loads(made)[0]["id"]
    run(TYPER, daemon, "update", mid, "Bob deploys on Thursdays")
    for args in [
        ("list",), ("list", "--json"), ("list", "--user", "bob"),
        ("list", "-n", "1", "--offset", "1"), ("list", "--category", "daily", "--json"),
        ("count",), ("count", "--user", "bob", "--json"), ("count", "--category", "daily"),
        ("get", mid), ("get", mid, "--json"),
        ("history", mid), ("history", mid, "--json"), ("entities",), ("entities", "--json"),
        ("status",),
    ]:  # fmt: skip
        code, out, err, loaded = run(ENTRY, daemon, *args)
        assert (code, loaded) == (0, ""), (args, err, loaded)
        typed = run(TYPER, daemon, *args)[:3]
        assert (code, steady(out), err) == (typed[0], steady(typed[1]), typed[2]), args
    unknown = run(ENTRY, daemon, "history", "m-0000000000000000")
    assert unknown[0] != 0 and "typer" in unknown[3]  # the typer command words the 404


def test_a_plain_add_goes_through_the_daemon_once_and_prints_as_typer_does(daemon: Path) -> None:
    code, out, err, loaded = run(ENTRY, daemon, "add", "Bob deploys on Fridays", "--user", "bob")
    assert (code, err, loaded) == (0, "", "")
    line = re.compile(r"^m-[0-9a-f]{16}  \[core user=bob\]( core| R=\d\.\d\d)?  (.*)\n$")
    assert (m := line.match(out)) and m.group(2) == "Bob deploys on Fridays", out
    typed = run(TYPER, daemon, "add", "Bob reviews shaders", "--user", "bob")[1]
    assert (t := line.match(typed)) and t.group(1) == m.group(1), typed
    core = (daemon / "memory/users/bob/core.md").read_text()
    assert core.count("Bob deploys on Fridays") == 1 and out.split()[0] in core
    found = json.loads(run(ENTRY, daemon, "search", "deploy Friday", "--user", "bob", "--json")[1])
    assert found["results"][0]["id"] == out.split()[0]


def test_what_the_daemon_refuses_or_does_not_find_is_worded_by_the_typer_command(
    daemon: Path,
) -> None:
    code, _, err, loaded = run(ENTRY, daemon, "add", "x", "--user", " ")
    assert code == 2 and "user_id is empty" in err and "typer" in loaded
    assert not (daemon / "memory/users").exists()  # refused: nothing written
    nothing = run(ENTRY, daemon, "search", "DX12", "--user", "nobody")
    assert nothing[:3] == run(TYPER, daemon, "search", "DX12", "--user", "nobody")[:3]
    assert nothing[1] == "no matches\n" and "typer" in nothing[3]


@pytest.mark.parametrize(
    "argv",
    [
        ["search", "x", "--tag", "engine"],  # an option the plain form does not take
        ["search", "x", "--user", "a", "--user", "b"],  # repeated
        ["search", "x", "--limit", "0"],
        ["search", "x", "--limit", "1001"],
        ["search", "x", "-n", "ten"],
        ["context", "x", "--limit", "51"],
        ["search", "?!"],  # no word to search for
        ["search", "x", "y"],
        ["search"],
        ["add", "-"],  # stdin
        ["add", "x", "--json"],
        ["-v", "search", "x"],
        ["--embedder", "local", "search", "x"],
        ["--vault", "a", "--vault", "b", "search", "x"],
        ["list", "--tag", "x"],
        ["list", "x"],
        ["list", "--limit", "10001"],
        ["count", "--meta", "a=b"],
        ["get"],
        ["history", "a", "b"],
        ["entities", "x"],
        ["status", "--json"],  # the document, keys in the typer command's order
        ["search", "x", "--user", "-a"],
        ["search", "--", "x"],
        ["search", "x", "-n=5"],  # click reads the value "=5"
        ["-V=/v", "search", "x"],
    ],
)
def test_anything_but_a_plain_form_is_left_to_typer(argv: list[str]) -> None:
    assert quick.parse(argv) is None


def test_the_plain_forms_read_as_typer_reads_them() -> None:
    assert quick.parse(["-V", "/v", "search", "a b", "-n", "5", "--json"]) == (
        "/v", "search", "a b", {"limit": 5, "json": True}
    )  # fmt: skip
    assert quick.parse(["--vault=/v", "context", "q", "--user=al", "--run", "r1"]) == (
        "/v", "context", "q", {"user_id": "al", "run_id": "r1"}
    )  # fmt: skip
    assert quick.parse(["add", "remember", "--agent", "a"]) == (
        None, "add", "remember", {"agent_id": "a"}
    )  # fmt: skip


def test_a_daemon_configured_otherwise_is_not_asked(
    daemon: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMCORE_EMBEDDER_PROVIDER", "static")  # as the daemon has it
    sock = str(daemon / ".memcore" / "daemon.sock")
    assert quick.daemon_socket(str(daemon)) == sock
    monkeypatch.setenv("MEMCORE_SEARCH_LIMIT", "3")  # a setting the daemon does not have
    assert quick.daemon_socket(str(daemon)) is None
    monkeypatch.delenv("MEMCORE_SEARCH_LIMIT")
    write(daemon, "memcore.toml", "[search]\nlimit = 4\n")  # config written since it started
    assert quick.daemon_socket(str(daemon)) is None
    (daemon / "memcore.toml").unlink()
    assert quick.daemon_socket(str(daemon)) == sock


def test_settings_depend_on_the_working_folder_only_through_a_relative_db(
    vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert json.loads(load_settings(vault).inputs)["cwd"] is None
    absolute = load_settings(vault, {"storage.db": str(tmp_path / "i.db")})
    assert json.loads(absolute.inputs)["cwd"] is None
    relative = json.loads(load_settings(vault, {"storage.db": "i.db"}).inputs)
    assert relative["cwd"] == str(tmp_path) and relative["overrides"] == [["storage.db", "i.db"]]


def test_version_is_printed_without_loading_the_command_line() -> None:
    done = subprocess.run(
        [sys.executable, "-c", ENTRY, "--version"], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and re.fullmatch(r"memcore \d+\.\d+\.\d+\n", done.stdout)
    assert done.stderr.endswith("LOADED:")


@pytest.mark.parametrize(
    "args",
    [
        ("search", "DX12"),
        ("search", "DX12", "--json", "--limit", "1"),
        ("search", "DX12", "--user", "nobody"),  # no matches
        ("context", "DX12 crash"),
        ("context", "zebra migration patterns", "--agent", "a1"),
    ],
)
def test_with_no_daemon_a_plain_read_is_answered_without_typer_and_prints_the_same(
    vault: Path, args: tuple[str, ...]
) -> None:
    write(vault, "MEMORY.md", "# M\n\n## Engine\n\nDiveAdstra uses DX12 by default.\n")
    indexed = subprocess.run(
        [sys.executable, "-m", "memcore", "--vault", str(vault), "index"],
        env=env(), capture_output=True, timeout=60,
    )  # fmt: skip
    assert indexed.returncode == 0
    code, out, err, loaded = run(ENTRY, vault, *args)
    assert "typer" not in loaded and "numpy" in loaded  # it opened the index itself
    assert code == 0 and (out or err)
    assert (code, out, err) == run(TYPER, vault, *args)[:3]
    # The command itself (main() reading sys.argv) leaves without tearing the interpreter
    # down: the same answer, flushed, and the same exit code.
    command = subprocess.run(
        [sys.executable, "-m", "memcore", "--vault", str(vault), *args],
        env=env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert (command.returncode, command.stdout, command.stderr) == (code, out, err)


# Runs the entry point and says on stderr's last line what OPENBLAS_NUM_THREADS was when numpy
# was imported (numpy's OpenBLAS reads it then, and only then).
AT_NUMPY = """
import os, sys
seen = []
class Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy" and not seen:
            seen.append(os.environ.get("OPENBLAS_NUM_THREADS", "unset"))
        return None
sys.meta_path.insert(0, Watch())
from memcore.cli import main
try:
    main(sys.argv[1:])
except SystemExit:
    pass
sys.stdout.flush()
sys.stderr.write("\\nBLAS:" + ",".join(seen))
"""


@pytest.mark.parametrize(("given", "numpy_sees"), [(None, "1"), ("2", "2")])
def test_the_command_imports_numpy_with_one_blas_thread_unless_told_otherwise(
    vault: Path, given: str | None, numpy_sees: str
) -> None:
    write(vault, "MEMORY.md", "# M\n\n## Engine\n\nDiveAdstra uses DX12 by default.\n")
    environ = {k: v for k, v in env().items() if k != "OPENBLAS_NUM_THREADS"}
    if given is not None:
        environ["OPENBLAS_NUM_THREADS"] = given
    for args in (("index",), ("search", "DX12")):  # the typer path, then the quick one
        done = subprocess.run(
            [sys.executable, "-c", AT_NUMPY, "--vault", str(vault), *args],
            env=environ, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.stderr.endswith(f"BLAS:{numpy_sees}"), done.stderr[-500:]
        assert "DX12" in done.stdout or args == ("index",)


def test_with_no_daemon_and_no_index_the_typer_command_says_what_to_do(vault: Path) -> None:
    write(vault, "MEMORY.md", "# M\n\nDiveAdstra uses DX12 by default.\n")
    code, out, err, loaded = run(ENTRY, vault, "search", "DX12")
    assert code == 1 and "no index yet" in err and "typer" in loaded
    assert (code, out, err) == run(TYPER, vault, "search", "DX12")[:3]
    assert not (vault / ".memcore" / "index.db").exists()


@contextlib.contextmanager
def fake_daemon(vault: Path, reply: bytes) -> Iterator[list[bytes]]:
    """A daemon holding the vault (its lock, a daemon.json published for this test's inputs)
    whose socket reads each request, sends ``reply`` (b"": nothing) and hangs up; yields the
    requests it read."""
    import fcntl
    import socket
    import threading

    from memcore.core.places import config_inputs, inputs_digest

    state = vault / ".memcore"
    sock_path = state / "fake.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    server.listen(4)
    server.settimeout(0.2)
    asked: list[bytes] = []
    done = threading.Event()

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = server.accept()
            except TimeoutError:
                continue
            with conn:
                asked.append(conn.recv(65536))
                conn.sendall(reply)

    thread = threading.Thread(target=serve)
    thread.start()
    settings = load_settings(vault, {"embedder.provider": "static"})
    inputs = config_inputs(vault.resolve(), env(), None, None)
    (state / "daemon.json").write_text(json.dumps({
        "db": settings.index_location, "embedder": "static", "memory": "markdown",
        "config": {"digest": inputs_digest(inputs), "cwd": False}, "socket": str(sock_path),
    }))  # fmt: skip
    with (state / "daemon.lock").open("a+") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # "a daemon holds the vault"
        try:
            yield asked
        finally:
            done.set()
            thread.join()
            server.close()


def test_a_daemon_that_takes_the_request_and_never_answers_is_asked_once(vault: Path) -> None:
    """The exchange broke off (a daemon gone or hung mid-way): the search is answered from the
    index at once, not asked of the daemon a second time as the typer command would."""
    write(vault, "MEMORY.md", "# M\n\n## Engine\n\nDiveAdstra uses DX12 by default.\n")
    assert run(TYPER, vault, "index")[0] == 0
    alone = run(TYPER, vault, "search", "DX12")
    with fake_daemon(vault, b"") as asked:
        code, out, err, loaded = run(ENTRY, vault, "search", "DX12")
    assert len(asked) == 1 and asked[0].startswith(b"POST /api/memory/search")
    assert (code, out, err) == alone[:3] and "typer" not in loaded


def test_an_add_the_daemon_took_and_answered_unreadably_is_reported_not_sent_again(
    vault: Path,
) -> None:
    write(vault, "MEMORY.md", "# M\n\nDiveAdstra uses DX12 by default.\n")
    assert run(TYPER, vault, "index")[0] == 0
    garbled = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nxyz"
    with fake_daemon(vault, garbled) as asked:
        code, out, err, _ = run(ENTRY, vault, "add", "Bob deploys on Fridays", "--user", "bob")
    assert len(asked) == 1 and asked[0].startswith(b"POST /api/memories")
    assert (code, out) == (
        1,
        "",
    ) and err == "memcore: the running daemon answered 200 without JSON\n"
    assert not (vault / "memory/users").exists()  # not added here behind the daemon's back


@pytest.mark.parametrize("args", [("search", "DX12"), ("search", "DX12", "--fusion", "rrf")])
def test_a_reader_that_goes_away_ends_the_command_quietly(
    vault: Path, args: tuple[str, ...]
) -> None:
    """`memcore search x | head -1`: the plain form (answered here) and the typer command
    both end with code 1 and say nothing (no traceback of a broken pipe)."""
    write(vault, "MEMORY.md", "# M\n\n## Engine\n\nDiveAdstra uses DX12 by default.\n")
    cmd = [sys.executable, "-m", "memcore", "--vault", str(vault)]
    subprocess.run([*cmd, "index"], env=env(), capture_output=True, timeout=60, check=True)
    with subprocess.Popen(
        [*cmd, *args], env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as command:
        assert command.stdout is not None and command.stderr is not None
        command.stdout.close()  # gone before the command prints anything
        err = command.stderr.read().decode()
        assert (command.wait(60), err) == (1, "")


# The `memcore` command as its own process (main() with no arguments, where a model helper
# may be forked), saying on stderr's last line how many processes it forked.
FORKS = """
import os, sys
forked = []
fork = os.fork
def counted():
    pid = fork()
    if pid:
        forked.append(pid)
    return pid
os.fork = counted
exit_now = os._exit
def leave(code):
    sys.stderr.write("\\nFORKED:" + str(len(forked)))
    exit_now(code)
os._exit = leave
from memcore.cli import main
sys.argv = ["memcore", *sys.argv[1:]]
main()
"""


def test_no_model_helper_is_forked_when_a_daemon_holds_the_vault(daemon: Path) -> None:
    """The daemon embeds: a helper forked and killed beside it would only slow its answer."""
    for args in (("search", "DX12"), ("add", "Bob deploys on Fridays", "--user", "bob")):
        done = subprocess.run(
            [sys.executable, "-c", FORKS, "--vault", str(daemon), *args],
            env=env(), capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert done.returncode == 0 and done.stderr.endswith("FORKED:0"), (args, done.stderr)
    alone = daemon.parent / "alone"
    write(alone, "MEMORY.md", "# M\n\n## Engine\n\nDiveAdstra uses DX12 by default.\n")
    subprocess.run([sys.executable, "-m", "memcore", "--vault", str(alone), "index"],
                   env=env(), check=True, capture_output=True, timeout=60)  # fmt: skip
    done = subprocess.run(  # no daemon: the helper is forked (then let go: static embedder)
        [sys.executable, "-c", FORKS, "--vault", str(alone), "search", "DX12"],
        env=env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    helpers = 1 if len(os.sched_getaffinity(0)) >= 2 else 0  # none on one core
    assert done.returncode == 0 and done.stderr.endswith(f"FORKED:{helpers}"), done.stderr


# The entry point, saying on stderr's last line whether indexing's writing half was loaded.
WRITING_HALF = ENTRY.replace(
    'heavy = ("typer",', 'heavy = ("memcore.index.file_batches", "memcore.index.prepare", "typer",'
)


def test_a_catch_up_that_finds_nothing_changed_never_loads_the_writing_half(vault: Path) -> None:
    """A one-shot search catches the index up with the vault first; when nothing changed (most
    of the time) the modules that read, chunk, embed and write files are not imported (~5 ms);
    when a file changed, they are, and the search finds the change."""
    write(vault, "MEMORY.md", "# M\n\nDiveAdstra uses DX12 by default.\n")
    index = subprocess.run(
        [sys.executable, "-m", "memcore", "--vault", str(vault), "index"],
        env=env(), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert index.returncode == 0, index.stderr
    code, out, err, loaded = run(WRITING_HALF, vault, "search", "DX12")
    assert code == 0 and "DX12" in out, err
    assert loaded == "asyncio,numpy,memcore.core.settings,memcore.core.models,logging"
    write(vault, "memory/vulkan.md", "# Renderer\n\nThe Vulkan port ships in May.\n")
    code, out, err, loaded = run(WRITING_HALF, vault, "search", "Vulkan port")
    assert code == 0 and "memory/vulkan.md" in out, err
    assert loaded.startswith("memcore.index.file_batches,memcore.index.prepare,asyncio")
