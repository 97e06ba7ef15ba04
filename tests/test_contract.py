"""The HTTP contract: the OpenAPI document types every body and answer, and schemathesis,
fuzzing a live `memcore serve` from that document, finds no server error and no answer that
breaks its declared type."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import REPO
from tests.support import free_port, wait_ready

SCHEMATHESIS = shutil.which("schemathesis", path=str(Path(sys.executable).parent))


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """`memcore serve` on a copy of sample_vault, caught up; (its URL, its log file)."""
    vault = tmp_path_factory.mktemp("contract") / "vault"
    shutil.copytree(REPO / "sample_vault", vault, ignore=shutil.ignore_patterns(".memcore"))
    port = free_port()
    log = vault.parent / "serve.log"
    env = {**os.environ, "MEMCORE_EMBEDDER_PROVIDER": "static"}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "memcore", "--vault", str(vault), "serve", "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        assert wait_ready(url), f"serve never got ready: {log.read_text()}"
        yield url, log
    finally:
        proc.terminate()
        proc.wait(20)


def test_openapi_types_every_body_answer_and_error(live: tuple[str, Path]) -> None:
    url, _ = live
    doc = httpx.get(f"{url}/openapi.json").json()
    assert doc["openapi"] == "3.1.0"
    schemas = doc["components"]["schemas"]

    def resolved(schema: dict[str, Any]) -> dict[str, Any]:
        ref = schema.get("$ref", "")
        return schemas[ref.rsplit("/", 1)[-1]] if ref else schema

    bodies = 0
    for path, ops in doc["paths"].items():
        for method, op in ops.items():
            answer = op["responses"]["200"]["content"]["application/json"]["schema"]
            assert resolved(answer).get("properties") or resolved(answer).get("items"), (
                path,
                method,
            )
            error = resolved(op["responses"]["4XX"]["content"]["application/json"]["schema"])
            assert set(error["properties"]) == {"error"}
            if method in ("post", "put") and "requestBody" in op:
                body = resolved(op["requestBody"]["content"]["application/json"]["schema"])
                assert body["properties"] and body["additionalProperties"] is False, (path, method)
                bodies += 1
    assert bodies == 22  # every route that takes a body (reinforce and restore take none)
    search = schemas["SearchBody"]["properties"]
    assert search["limit"]["anyOf"][0] == {"maximum": 1000, "minimum": 1, "type": "integer"}


@pytest.mark.skipif(
    SCHEMATHESIS is None, reason="schemathesis is not installed (pip install -e '.[dev]')"
)
@pytest.mark.timeout(600)  # the fuzzer's own run, every route of the document (~1-3 min)
def test_schemathesis_finds_no_server_error_and_no_answer_off_its_type(
    live: tuple[str, Path], tmp_path: Path
) -> None:
    url, log = live
    checks = ",".join(["not_a_server_error", "status_code_conformance",
                       "content_type_conformance", "response_schema_conformance"])  # fmt: skip
    run = subprocess.run(
        [str(SCHEMATHESIS), "run", f"{url}/openapi.json", "--checks", checks,
         "--phases", "coverage,fuzzing,stateful", "--max-examples", "40", "--workers", "2",
         "--seed", "26", "--no-color"],
        capture_output=True, text=True, timeout=600, cwd=tmp_path,
        env={**os.environ, "SCHEMATHESIS_HOOKS": ""},
    )  # fmt: skip
    summary = run.stdout[-3000:]
    assert run.returncode == 0, summary
    assert "passed" in summary and "failed" not in summary.lower().split("summary")[-1], summary
    served = log.read_text(errors="replace")
    assert "Traceback" not in served and "Exception in ASGI" not in served, served[-3000:]
