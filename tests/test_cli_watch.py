"""The daemon's command line: watch --detach, stop, service install."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import socket
import stat
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import httpx
import pytest

from memcore.cli.watch import unit_name
from memcore.core.settings import load_settings
from memcore.fronts.daemon_state import daemon_status
from tests.support import free_port, wait_ready, wait_until, write


def memcore(*args: str, vault: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": "static"}
    return subprocess.run(
        [sys.executable, "-m", "memcore", "--vault", str(vault), *args],
        env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_detach_returns_once_watching_then_stop_ends_it(vault: Path) -> None:
    write(vault, "MEMORY.md", "# M\n\nDiveAdstra uses DX12 by default.\n")
    started = memcore("watch", "--detach", vault=vault)
    assert started.returncode == 0, started.stderr
    assert started.stdout.startswith("memcore watch is running (pid ")
    settings = load_settings(vault)
    try:
        assert (daemon_status(settings) or {}).get("watching") is True
        found = memcore("search", "DX12", "--json", vault=vault)
        assert json.loads(found.stdout)["results"][0]["path"] == "MEMORY.md"
        write(vault, "memory/new.md", "# N\n\nadded while detached\n")
        assert wait_until(
            lambda: bool(
                json.loads(memcore("search", "detached", "--json", vault=vault).stdout)["results"]
            ),
            timeout=20,
        )
        again = memcore("watch", "--detach", vault=vault)
        assert again.returncode == 0, again.stderr
        assert again.stdout.startswith("memcore watch is already running (pid ")
    finally:
        stopped = memcore("stop", vault=vault)
    assert stopped.returncode == 0 and stopped.stdout.startswith("stopped memcore watch")
    assert daemon_status(settings) is None
    assert "caught up with the vault" in (vault / ".memcore" / "daemon.log").read_text()
    assert (
        memcore("stop", vault=vault).stdout.strip()
        == "no memcore watch or serve is running for this vault"
    )


def test_service_install_writes_a_systemd_user_unit(vault: Path, tmp_path: Path) -> None:
    result = memcore("service", "install", vault=vault)
    assert result.returncode == 0, result.stderr
    name = unit_name(vault.resolve())
    assert name.startswith("memcore-vault-") and len(name) == len("memcore-vault-") + 8
    unit = Path(os.environ["XDG_CONFIG_HOME"]) / "systemd" / "user" / f"{name}.service"
    text = unit.read_text()
    assert f'"--vault" "{vault.resolve()}" "watch"' in text and "Restart=on-failure" in text
    assert f"systemctl --user enable --now {name}.service" in result.stdout


def test_two_vaults_with_one_folder_name_get_two_units(tmp_path: Path) -> None:
    assert unit_name(tmp_path / "a" / "vault") != unit_name(tmp_path / "b" / "vault")


def test_the_unit_carries_db_and_embedder_and_quotes_odd_paths(tmp_path: Path) -> None:
    odd = tmp_path / 'my "vault" 100% $HOME'
    (odd / "memory").mkdir(parents=True)
    db = tmp_path / "elsewhere.db"
    result = memcore(
        "--db", str(db), "--embedder", "static", "service", "install", "--print", vault=odd
    )
    assert result.returncode == 0, result.stderr
    (exec_start,) = [line for line in result.stdout.splitlines() if line.startswith("ExecStart=")]
    assert '"--db" "' + str(db) + '" "--embedder" "static" "watch"' in exec_start
    assert 'my \\"vault\\" 100%% $$HOME' in exec_start
    words = shlex.split(exec_start.removeprefix("ExecStart="))
    spelled = str(odd.resolve()).replace("%", "%%").replace("$", "$$")
    assert words[words.index("--vault") + 1] == spelled


def test_service_install_can_print_a_launchd_agent(vault: Path) -> None:
    result = memcore("service", "install", "--launchd", "--print", vault=vault)
    assert result.returncode == 0
    assert "<key>ProgramArguments</key>" in result.stdout and str(vault.resolve()) in result.stdout
    assert "<key>ExitTimeOut</key><integer>30</integer>" in result.stdout


def test_the_launchd_agent_is_well_formed_xml_for_any_path(tmp_path: Path) -> None:
    odd = tmp_path / "a & b <c>"
    (odd / "memory").mkdir(parents=True)
    result = memcore(
        "--embedder", "static", "service", "install", "--launchd", "--print", vault=odd
    )
    root = ElementTree.fromstring(result.stdout.split("\n", 2)[2])  # after the XML/DOCTYPE lines
    args = [e.text for e in root.iter("string")][:-1]  # the last is the log path
    assert str(odd.resolve()) in args and args[-3:] == ["--embedder", "static", "watch"]


def test_a_one_shot_search_asks_the_running_daemon_only_when_it_answers_for_the_same_index(
    vault: Path,
) -> None:
    write(vault, "MEMORY.md", "# M\n\nDiveAdstra uses DX12 by default.\n")
    settings = load_settings(vault)
    sock = vault / ".memcore" / "daemon.sock"
    assert memcore("watch", "--detach", vault=vault).returncode == 0
    try:
        assert wait_until(lambda: (daemon_status(settings) or {}).get("socket") == str(sock))
        assert stat.S_IMODE(sock.stat().st_mode) == 0o600  # this user only, no token needed
        asked = memcore("-v", "search", "DX12", "--json", vault=vault)
        assert "asking the running daemon" in asked.stderr, asked.stderr
        assert json.loads(asked.stdout)["results"][0]["path"] == "MEMORY.md"
        block = memcore("-v", "context", "DX12", vault=vault)
        assert block.stdout.startswith("## Relevant Memories") and "asking" in block.stderr
        other_model = memcore("-v", "--embedder", "local", "search", "DX12", vault=vault)
        assert other_model.returncode == 0 and "asking" not in other_model.stderr
        # add goes through the daemon too: the same Markdown and answer as on its own,
        # idempotency key included (a retry adds nothing and prints the first)
        args = ["add", "Bob deploys on Fridays", "--user", "bob", "--meta", "src=cli", "--json"]
        added = memcore("-v", *args, "--idempotency-key", "k-1", vault=vault)
        assert added.returncode == 0 and "asking the running daemon" in added.stderr
        (record,) = json.loads(added.stdout)
        assert (record["user_id"], record["metadata"], record["path"]) == (
            "bob", {"src": "cli"}, "memory/users/bob/core.md"
        )  # fmt: skip
        again = json.loads(memcore(*args, "--idempotency-key", "k-1", vault=vault).stdout)
        assert [r["id"] for r in again] == [record["id"]]
        assert (vault / record["path"]).read_text().count("Bob deploys on Fridays") == 1
        found = json.loads(memcore("search", "deploy Friday", "--user", "bob", "--json",
                                   vault=vault).stdout)  # fmt: skip
        assert found["results"][0]["id"] == record["id"]
        bad = memcore("add", "x", "--user", " ", vault=vault)
        assert bad.returncode == 2 and "user_id is empty" in bad.stderr
    finally:
        memcore("stop", vault=vault)
    assert wait_until(lambda: not sock.exists())  # gone as the daemon leaves
    alone = memcore("-v", "search", "DX12", "--json", vault=vault)
    assert "asking" not in alone.stderr
    assert json.loads(alone.stdout)["results"][0]["path"] == "MEMORY.md"


def test_a_killed_daemon_leaves_no_socket_the_cli_would_trust(vault: Path) -> None:
    write(vault, "MEMORY.md", "# M\n\nDiveAdstra uses DX12 by default.\n")
    settings = load_settings(vault)
    env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": "static"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "memcore", "--vault", str(vault), "watch"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        up = lambda: daemon_status(settings) or {}  # noqa: E731
        assert wait_until(lambda: bool(up().get("socket") and up().get("last_update")))
    finally:
        proc.kill()  # no clean shutdown: the socket file stays behind
        proc.wait()
    assert (vault / ".memcore" / "daemon.sock").exists()
    found = memcore("-v", "search", "DX12", "--json", vault=vault)
    assert found.returncode == 0 and "asking" not in found.stderr
    assert json.loads(found.stdout)["results"][0]["path"] == "MEMORY.md"


def test_a_detached_daemon_indexes_into_postgresql(
    vault: Path, postgres_url: str, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`watch --detach --db postgresql://...` on a vault that has no .memcore/ yet: the
    daemon keeps its lock, socket and log there and its index in PostgreSQL."""
    write(vault, "MEMORY.md", "# M\n\nDiveAdstra uses DX12 by default.\n")
    monkeypatch.setenv("MEMCORE_STORAGE_NAMESPACE", namespace)  # for the daemon and the CLI
    started = memcore("--db", postgres_url, "watch", "--detach", vault=vault)
    try:
        assert started.returncode == 0, started.stderr
        write(vault, "memory/zebra.md", "# Z\n\nThe zebra migration starts in July.\n")

        def found() -> bool:
            out = memcore("--db", postgres_url, "search", "zebra migration", "--json", vault=vault)
            return any(r["path"] == "memory/zebra.md" for r in json.loads(out.stdout)["results"])

        assert wait_until(found, timeout=20)
    finally:
        memcore("stop", vault=vault)
    assert "caught up with the vault" in (vault / ".memcore" / "daemon.log").read_text()
    assert not (vault / ".memcore" / "index.db").exists()


