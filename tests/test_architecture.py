"""Imports point one way, and each third-party library stays in its one module."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "memcore"

# library -> modules allowed to import it
CONFINED = {
    "aiosqlite": {"storage/sqlite.py", "storage/sqlite_queries.py"},
    "watchdog": {"watcher.py"},
    "ollama": {"embedders/ollama.py", "llm/ollama.py"},
    "openai": {"embedders/openai.py", "llm/openai.py"},
    "httpx": {"embedders/ollama.py", "api.py", "remote.py"},
    "typer": {"cli/"},
    "starlette": {"api.py", "mem0_api.py", "strength_api.py"},
    "uvicorn": {"server.py"},
    "mcp": {"mcp_server.py"},
    "rich": {"cli/"},
    "markdown_it": {"chunker.py"},
    # search/ann.py only imports it before usearch, which otherwise makes its import segfault
    "onnxruntime": {"embedders/local.py", "search/ann.py"},
    "tokenizers": {"embedders/local.py"},
    "jieba": {"search/tokenize.py"},
    "yaml": {"chunker.py"},
    "fsrs": {"strength.py"},
    "usearch": {"search/ann.py"},
    "psycopg": {"storage/postgres.py", "storage/postgres_queries.py"},
}
# the pure core never imports I/O layers
PURE = {
    "chunker.py",
    "memories.py",
    "planner.py",
    "prompt.py",
    "debounce.py",
    "search/vectors.py",
    "search/fusion.py",
    "search/tokenize.py",
    "models.py",
    "errors.py",
    "strength.py",
}
LAYERS_ABOVE_SERVICE = (
    "memcore.cli",
    "memcore.app",
    "memcore.daemon",
    "memcore.api",
    "memcore.mem0_api",
    "memcore.strength_api",
    "memcore.server",
    "memcore.mcp_server",
)


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def modules() -> list[tuple[str, set[str]]]:
    return [(p.relative_to(PKG).as_posix(), imports_of(p)) for p in PKG.rglob("*.py")]


def test_third_party_libraries_are_confined() -> None:
    for rel, names in modules():
        for lib, allowed in CONFINED.items():
            if any(n == lib or n.startswith(lib + ".") for n in names):
                assert any(rel == a or (a.endswith("/") and rel.startswith(a)) for a in allowed), (
                    f"{rel} imports {lib}"
                )


def test_pure_core_does_no_io_imports() -> None:
    forbidden = (
        "memcore.storage",
        "memcore.embedders",
        "memcore.service",
        "memcore.app",
        "aiosqlite",
        "asyncio",
    )
    for rel, names in modules():
        if rel in PURE:
            bad = [n for n in names if n.startswith(forbidden)]
            assert not bad, f"{rel} imports {bad}"


def test_service_and_adapters_never_import_front_ends() -> None:
    for rel, names in modules():
        if rel.startswith(
            (
                "cli/",
                "app.py",
                "daemon.py",
                "api.py",
                "mem0_api.py",
                "strength_api.py",
                "server.py",
                "mcp_server.py",
                "__init__.py",
                "__main__.py",
            )
        ):
            continue
        bad = [n for n in names if n.startswith(LAYERS_ABOVE_SERVICE)]
        assert not bad, f"{rel} imports {bad}"


def test_errors_module_imports_nothing_from_memcore() -> None:
    assert not [n for n in imports_of(PKG / "errors.py") if n.startswith("memcore")]


def test_every_module_opens_with_a_docstring() -> None:
    for path in PKG.rglob("*.py"):
        assert ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))), path
