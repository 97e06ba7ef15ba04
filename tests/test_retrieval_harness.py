"""bench/retrieval.py runs on any folder in the eval layout and reports the named metrics."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.support import WireServer, write

KEYS = {
    "hit@1", "hit@5", "recall@5", "recall@10", "mrr@10", "ndcg@10", "evidence_recall@5",
    "evidence_recall@10", "evidence_recall@1000tok", "evidence_recall@2000tok", "queries",
    "index_s", "query_ms_p50", "query_ms_p95",
}  # fmt: skip


def make_set(root: Path) -> Path:
    conv = root / "tiny" / "vault" / "c1" / "memory"
    write(
        conv,
        "session_1.md",
        "# Session 1\n\n[D1:1] **Ann:** I adopted a beagle named Max.\n\n[D1:2] **Bob:** Cute!\n",
    )
    write(
        conv,
        "session_2.md",
        "# Session 2\n\n[D2:1] **Ann:** We moved to Lisbon in May.\n\n[D2:2] **Bob:** Nice city.\n",
    )
    queries = [
        {
            "id": "q1",
            "vault_dir": "c1",
            "question": "What dog did Ann adopt?",
            "evidence": ["D1:1"],
            "gold_files": ["memory/session_1.md"],
        },
        {
            "id": "q2",
            "vault_dir": "c1",
            "question": "Which city did Ann move to?",
            "evidence": ["D2:1"],
            "gold_files": ["memory/session_2.md"],
        },
    ]
    (root / "tiny" / "queries.jsonl").write_text("\n".join(json.dumps(q) for q in queries) + "\n")
    return root / "tiny"


def run_harness(tmp_path: Path, *extra: str) -> list[dict[str, object]]:
    """Run bench/retrieval.py on the tiny set with the static model; one dict per JSON line."""
    set_dir = make_set(tmp_path) if not (tmp_path / "tiny").exists() else tmp_path / "tiny"
    env = {
        "BENCH_EVAL_CACHE": str(tmp_path / "cache"),
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
    }
    cmd = [
        sys.executable,
        str(REPO / "bench" / "retrieval.py"),
        "--set",
        str(set_dir),
        "--json",
        "--embedder",
        "static",
        *extra,
    ]
    out = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, env=env, check=True
    ).stdout
    return [json.loads(line) for line in out.strip().splitlines()]


def test_harness_json_has_the_named_metrics(tmp_path: Path) -> None:
    (row,) = run_harness(tmp_path, "--fusion", "keyword")
    assert set(row) >= KEYS
    assert row["queries"] == 2
    assert row["hit@1"] == 1.0 and row["evidence_recall@10"] == 1.0
    (again,) = run_harness(tmp_path, "--fusion", "keyword")  # a rerun reuses the cached index
    assert row["files_indexed"] > 0  # type: ignore[operator]
    assert again["hit@1"] == 1.0 and again["files_indexed"] == 0


def test_harness_compares_every_fusion_in_one_run(tmp_path: Path) -> None:
    rows = run_harness(tmp_path, "--fusion", "all")
    assert [r["fusion"] for r in rows] == [
        "adaptive",
        "weighted",
        "rrf",
        "linear",
        "vector",
        "keyword",
    ]


def test_harness_measures_a_server_embedder_given_by_settings(tmp_path: Path) -> None:
    run_harness(tmp_path, "--fusion", "vector")  # the static model's index, cached first
    with WireServer() as srv:
        rows = run_harness(
            tmp_path,
            "--embedder",
            "ollama",
            "-o",
            f"ollama.host={srv.url}",
            "-o",
            "ollama.model=nomic-embed-text",
            "--fusion",
            "vector",
        )
        inputs = [t for r in srv.behaviour.requests for t in r["body"]["input"]]
    assert rows[0]["embedder"] == "ollama" and rows[0]["queries"] == 2
    assert "search_query: What dog did Ann adopt?" in inputs
    assert any(t.startswith("search_document: ") and "beagle" in t for t in inputs)
    # the other model's cached index is not reused: each has its own
    assert len(list((tmp_path / "cache").glob("*.db"))) == 2


def test_harness_rejects_an_option_without_a_value(tmp_path: Path) -> None:
    with pytest.raises(subprocess.CalledProcessError) as info:
        run_harness(tmp_path, "-o", "ollama.model")
    assert "-o takes section.key=value" in info.value.stderr