def test_deleting_the_index_folder_under_a_running_daemon_rebuilds_and_keeps_watching(
    vault: Path,
) -> None:
    """`rm -rf .memcore` while `memcore watch` runs: the same process notices, opens a new
    index, catches up with the vault and goes on indexing saves (it used to die)."""
    write(vault, "MEMORY.md", "# M\n\nDiveAdstra uses DX12 by default.\n")
    started = memcore("watch", "--detach", vault=vault)
    assert started.returncode == 0, started.stderr
    pid = daemon_status(load_settings(vault))["pid"]  # type: ignore[index]
    try:
        shutil.rmtree(vault / ".memcore")
        write(vault, "memory/zebra.md", "# Z\n\nThe zebra migration starts in July.\n")

        def found(query: str, path: str) -> bool:
            out = memcore("search", query, "--json", vault=vault)
            return out.returncode == 0 and any(
                r["path"] == path for r in json.loads(out.stdout)["results"]
            )

        assert wait_until(lambda: found("zebra migration", "memory/zebra.md"), timeout=30)
        assert found("DiveAdstra DX12", "MEMORY.md")  # the rest of the vault, caught up
        status = daemon_status(load_settings(vault))
        assert status is not None and status["pid"] == pid
    finally:
        memcore("stop", vault=vault)


