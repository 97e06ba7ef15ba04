from __future__ import annotations

import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

import memcore
from memcore.cli import main
from memcore.core.settings import load_settings
from memcore.storage.ann import AnnIndex
from tests.conftest import SAMPLE_VAULT
from tests.support import write


def cli(*args: str) -> tuple[int, str, str]:
    """Run the real entry point in this process: (exit code, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 1
    return code, out.getvalue(), err.getvalue()


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
    assert set(first) == {"id", "path", "start_line", "end_line", "heading", "score", "text",
                          "vector_score", "keyword_score", "date", "tags"}  # fmt: skip
    assert first["path"] == "MEMORY.md" and first["heading"] == "Projects > DiveAdstra"
    assert first["id"] == f"note:MEMORY.md#L{first['start_line']}-{first['end_line']}"
    assert 0 <= first["score"] <= 1


def test_index_leaves_a_big_vault_its_vector_graph_and_reindex_builds_it_anew(
    static_vault: Path,
) -> None:
    """Past storage.ann_min_vectors, a one-shot index saves the graph searches load."""
    (static_vault / "memcore.toml").write_text(
        '[embedder]\nprovider = "static"\n[storage]\nann_min_vectors = 4\n'
    )
    for n in range(6):
        write(static_vault, f"memory/topic-{n}.md", f"# Topic {n}\n\nNote about subject {n}.\n")

    def graph_keys() -> set[int]:
        (path,) = (static_vault / ".memcore").glob("index.db.*.hnsw")
        graph = AnnIndex.load(path, 256, 0)
        assert graph is not None
        return set(graph.keys().tolist())

    def chunk_ids() -> set[int]:
        with sqlite3.connect(static_vault / ".memcore" / "index.db") as db:
            rows = db.execute("SELECT id FROM memory_chunks WHERE embedding IS NOT NULL")
            return {r[0] for r in rows}

    code, _, err = cli("--vault", str(static_vault), "index")
    assert code == 0, err
    assert graph_keys() == chunk_ids() and len(chunk_ids()) == 8
    code, _, err = cli("--vault", str(static_vault), "reindex")  # every chunk gets a new id
    assert code == 0, err
    assert graph_keys() == chunk_ids()
    code, out, err = cli("--vault", str(static_vault), "search", "DX12", "-n", "1", "--json")
    assert code == 0, err
    assert json.loads(out)["results"][0]["path"] == "MEMORY.md"


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
    # both words are in the vault: in a vault of two chunks "renderer", found nowhere, would
    # weigh more than "DX12", found in half of it, and hold the score under the floor
    code, out, _ = cli("--vault", str(static_vault), "context", "DiveAdstra DX12", "-n", "1")
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
    assert code == 2
    assert err.strip() == f"memcore: vault folder {(tmp_path / 'nope').resolve()} does not exist"


def test_bad_date_and_fusion_flags(static_vault: Path) -> None:
    code, _, err = cli("--vault", str(static_vault), "search", "x", "--since", "May")
    assert code == 2 and "since must be a date" in err
    code, _, err = cli("--vault", str(static_vault), "search", "x", "--fusion", "magic")
    assert code == 2 and "--fusion must be one of" in err


@pytest.fixture
def ollama_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ollama configured on a loopback port nobody listens on."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("MEMCORE_OLLAMA_HOST", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("MEMCORE_EMBEDDER_RETRIES", "0")


@pytest.mark.usefixtures("ollama_down")
def test_unreachable_ollama_degrades_to_keyword_search(static_vault: Path) -> None:
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


@pytest.mark.usefixtures("ollama_down")
def test_with_the_embedder_down_the_context_floor_still_keeps_a_stray_word_out(
    tmp_path: Path,
) -> None:
    """Keyword-only scores are BM25 over the best hit's, times the share of the query's rarity
    (IDF) the best hit holds. Scaled to the best hit alone, "a query nobody asked" scored 1.0
    on sample_vault (one note says "asked") and `context` put unrelated notes in the prompt."""
    vault = tmp_path / "sample_vault"
    shutil.copytree(SAMPLE_VAULT, vault, ignore=shutil.ignore_patterns(".*"))
    on = ("--vault", str(vault), "--embedder", "ollama")
    assert cli(*on, "index")[0] == 0
    code, out, err = cli(*on, "search", "a query nobody asked", "--json")
    data = json.loads(out)
    assert data["mode"] == "keyword" and "keyword results only" in err
    floor = load_settings(vault).search.context_min_score
    assert data["results"] and all(r["score"] < floor for r in data["results"])
    code, out, err = cli(*on, "context", "a query nobody asked")
    assert (code, out) == (0, "")
    code, out, _ = cli(*on, "context", "render engine")  # both words in one memory
    assert code == 0 and out.startswith("## Relevant Memories") and "DX12" in out
    top = json.loads(cli(*on, "search", "render engine", "--json")[1])["results"][0]
    assert top["path"] == "MEMORY.md" and top["score"] == 1.0


def test_searching_an_unindexed_vault_says_how_to_fix_it_and_creates_nothing(
    static_vault: Path,
) -> None:
    code, out, err = cli("--vault", str(static_vault), "search", "DX12")
    assert code == 1 and out == ""
    assert err.strip().endswith(
        "no index yet at "
        + str(static_vault.resolve() / ".memcore" / "index.db")
        + "; run `memcore index` or `memcore watch` first"
    )
    assert not (static_vault / ".memcore").exists()


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


# --- the rough edges a newcomer met (issue #10), one test per behaviour ---


def test_init_honours_vault_and_refuses_a_file(tmp_path: Path) -> None:
    target = tmp_path / "agent"
    code, out, err = cli("--vault", str(target), "init")
    assert code == 0, err
    assert out.strip().startswith(f"vault ready at {target.resolve()}")
    assert ".memcore/" in out and (target / ".memcore" / ".gitignore").is_file()
    (tmp_path / "notes.txt").write_text("x")
    code, _, err = cli("init", str(tmp_path / "notes.txt"))
    assert (
        code == 2
        and err.strip() == f"memcore: {tmp_path / 'notes.txt'} is a file; init needs a folder"
    )


def test_init_keeps_a_lowercase_memory_md(tmp_path: Path) -> None:
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / "memory.md").write_text("# mine\n")
    code, out, _ = cli("init", str(tmp_path / "v"))
    assert code == 0 and not (tmp_path / "v" / "MEMORY.md").exists()
    assert "MEMORY.md" not in out


def test_commands_find_the_vault_above_and_refuse_to_invent_one(
    static_vault: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert cli("--vault", str(static_vault), "index")[0] == 0
    monkeypatch.chdir(static_vault / "memory")
    code, out, err = cli("search", "DX12", "--json")
    assert code == 0, err
    assert json.loads(out)["results"][0]["path"] == "MEMORY.md"
    bare = tmp_path / "bare"
    bare.mkdir()
    monkeypatch.chdir(bare)
    code, _, err = cli("status")
    assert code == 2 and err.count("\n") == 1 and "no vault in" in err
    assert list(bare.iterdir()) == []


def test_search_with_a_missing_db_creates_nothing(static_vault: Path, tmp_path: Path) -> None:
    db = tmp_path / "nonexistent" / "dir" / "x.db"
    code, out, err = cli("--vault", str(static_vault), "search", "x", "--db", str(db))
    assert code == 1 and out == "" and "no index yet at" in err
    assert not (tmp_path / "nonexistent").exists()


def test_global_options_work_after_the_command_and_version_and_h(static_vault: Path) -> None:
    code, _, err = cli("index", "--vault", str(static_vault), "-v")
    assert code == 0, err
    code, out, err = cli("search", "DX12", f"--vault={static_vault}", "--json")
    assert code == 0, err and json.loads(out)["results"]
    code, out, _ = cli("--version")
    assert code == 0 and out.strip() == f"memcore {memcore.__version__}"
    code, out, _ = cli("search", "-h")
    assert code == 0 and "Search memory by meaning" in out
    # a vault folder named like a command is still the vault
    code, _, err = cli("--vault", "search", "status")
    assert code == 2 and "search does not exist" in err


def test_usage_errors_are_one_line_with_exit_code_2() -> None:
    for args, message in [
        (["search"], "memcore: Missing argument 'QUERY' (see `memcore search --help`)"),
        (["search", "x", "--bogus"], "memcore: No such option: --bogus"),
        (["frobnicate"], "memcore: No such command 'frobnicate'"),
    ]:
        code, out, err = cli(*args)
        assert code == 2 and out == "", args
        assert err.count("\n") == 1 and err.startswith(message), err


def test_openai_without_a_key_names_the_variable(static_vault: Path) -> None:
    code, _, err = cli("--vault", str(static_vault), "--embedder", "openai", "index")
    assert code == 2
    assert "needs an API key: set OPENAI_API_KEY" in err and err.count("\n") == 1


def test_restored_vectors_are_counted_as_reused(static_vault: Path) -> None:
    first = json.loads(cli("--vault", str(static_vault), "index", "--json")[1])
    assert first["chunks_embedded"] == 2
    other = json.loads(
        cli("--vault", str(static_vault), "--embedder", "local", "index", "--json")[1]
    )
    assert other["chunks_embedded"] == 2
    back = json.loads(cli("--vault", str(static_vault), "index", "--json")[1])
    assert back["chunks_embedded"] == 0 and back["chunks_reused"] == 2


def test_verbose_shows_memcores_steps_not_the_libraries(
    static_vault: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    cli("--vault", str(static_vault), "index")
    code = subprocess.run(
        [sys.executable, "-m", "memcore", "--vault", str(static_vault), "-v", "search", "DX12"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert code.returncode == 0, code.stderr
    lines = code.stderr.splitlines()
    assert any("memcore.search.searcher: search 'DX12'" in line for line in lines)
    assert not any("aiosqlite" in line or "asyncio" in line for line in lines)


def test_human_status_is_a_readable_table_listing_skipped_files(static_vault: Path) -> None:
    (static_vault / "memory" / "bad.md").write_bytes(b"\x00\x01binary")
    cli("--vault", str(static_vault), "index")
    code, out, _ = cli("--vault", str(static_vault), "status")
    assert code == 0
    assert "None" not in out and "{}" not in out and "db_bytes" not in out
    assert "2 files, 1 skipped" in out and "not running" in out
    assert "memory/bad.md: binary file" in out


def test_status_before_the_first_index_creates_nothing(static_vault: Path) -> None:
    code, out, _ = cli("--vault", str(static_vault), "status")
    assert code == 0 and "none yet" in out
    assert not (static_vault / ".memcore").exists()


def test_mode_stays_hybrid_when_filters_match_nothing(static_vault: Path) -> None:
    cli("--vault", str(static_vault), "index")
    code, out, _ = cli("--vault", str(static_vault), "search", "DX12", "--tag", "nope", "--json")
    data = json.loads(out)
    assert code == 0 and data["results"] == [] and data["mode"] == "hybrid"
    code, out, _ = cli(
        "--vault", str(static_vault), "search", "DX12", "--fusion", "vector", "--json"
    )
    assert json.loads(out)["mode"] == "vector"


def test_tag_and_path_filters_accept_what_people_type(static_vault: Path) -> None:
    cli("--vault", str(static_vault), "index")

    def paths(*flags: str) -> set[str]:
        out = cli("--vault", str(static_vault), "search", "build farm DX12", "--json", *flags)[1]
        return {r["path"] for r in json.loads(out)["results"]}

    assert paths("--tag", "Engine") == {"MEMORY.md"}
    assert paths("--path", "./memory/") == {"memory/2024-05-01.md"}
    assert paths("--path", str(static_vault / "memory")) == {"memory/2024-05-01.md"}
    assert paths("--path", str(static_vault.parent / "elsewhere")) == set()


def test_context_and_empty_or_wordless_queries(static_vault: Path) -> None:
    cli("--vault", str(static_vault), "index")
    code, out, err = cli("--vault", str(static_vault), "context", "DX12", "--tag", "nope")
    assert (
        code == 0 and out == "" and err.strip() == "memcore: no memories relevant enough to 'DX12'"
    )
    for query in ["", "   ", "?!", "..."]:
        code, out, err = cli("--vault", str(static_vault), "search", query)
        assert code == 2 and "needs at least one word" in err, query


def test_help_shows_plain_metavars_date_format_and_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one option per line
    out = cli("search", "--help")[1]
    assert "<bool>" not in out and "{query}" not in out and "QUERY" in out
    assert "YYYY-MM-DD" in out and "(default: search.limit = 5)" in out


def test_memory_commands_round_trip(static_vault: Path) -> None:
    v = ["--vault", str(static_vault)]
    code, out, err = cli(*v, "add", "Deploys happen on Tuesdays", "--user", "alice",
                         "--key", "deploys", "--meta", "prio=2", "--json")  # fmt: skip
    assert code == 0, err
    (added,) = json.loads(out)
    assert added["user_id"] == "alice" and added["metadata"] == {"prio": 2}
    assert "Deploys happen on Tuesdays" in (static_vault / added["path"]).read_text()
    code, out, _ = cli(*v, "search", "when do deploys happen", "--json")
    assert json.loads(out)["results"][0]["path"] == added["path"]
    assert cli(*v, "update", added["id"], "Deploys happen on Thursdays")[0] == 0
    code, out, _ = cli(*v, "get", added["id"], "--json")
    assert json.loads(out)[0]["memory"] == "Deploys happen on Thursdays"
    code, out, _ = cli(*v, "list", "--user", "alice")
    assert out.startswith(added["id"]) and "key=deploys" in out
    assert cli(*v, "count", "--user", "alice")[1].strip() == "1"
    code, out, _ = cli(*v, "history", added["id"])
    assert code == 0 and "ADD" in out and "UPDATE" in out and "by api" in out
    assert cli(*v, "forget", "deploys", "--key", "--user", "alice")[0] == 0
    code, _, err = cli(*v, "forget", "deploys", "--key", "--user", "alice")
    assert code == 1 and "no memory under key 'deploys'" in err
    assert cli(*v, "count", "--user", "alice")[1].strip() == "0"


def test_memory_command_errors_are_one_line(static_vault: Path) -> None:
    v = ["--vault", str(static_vault)]
    for args, code_wanted, message in [
        (["add", "  "], 2, "memory content is empty"),
        (["add", "x", "--user", "a\tb"], 2, "user_id 'a\\tb' holds a control character"),
        (["add", "x", "--category", "../etc"], 2, "is not a valid name"),
        (["add", "x", "--meta", "novalue"], 2, "--meta takes key=value"),
        (["get", "m-0123456789abcdef"], 1, "no memory with id"),
    ]:
        code, _, err = cli(*v, *args)
        assert code == code_wanted and err.count("\n") == 1 and message in err, (args, err)


def test_conversation_save_and_load(static_vault: Path, tmp_path: Path) -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    source = tmp_path / "m.json"
    source.write_text(json.dumps(messages))
    v = ["--vault", str(static_vault)]
    assert cli(*v, "conversation", "save", "s1", str(source))[1].strip() == "saved 2 turns of s1"
    assert json.loads(cli(*v, "conversation", "load", "s1")[1]) == messages
    assert json.loads(cli(*v, "conversation", "load", "s1", "-n", "1")[1]) == messages[1:]
    source.write_text("{not json")
    code, _, err = cli(*v, "conversation", "save", "s1", str(source))
    assert code == 2 and "not JSON" in err


def test_serve_refuses_to_bind_off_loopback_without_a_token(static_vault: Path) -> None:
    code, _, err = cli("--vault", str(static_vault), "serve", "--host", "0.0.0.0")
    assert code == 2 and "needs a token" in err and err.count("\n") == 1
    code, _, err = cli("--vault", str(static_vault), "serve", "--scoped-token", "t=user:x")
    assert code == 2 and "--scoped-token takes TOKEN=user_id:ID" in err
    code, _, err = cli("--vault", str(static_vault), "serve", "--scoped-token", "t=user_id:%09x")
    assert code == 2 and "user_id '\\tx' holds a control character" in err


def test_reads_never_create_an_index_and_a_first_write_indexes_the_whole_vault(
    vault: Path,
) -> None:
    write(vault, "MEMORY.md", "# Memory\n\nWe ship on Fridays.\n")
    write(vault, "memory/cats.md", "# Cats\n\nThe cat is called Miso.\n")
    v = ("--vault", str(vault), "--embedder", "static")
    reads = [["list"], ["count"], ["get", "m-0123456789abcdef"], ["history", "m-1"],
             ["search", "cat"], ["context", "cat"], ["conversation", "load", "s1"]]  # fmt: skip
    for read in reads:
        code, _, err = cli(*v, *read)
        assert code == 1 and "no index yet" in err and err.count("\n") == 1, (read, err)
        assert not (vault / ".memcore").exists(), read
    code, _, err = cli(*v, "add", "Alice likes tea", "--user", "alice")
    assert code == 0, err
    code, out, _ = cli(*v, "status", "--json")
    assert json.loads(out)["files"] == 3  # MEMORY.md, memory/cats.md and the new memory file
    code, out, _ = cli(*v, "search", "what is the cat called", "--json")
    assert json.loads(out)["results"][0]["path"] == "memory/cats.md"


def test_add_from_json_lines_names_and_skips_bad_lines_and_adds_the_rest(vault: Path) -> None:
    v = ("--vault", str(vault), "--embedder", "static")
    lines = [
        json.dumps({"memory": "Alice likes tea", "user_id": "alice", "metadata": {"src": "x"}}),
        "not json",
        json.dumps({"content": "Bob likes coffee", "user_id": "bob", "key": "drink"}),
        json.dumps({"memory": "no id", "user_id": "  "}),
        "",
        json.dumps({"text": "a shared fact", "id": "m-00000000000000aa"}),
        json.dumps({"memory": 5}),
        json.dumps({"memory": "x", "colour": "red"}),
    ]
    (vault / "batch.jsonl").write_text("\n".join(lines) + "\n")
    code, out, err = cli(*v, "add", "--file", str(vault / "batch.jsonl"), "--json")
    assert code == 0, err
    report = json.loads(out)
    assert [b["number"] for b in report["skipped"]] == [2, 4, 7, 8]
    assert [f"batch.jsonl:{n}: skipped:" in err for n in (2, 4, 7, 8)] == [True] * 4
    assert "user_id is empty" in err and "colour" in err
    code, out, _ = cli(*v, "list", "--json")
    got = {r["memory"]: r for r in json.loads(out)}
    assert set(got) == {"Alice likes tea", "Bob likes coffee", "a shared fact"}
    assert got["Alice likes tea"]["metadata"] == {"src": "x"}
    assert got["Bob likes coffee"]["key"] == "drink"
    assert got["a shared fact"]["id"] == "m-00000000000000aa"
    # the same file again: the line with an id is there already, the keyed one is an upsert,
    # and only the plain line adds a memory
    code, _, err = cli(*v, "add", "--file", str(vault / "batch.jsonl"))
    assert code == 0, err
    assert cli(*v, "count")[1].strip() == "4"
    code, _, err = cli(*v, "add", "text", "--file", "x.jsonl")
    assert code == 2 and "not both" in err


def test_a_batch_past_ann_min_vectors_leaves_its_vector_graph_saved_for_the_next_start(
    vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `memcore index` does: a one-shot search after the load opens the saved graph,
    instead of the exact matrix and a graph started again in every process."""
    monkeypatch.setenv("MEMCORE_STORAGE_ANN_MIN_VECTORS", "50")
    v = ("--vault", str(vault), "--embedder", "static")
    lines = [json.dumps({"memory": f"fact {n} about user {n % 7}", "user_id": f"u{n % 7}"})
             for n in range(120)]  # fmt: skip
    (vault / "batch.jsonl").write_text("\n".join(lines) + "\n")
    code, _, err = cli(*v, "add", "--file", str(vault / "batch.jsonl"))
    assert code == 0, err
    graphs = list((vault / ".memcore").glob("index.db.*.hnsw"))
    assert len(graphs) == 1 and graphs[0].stat().st_size > 0
    code, out, err = cli(*v, "search", "fact 33 about user 5", "--json")
    assert code == 0, err
    assert json.loads(out)["results"][0]["text"] == "fact 33 about user 5"


