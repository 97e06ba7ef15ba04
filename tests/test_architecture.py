"""The package tree is the architecture: imports point down the layers, never in a circle, and
each third-party library stays in its one module. Every import counts, including those inside
functions and under ``TYPE_CHECKING``."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "memcore"

# Each top-level entry of memcore/ and its layer; a module may import its own package and
# anything in a lower layer, nothing beside it or above it. (docs/architecture.md)
LAYERS = {
    "core": 0,  # value types, errors, settings, text and vector math
    "vault": 1,  # the Markdown files
    "storage": 1,  # the index's ports and adapters
    "embedders": 1,
    "llm": 1,
    "index": 2,  # vault -> index
    "search": 3,
    "memory": 4,  # the Mem0-style operations
    "service": 5,  # MemoryService
    "compose": 6,  # the composition root: picks the adapters
    "fronts": 7,  # HTTP, Mem0 REST, MCP, the daemon, the remote client
    "cli": 8,
    "__init__": 9,  # the public Python API
    "__main__": 9,
}

# library -> modules allowed to import it
CONFINED = {
    "aiosqlite": {"storage/sqlite/"},
    "watchdog": {"index/watcher.py"},
    "ollama": {"embedders/ollama.py", "llm/ollama.py"},
    "openai": {"embedders/openai.py", "llm/openai.py"},
    "httpx": {"embedders/ollama.py", "fronts/http/", "fronts/remote.py"},
    "typer": {"cli/"},
    "starlette": {"fronts/http/"},
    "uvicorn": {"fronts/serve.py", "fronts/listener.py"},
    "h11": {"fronts/listener.py"},
    "prometheus_client": {"core/metrics.py"},
    "mcp": {"fronts/mcp.py"},
    "rich": {"cli/"},
    "markdown_it": {"vault/chunker.py", "vault/render.py"},
    # storage/ann.py only imports it before usearch, which otherwise makes its import segfault
    "onnxruntime": {"embedders/local.py", "storage/ann.py"},
    "tokenizers": {"embedders/local.py"},
    "jieba": {"core/segmenter.py"},
    "yaml": {"vault/chunker.py"},
    "fsrs": {"search/strength.py"},
    "usearch": {"storage/ann.py"},
    "psycopg": {"storage/postgres/"},
    "pydantic": {"fronts/http/", "fronts/mcp.py"},
    "mem0": {"memory/mem0_remote.py"},
    "jinja2": {"fronts/http/web.py"},
    "markupsafe": {"fronts/http/web.py"},  # the official client, optional
}
# pure transforms: no I/O layer, no event loop
PURE = {
    "vault/chunker.py",
    "vault/memory_format.py",
    "vault/render.py",
    "index/planner.py",
    "index/debounce.py",
    "search/context.py",
    "search/fusion.py",
    "search/strength.py",
    "core/vectors.py",
    "core/tokenize.py",
    "core/models.py",
    "core/errors.py",
}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path) -> set[str]:
    """Every module ``path`` imports, absolute; ``from memcore.x import y`` counts as
    memcore.x.y when y is a module (a submodule import), else as memcore.x."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: relative import"
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                names.add(sub if is_module(sub) else node.module)
    return names


def is_module(dotted: str) -> bool:
    if not dotted.startswith("memcore."):
        return False
    base = PKG.parent / dotted.replace(".", "/")
    return base.with_suffix(".py").is_file() or (base / "__init__.py").is_file()


def modules() -> dict[str, tuple[str, set[str]]]:
    """module name -> (path relative to memcore/, imports)"""
    return {
        module_name(p): (p.relative_to(PKG).as_posix(), imports_of(p)) for p in PKG.rglob("*.py")
    }


def top_of(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_top_level_entry_has_a_layer() -> None:
    entries = {p.stem for p in PKG.iterdir() if p.suffix == ".py" or (p / "__init__.py").exists()}
    assert entries == set(LAYERS), entries ^ set(LAYERS)


def test_imports_point_down_the_layers() -> None:
    wrong = []
    for name, (rel, imported) in modules().items():
        mine = top_of(name)
        for other in imported:
            if not (other == "memcore" or other.startswith("memcore.")) or top_of(other) == mine:
                continue
            if LAYERS[top_of(other)] >= LAYERS[mine]:
                wrong.append(f"{rel} ({mine}) imports {other} ({top_of(other)})")
    assert not wrong, "\n".join(wrong)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), or self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1 or v in graph.get(v, ()):
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_back_through_others() -> None:
    mods = modules()
    graph = {
        name: {
            i for i in imported if i in mods and i != name and not name.startswith(i + ".")
        }  # a module importing its own package's __init__ is Python's way, not a circle
        for name, (_, imported) in mods.items()
    }
    assert not cycles(graph), cycles(graph)


def test_the_cycle_finder_finds_a_circle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_third_party_libraries_are_confined() -> None:
    for rel, names in modules().values():
        for lib, allowed in CONFINED.items():
            if any(n == lib or n.startswith(lib + ".") for n in names):
                assert any(rel == a or (a.endswith("/") and rel.startswith(a)) for a in allowed), (
                    f"{rel} imports {lib}"
                )


def test_pure_core_does_no_io_imports() -> None:
    forbidden = ("memcore.storage", "memcore.embedders", "memcore.service", "aiosqlite", "asyncio")
    for rel, names in modules().values():
        if rel in PURE:
            bad = [n for n in names if n.startswith(forbidden)]
            assert not bad, f"{rel} imports {bad}"


def test_every_module_opens_with_a_docstring() -> None:
    for path in PKG.rglob("*.py"):
        assert ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))), path
