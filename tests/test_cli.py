from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

import memcore.cli.index
import memcore.cli.search  # noqa: F401 - importing a command module registers its commands
from memcore.cli import app
from tests.support import write

runner = CliRunner()


def cli(*args: str) -> tuple[int, str, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture
def static_vault(vault: Path) -> Path:
    """A vault using the fast static embedder so CLI tests stay quick."""
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    write(
        vault,
        "MEMORY.md",
        "# Projects\n\n## DiveAdstra\n\nDiveAdstra uses DX12 by default. #engine\n",
    )
    write(vault, "memory/2024-05-01.md", "# Standup\n\nThe build farm was slow today.\n")
    return vault


def test_init_creates_a_vault_skeleton(tmp_path: Path) -> None:
    target = tmp_path / "new"
    code, out, _ = cli("init", str(target))
    assert code == 0, out
    assert (target / "MEMORY.md").is_file() and (target / "memory").is_dir()
    assert (target / "memcore.toml").is_file()
    assert (target / ".memcore" / ".gitignore").read_text().strip().endswith("*")
    code, out, _ = cli("init", str(target))  # idempotent, overwrites nothing
    assert code == 0 and "created" not in out


def test_index_json_report_then_search_json(static_vault: Path) -> None:
    code, out, err = cli("--vault", str(static_vault), "index", "--json")
    assert code == 0, err
    report = json.loads(out)
    assert report["files_indexed"] == 2 and report["files_failed"] == []
    assert report["chunks_embedded"] == 2 and report["chunks_reused"] == 0
    code, out, err = cli("--vault", str(static_vault), "search", "DX12", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["query"] == "DX12"
    first = data["results"][0]
    assert set(first) == {"path", "start_line", "end_line", "heading", "score", "text"}
    assert first["path"] == "MEMORY.md" and first["heading"] == "Projects > DiveAdstra"


def test_search_filters_and_plain_output(static_vault: Path) -> None:
    cli("--vault", str(static_vault), "index")
    code, out, _ = cli(
        "--vault", str(static_vault), "search", "build", "--path", "memory/", "-n", "1"
    )
    assert code == 0
    assert out.startswith("1. memory/2024-05-01.md:1-3  Standup")
    code, out, _ = cli("--vault", str(static_vault), "search", "DX12", "--tag", "engine", "--json")
    assert [r["path"] for r in json.loads(out)["results"]] == ["MEMORY.md"]


def test_status_json(static_vault: Path) -> None:
    cli("--vault", str(static_vault), "index")
    code, out, _ = cli("--vault", str(static_vault), "status", "--json")
    info = json.loads(out)
    assert code == 0
    assert info["files"] == 2 and info["chunks"] == 2 and info["vectors_pending"] == 0
    assert info["model_id"] == "static:minilm-l6-v2-m2v256" and info["daemon"] is None
    assert info["db_bytes"] > 0 and info["last_indexed"]


def test_context_prints_relevant_memories(static_vault: Path) -> None:
    cli("--vault", str(static_vault), "index")
    code, out, _ = cli("--vault", str(static_vault), "context", "DX12 renderer", "-n", "1")
    assert code == 0
    assert out.startswith("## Relevant Memories\n1. ")
    assert "(MEMORY.md:3-5)" in out


def test_failed_files_are_reported_on_stderr_without_failing_the_run(static_vault: Path) -> None:
    (static_vault / "memory" / "bin.md").write_bytes(b"\x00\x00")
    code, _, err = cli("--vault", str(static_vault), "index")
    assert code == 0
    assert "skipped memory/bin.md: binary file" in err


def test_bad_config_key_is_one_line_and_exit_2(static_vault: Path) -> None:
    (static_vault / "memcore.toml").write_text("[search]\nlimt = 3\n")
    code, _, err = cli("--vault", str(static_vault), "search", "x")
    assert code == 2
    assert err.strip().count("\n") == 0 and "unknown key search.limt" in err
    assert "Traceback" not in err


def test_missing_vault_is_one_line(tmp_path: Path) -> None:
    code, _, err = cli("--vault", str(tmp_path / "nope"), "index")
    assert code == 1
    assert err.strip() == f"memcore: vault folder {(tmp_path / 'nope').resolve()} does not exist"


def test_bad_date_and_fusion_flags(static_vault: Path) -> None:
    code, _, err = cli("--vault", str(static_vault), "search", "x", "--since", "May")
    assert code == 2 and "--since must be a date" in err
    code, _, err = cli("--vault", str(static_vault), "search", "x", "--fusion", "magic")
    assert code == 2 and "--fusion must be one of" in err


def test_unreachable_ollama_degrades_to_keyword_search(
    static_vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MEMCORE_OLLAMA_HOST", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("MEMCORE_EMBEDDER_RETRIES", "0")
    code, out, err = cli("--vault", str(static_vault), "--embedder", "ollama", "index", "--json")
    assert code == 0, err
    assert json.loads(out)["chunks_pending"] == 2
    assert "embedder unavailable" in err
    code, out, err = cli(
        "--vault", str(static_vault), "--embedder", "ollama", "search", "DX12", "--json"
    )
    assert code == 0
    data = json.loads(out)
    assert data["mode"] == "keyword" and data["results"][0]["path"] == "MEMORY.md"
    assert "keyword results only" in err


def test_searching_an_unindexed_vault_says_how_to_fix_it(static_vault: Path) -> None:
    code, out, err = cli("--vault", str(static_vault), "search", "DX12")
    assert code == 0 and out.strip() == "no matches"
    assert "the index is empty; run `memcore index`" in err


def test_read_only_vault_needs_db_elsewhere(static_vault: Path, tmp_path: Path) -> None:
    static_vault.chmod(0o555)
    try:
        code, _, err = cli("--vault", str(static_vault), "index")
        if os.geteuid() != 0:  # root may write anyway
            assert code == 1 and "use --db to keep the index elsewhere" in err
        code, out, err = cli(
            "--vault", str(static_vault), "--db", str(tmp_path / "i.db"), "index", "--json"
        )
        assert code == 0, err
        assert json.loads(out)["files_indexed"] == 2
    finally:
        static_vault.chmod(0o755)