def test_a_batch_run_as_a_process_ends_as_a_fresh_one_that_builds_its_graph(
    vault: Path, tmp_path: Path
) -> None:
    """Run as its own process, a batch that leaves a vector graph owed becomes a fresh process
    image that builds it (so the build's memory never adds to the load's): the batch's output
    is whole, the graph saved when the command returns, and the exit code the batch's own."""
    env = {
        **os.environ,
        "MEMCORE_STORAGE_ANN_MIN_VECTORS": "50",
        "PYTHONPATH": str(Path(memcore.__file__).resolve().parent.parent),
    }
    command = [sys.executable, "-m", "memcore", "--vault", str(vault), "--embedder", "static"]

    def vectors() -> int:
        with sqlite3.connect(vault / ".memcore" / "index.db") as db:
            sql = "SELECT count(*) FROM memory_chunks WHERE embedding IS NOT NULL"
            return int(db.execute(sql).fetchone()[0])

    lines = [json.dumps({"memory": f"fact {n} about user {n % 7}", "user_id": f"u{n % 7}"})
             for n in range(120)]  # fmt: skip
    (vault / "batch.jsonl").write_text("\n".join(lines) + "\n")
    done = subprocess.run([*command, "-v", "add", "--file", str(vault / "batch.jsonl"), "--json"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"added": 120, "through_line": 120, "skipped": []}
    handed = done.stderr.index("building the vector graph in a fresh process")
    assert done.stderr.index(f"the vector graph of {vectors()} chunks is in place") > handed
    graphs = list((vault / ".memcore").glob("index.db.*.hnsw"))
    assert len(graphs) == 1 and graphs[0].stat().st_size > 0
    # an import that names a bad line ends with 1, as before, after its graph is brought
    # up to date; a graph saved and current is owed nothing
    rows = [json.dumps({"memory": f"imported {n}", "user_id": "u9"}) for n in range(1200)]
    (vault / "export.jsonl").write_text("\n".join([*rows, "not json"]) + "\n")
    done = subprocess.run([*command, "-v", "import", str(vault / "export.jsonl")],
                          capture_output=True, text=True, env=env, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 1 and "line 1201" in done.stderr, done.stderr
    assert "building the vector graph in a fresh process" in done.stderr
    graph = AnnIndex.load(graphs[0], 256, 0)
    assert graph is not None and len(graph) == vectors() > 1200
    done = subprocess.run([*command, "-v", "index"], capture_output=True, text=True, env=env,
                          cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0 and "fresh process" not in done.stderr, done.stderr


def test_an_import_past_ann_min_vectors_leaves_its_vector_graph_saved_too(
    vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MEMCORE_STORAGE_ANN_MIN_VECTORS", "50")
    v = ("--vault", str(vault), "--embedder", "static")
    rows = [json.dumps({"memory": f"imported fact {n}", "user_id": f"u{n % 7}"})
            for n in range(120)]  # fmt: skip
    (vault / "export.jsonl").write_text("\n".join(rows) + "\n")
    code, _, err = cli(*v, "import", str(vault / "export.jsonl"))
    assert code == 0, err
    assert cli(*v, "count")[1].strip() == "120"
    graphs = list((vault / ".memcore").glob("index.db.*.hnsw"))
    assert len(graphs) == 1 and graphs[0].stat().st_size > 0


def test_a_stopped_batch_says_what_went_in_and_resumes_from_the_line_it_names(
    vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from memcore.cli import add_file

    monkeypatch.setattr(add_file, "CHUNK_LINES", 2)
    v = ("--vault", str(vault), "--embedder", "static")
    users = ["ann", "ann", "blocked", "bob", "bob"]
    lines = [json.dumps({"memory": f"fact {n}", "user_id": u}) for n, u in enumerate(users, 1)]
    (vault / "batch.jsonl").write_bytes(("\n".join(lines) + "\n\xff\xfe\n").encode("latin-1"))
    write(vault, "memory/users/blocked/core.md", "# A note of mine, not a memory file\n")
    code, _, err = cli(*v, "add", "--file", str(vault / "batch.jsonl"))
    # parts of whole lists: ann's two lines, blocked's, bob's, then line 6: the first two in
    assert code == 1 and "not a memory file" in err
    assert "2 memories of lines 1-2 are in; resume with --from-line 3" in err
    assert cli(*v, "count")[1].strip() == "2"
    (vault / "memory/users/blocked/core.md").unlink()
    code, out, err = cli(*v, "add", "--file", str(vault / "batch.jsonl"), "--from-line", "3")
    assert code == 0, err
    assert "batch.jsonl:6: skipped: not UTF-8 text" in err
    assert out.strip().endswith(
        "added 3 memories from " + str(vault / "batch.jsonl") + ", skipped 1 lines"
    )
    assert cli(*v, "count")[1].strip() == "5"


def test_a_batch_writes_each_users_page_once_and_resumes_from_the_part_it_names(
    vault: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lines interleaved over users go in by user: a part holds whole users' lines, so each
    page is written once, not once a part; a stop names the part to resume at."""
    from memcore.cli import add_file
    from memcore.memory import file_writes

    monkeypatch.setattr(add_file, "CHUNK_LINES", 3)
    writes: list[str] = []
    real = file_writes.replace_if_unchanged

    def counted(path: Path, text: str, expected: bytes | None) -> bool:
        writes.append(path.relative_to(vault).as_posix())
        return real(path, text, expected)

    monkeypatch.setattr(file_writes, "replace_if_unchanged", counted)
    v = ("--vault", str(vault), "--embedder", "static")
    users = ["ann", "blocked", "bob", "ann", "bob", "ann", "bob"]
    rows = [json.dumps({"memory": f"fact {n} of {u}", "user_id": u})
            for n, u in enumerate(users, 1)]  # fmt: skip
    batch = vault / "batch.jsonl"
    batch.write_text("\n".join(rows) + "\n")
    write(vault, "memory/users/blocked/core.md", "# A note of mine, not a memory file\n")
    code, _, err = cli(*v, "add", "--file", str(batch))
    # the parts: ann's lines (1, 4, 6), blocked's (2), bob's (3, 5, 7); the second stops it,
    # so what went in is not the file's first lines
    assert code == 1 and "not a memory file" in err
    said = err.strip().splitlines()[-1]
    assert said.startswith("memcore: 3 memories of parts 1-1 of 3 are in"), err
    resume = said.rsplit(" ", 1)[1]
    assert resume.startswith("2:")
    assert writes == ["memory/users/ann/core.md"]  # three memories, one write
    # a resume against another file (or another --from-line) is refused, adding nothing
    code, _, err = cli(*v, "add", "--file", str(batch), "--from-line", "2", "--from-part", resume)
    assert code == 2 and "not the one that part was planned from" in err
    for bad in ("3", "x:abc", "0:" + resume[2:], "9:" + resume[2:]):
        code, _, err = cli(*v, "add", "--file", str(batch), "--from-part", bad)
        assert code == 2 and "--from-part" in err and len(err.strip().splitlines()) == 1, err
    assert cli(*v, "count")[1].strip() == "3"
    (vault / "memory/users/blocked/core.md").unlink()
    code, out, err = cli(*v, "add", "--file", str(batch), "--from-part", resume, "--json")
    assert code == 0, err
    assert json.loads(out) == {"added": 4, "through_line": 7, "skipped": []}
    assert cli(*v, "count")[1].strip() == "7"
    assert sorted(writes) == [f"memory/users/{u}/core.md" for u in ("ann", "blocked", "bob")]
    for user, numbers in (("ann", [1, 4, 6]), ("bob", [3, 5, 7])):
        code, out, _ = cli(*v, "list", "--user", user, "--json")
        assert [r["memory"] for r in json.loads(out)] == [
            f"fact {n} of {user}" for n in numbers
        ]  # a user's memories in the file's order


def test_one_shot_reads_with_no_daemon_first_catch_up_with_files_changed_since(
    vault: Path,
) -> None:
    v = ("--vault", str(vault), "--embedder", "static")
    write(vault, "MEMORY.md", "# Memory\n\nWe ship on Fridays.\n")
    assert cli(*v, "index")[0] == 0
    write(vault, "memory/zebra.md", "# Zebras\n\nThe zebra migration starts in July.\n")
    (vault / "MEMORY.md").unlink()
    code, out, err = cli(*v, "search", "zebra migration", "--json")
    assert code == 0, err
    assert [r["path"] for r in json.loads(out)["results"]] == ["memory/zebra.md"]
    code, out, _ = cli(*v, "add", "Alice likes tea", "--user", "alice")
    path = vault / "memory/users/alice/core.md"
    path.write_text(path.read_text().replace("likes tea", "likes green tea"))
    code, out, _ = cli(*v, "list", "--user", "alice")
    assert code == 0 and "likes green tea" in out


def test_the_command_table_names_each_commands_module() -> None:
    """main() imports only the module of the command it runs (memcore.cli.COMMANDS): every
    command is in the table, and importing its module alone defines it."""
    import subprocess
    import sys

    from memcore.cli import COMMANDS

    probe = (
        "import importlib, sys, typer\n"
        "from memcore.cli.app import app\n"
        "importlib.import_module('memcore.cli.' + sys.argv[1])\n"
        "print(' '.join(sorted(typer.main.get_command(app).commands)))\n"
    )
    defined: set[str] = set()
    for module in sorted(set(COMMANDS.values())):
        out = subprocess.run([sys.executable, "-c", probe, module], capture_output=True,
                             text=True, check=True).stdout.split()  # fmt: skip
        mine = {name for name, owner in COMMANDS.items() if owner == module}
        assert mine <= set(out), (module, mine - set(out))
        defined |= set(out)
    assert defined == set(COMMANDS)


def test_help_groups_the_commands_in_one_order_and_reads_as_paragraphs() -> None:
    import re

    from memcore.cli import GROUPS
    from memcore.cli.app import app

    _, bare, _ = cli()
    code, helped, _ = cli("--help")
    assert code == 0
    panels = re.findall(r"─ (Read|Write|Run|Admin) ─", helped)
    assert panels == ["Read", "Write", "Run", "Admin"]
    listed = re.findall(r"^│ ([a-z]+) {2,}", helped, re.M)
    assert listed == re.findall(r"^│ ([a-z]+) {2,}", bare, re.M)  # `memcore` says the same
    assert sorted(listed) == sorted(n for names in GROUPS.values() for n in names)
    for command in app.registered_commands:  # a docstring's line breaks are gone
        assert "\n" not in (command.help or "").replace("\n\n", ""), command.help
    _, serve_help, _ = cli("serve", "--help")
    assert all(word in " ".join(serve_help.split()) for word in ("web page", "Mem0", "MCP"))
    _, restore_help, _ = cli("restore", "--help")
    assert "forgotten" in restore_help


def test_an_index_in_memory_catches_up_for_a_read(static_vault: Path) -> None:
    """--db :memory: is a new index each time: a read catches it up, as the docs say,
    instead of refusing with 'no index yet', and leaves nothing behind."""
    (static_vault / "MEMORY.md").write_text("# Engine\n\nDiveAdstra renders with DX12.\n")
    code, out, err = cli("--vault", str(static_vault), "--db", ":memory:", "search", "DX12")
    assert code == 0 and "DiveAdstra" in out, err
    assert not (static_vault / ".memcore").exists()


def test_an_idempotency_key_reused_for_another_memory_is_refused(static_vault: Path) -> None:
    """`add --idempotency-key` again with other text: refused in one line, nothing added."""
    v = ("--vault", str(static_vault))
    code, first, err = cli(*v, "add", "--idempotency-key", "k-1", "Dana rides a bike")
    assert code == 0, err
    code, again, _ = cli(*v, "add", "--idempotency-key", "k-1", "Dana rides a bike")
    assert code == 0 and again == first  # a retry: the first call's memory
    code, _, err = cli(*v, "add", "--idempotency-key", "k-1", "Dana drives a car")
    assert code != 0 and "idempotency key was used with another request" in err
    assert len(err.strip().splitlines()) == 1, err
    assert "Dana drives a car" not in (static_vault / "memory" / "core.md").read_text()


# The `memcore` command as its own process (main() with no arguments), saying on stderr's last
# line whether it ended at once (leave_now's os._exit) rather than by tearing Python down.
AS_PROCESS = """
import os, sys, threading, time
exit_now = os._exit
def leave(code):
    sys.stderr.write("\\nLEFT AT ONCE")
    exit_now(code)
os._exit = leave
if os.environ.get("BUSY_THREAD"):  # a thread whose work must not be cut short: it starts
    def work():                      # only once the command is over (Python's exit begun)
        threading.main_thread().join()
        time.sleep(0.1)
        open(os.environ["BUSY_THREAD"], "w").write("done")
    threading.Thread(target=work).start()
from memcore.cli import main
sys.argv = ["memcore", *sys.argv[1:]]
main()
"""


def test_a_typer_command_run_as_a_process_ends_at_once_its_work_and_output_whole(
    static_vault: Path, tmp_path: Path
) -> None:
    """A command typer runs, as its own process, ends without tearing the interpreter down
    (~33 ms of an `add`): its output printed, its memory in the Markdown and the index, its
    exit code its own. A thread still at work is waited for, as an ordinary exit would."""
    env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": "static"}

    def memcore(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-c", AS_PROCESS, "--vault", str(static_vault), *args],
            capture_output=True, text=True, env={**env, **extra}, timeout=120, cwd=tmp_path,
        )  # fmt: skip

    done = memcore("add", "Bob deploys on Fridays", "--user", "bob")
    assert done.returncode == 0 and done.stderr.endswith("LEFT AT ONCE"), done.stderr
    assert "Bob deploys on Fridays" in done.stdout
    assert any("Bob deploys on Fridays" in p.read_text() for p in static_vault.rglob("*.md"))
    listed = memcore("list", "--user", "bob", "--json", "--limit", "5")
    assert listed.returncode == 0 and listed.stderr.endswith("LEFT AT ONCE"), listed.stderr
    assert [r["memory"] for r in json.loads(listed.stdout)] == ["Bob deploys on Fridays"]
    missing = memcore("get", "no-such-memory")
    assert missing.returncode == 1 and missing.stderr.endswith("LEFT AT ONCE")
    assert missing.stderr == "memcore: no memory with id 'no-such-memory'\n\nLEFT AT ONCE"
    wrong = memcore("add", "x", "--no-such-option")
    assert wrong.returncode == 2 and "--no-such-option" in wrong.stderr
    flag = tmp_path / "thread.txt"
    busy = memcore("count", "--user", "bob", BUSY_THREAD=str(flag))
    assert busy.returncode == 0 and busy.stdout.strip() == "1", busy.stderr
    assert flag.read_text() == "done" and "LEFT AT ONCE" not in busy.stderr


def test_a_batch_from_a_pipe_is_read_once_in_line_order(vault: Path) -> None:
    """A pipe (`--file <(...)`, a FIFO) cannot be planned and read again: it is added as it
    comes, from --from-line on; --from-part is refused for it in one line."""
    import os
    import threading

    v = ("--vault", str(vault), "--embedder", "static")
    fifo = vault.parent / "lines.fifo"
    rows = [json.dumps({"memory": f"piped fact {n}", "user_id": f"u{n % 2}"}) for n in range(5)]

    def feed() -> None:
        with fifo.open("w") as fh:  # blocks until the command opens it
            fh.write("\n".join(rows) + "\n")

    os.mkfifo(fifo)
    writer = threading.Thread(target=feed)
    writer.start()
    code, out, err = cli(*v, "add", "--file", str(fifo), "--from-line", "2", "--json")
    writer.join(timeout=10)
    assert code == 0, err
    assert json.loads(out) == {"added": 4, "through_line": 5, "skipped": []}
    code, out, _ = cli(*v, "list", "--user", "u0", "--json")
    assert [r["memory"] for r in json.loads(out)] == ["piped fact 2", "piped fact 4"]
    code, _, err = cli(*v, "add", "--file", str(fifo), "--from-part", "2:abc")
    assert code == 2 and "--from-part needs a regular file" in err
    assert len(err.strip().splitlines()) == 1


def test_status_prints_paths_with_brackets_as_they_are(static_vault: Path) -> None:
    """A file name is text, never markup: "[draft]" is not dropped, "[/y]" is no error, and
    an escape sequence in one is shown, not sent to the terminal."""
    (static_vault / "memory" / "[draft] plan.md").write_bytes(b"\x00\x01binary")
    (static_vault / "memory" / "x[").mkdir()
    (static_vault / "memory" / "x[" / "y].md").write_bytes(b"\x00\x02binary")
    (static_vault / "memory" / "bell\x07\x1b[2J.md").write_bytes(b"\x00\x03binary")
    cli("--vault", str(static_vault), "index")
    code, out, err = cli("--vault", str(static_vault), "status")
    assert code == 0, err
    assert "memory/[draft] plan.md: binary file" in out
    assert "memory/x[/y].md: binary file" in out
    assert "memory/bell\\x07\\x1b[2J.md: binary file" in out
    assert "\x1b" not in out and "\x07" not in out  # (not a terminal: no bold either)


def test_what_a_vault_holds_is_shown_with_its_escape_sequences_escaped(static_vault: Path) -> None:
    """A hand-written note (or a memory added with one) holding an escape sequence is shown by
    search and list with it as text, never sent to the terminal; --json keeps the text."""
    write(static_vault, "memory/odd.md", "# Odd\x1b[31m\n\nThe kiln code is \x1b[2Jteal.\n")
    code, _, err = cli("--vault", str(static_vault), "add", "kiln glaze \x07ready", "--user", "u")
    assert code == 0, err
    cli("--vault", str(static_vault), "index")
    code, out, err = cli("--vault", str(static_vault), "search", "kiln code")
    assert code == 0, err
    assert "The kiln code is \\x1b[2Jteal." in out and "Odd\\x1b[31m" in out
    code, listed, err = cli("--vault", str(static_vault), "list", "--user", "u")
    assert code == 0, err
    assert "kiln glaze \\x07ready" in listed
    assert not any(c in out + listed for c in "\x1b\x07")
    code, raw, _ = cli("--vault", str(static_vault), "search", "kiln code", "--json")
    assert any("\x1b[2Jteal" in hit["text"] for hit in json.loads(raw)["results"])  # as it is