def test_stop_names_what_it_stops_a_serve_as_well_as_a_watch(vault: Path) -> None:
    write(vault, "MEMORY.md", "# M\n\nDiveAdstra uses DX12 by default.\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": "static"}
    server = subprocess.Popen(
        [sys.executable, "-m", "memcore", "--vault", str(vault), "serve", "--port", str(port)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        settings = load_settings(vault)
        assert wait_until(lambda: (daemon_status(settings) or {}).get("watching"), timeout=30)
        assert (daemon_status(settings) or {}).get("kind") == "serve"
        stopped = memcore("stop", vault=vault)
        assert stopped.stdout.strip() == f"stopped memcore serve (pid {server.pid})"
        assert server.wait(timeout=30) == 0
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()


def test_serve_takes_its_token_from_a_file_and_warns_when_it_is_on_the_command_line(
    vault: Path, tmp_path: Path
) -> None:
    (tmp_path / "token").write_text("s3cret\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": "static"}
    base = [sys.executable, "-m", "memcore", "--vault", str(vault), "serve", "--no-watch"]
    server = subprocess.Popen(
        [*base, "--port", str(port), "--token-file", str(tmp_path / "token")],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/api/status"

        def up() -> bool:
            try:
                return httpx.get(url, timeout=1).status_code == 401
            except httpx.HTTPError:
                return False

        assert wait_until(up, timeout=30)
        ok = httpx.get(url, headers={"Authorization": "Bearer s3cret"}, timeout=5)
        assert ok.status_code == 200
    finally:
        server.terminate()
        _, err = server.communicate(timeout=30)
    assert "warning" not in err
    both = memcore("serve", "--token", "x", "--token-file", str(tmp_path / "token"), vault=vault)
    assert both.returncode == 2 and "not both" in both.stderr
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        other = s.getsockname()[1]
    flagged = subprocess.Popen(
        [*base, "--port", str(other), "--token", "visible"],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert wait_until(lambda: flagged.poll() is None and _listening(other), timeout=30)
    finally:
        flagged.terminate()
        _, err = flagged.communicate(timeout=30)
    assert "--token is visible to every user of this machine in `ps`" in err


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_service_install_serve_writes_a_unit_whose_command_serves(
    vault: Path, tmp_path: Path
) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    port = free_port()
    result = memcore(
        "--embedder", "static", "service", "install", "--serve", "--host", "0.0.0.0",
        "--port", str(port), "--token-file", str(token), vault=vault,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    name = unit_name(vault.resolve()) + "-serve"
    unit = Path(os.environ["XDG_CONFIG_HOME"]) / "systemd" / "user" / f"{name}.service"
    text = unit.read_text()
    assert "Description=memcore: serve the memory of" in text and "s3cret" not in text
    assert "TimeoutStopSec=30" in text  # covers server.stop_timeout_s (8 s)
    (exec_start,) = [line for line in text.splitlines() if line.startswith("ExecStart=")]
    words = shlex.split(exec_start.removeprefix("ExecStart="))
    assert words[words.index("serve") :] == [
        "serve", "--host", "0.0.0.0", "--port", str(port), "--token-file", str(token),
    ]  # fmt: skip
    # the unit's command, run as systemd would: it serves, with the token from the file
    proc = subprocess.Popen(words, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        assert wait_ready(f"http://127.0.0.1:{port}")
        url = f"http://127.0.0.1:{port}/api/status"
        assert httpx.get(url).status_code == 401
        assert httpx.get(url, headers={"Authorization": "Bearer s3cret"}).status_code == 200
        stopped = memcore("stop", vault=vault)
        assert stopped.stdout.startswith("stopped memcore serve"), stopped.stdout
        assert proc.wait(20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_service_install_serve_off_loopback_needs_a_token_file(vault: Path) -> None:
    result = memcore("service", "install", "--serve", "--host", "0.0.0.0", "--print", vault=vault)
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.strip().endswith("needs --token-file"), result.stderr
