"""memcore export / import: every memory leaves as JSON Lines and comes back into a fresh
vault the same (ids, scopes, metadata, categories, keys, timestamps), an import run twice adds
nothing, bad lines are named and skipped, and Mem0's own export reads too."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from memcore.compose import open_service
from memcore.core.errors import InputError, StorageError
from memcore.core.settings import load_settings
from memcore.memory.transfer import new_memory
from memcore.vault.memory_format import Scope
from tests.test_cli import cli
from tests.test_http import server


def fields(row: dict[str, object]) -> tuple[object, ...]:
    return tuple(row[k] for k in ("id", "memory", "user_id", "agent_id", "run_id", "category",
                                  "key", "metadata", "created_at", "updated_at"))  # fmt: skip


async def test_export_then_import_into_a_fresh_vault_gives_the_same_memories(
    tmp_path: Path,
) -> None:
    source, target = tmp_path / "a", tmp_path / "b"
    for vault in (source, target):
        (vault / "memory").mkdir(parents=True)
        (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    async with open_service(load_settings(source)) as svc:
        m = svc.memories
        await m.add("Alice likes tea <!-- not a comment -->", user_id="alice",
                    metadata={"topic": "drinks", "n": 2})  # fmt: skip
        await m.add("Deploys on Thursday", agent_id="ops", run_id="s-1", category="plans",
                    key="deploy-day")  # fmt: skip
        (changed,) = await m.add("first text", user_id="bob")
        await m.update(changed.id, "second text")
        talk = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
        await svc.conversations.save("chat-1", talk)
    out = tmp_path / "memories.jsonl"
    code, _, err = await asyncio.to_thread(
        cli, "--vault", str(source), "export", str(out), "--history"
    )
    assert code == 0, err
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 5 and all(r["history"] for r in rows)
    assert [e["event"] for r in rows if r["id"] == changed.id for e in r["history"]] == [
        "ADD", "UPDATE"]  # fmt: skip

    code, said, err = await asyncio.to_thread(cli, "--vault", str(target), "import", str(out))
    assert code == 0, err
    assert said.strip() == "imported 5, 0 already there"
    code, again, _ = await asyncio.to_thread(cli, "--vault", str(target), "import", str(out))
    assert again.strip() == "imported 0, 5 already there"
    code, back, err = await asyncio.to_thread(cli, "--vault", str(target), "export")
    assert code == 0, err
    imported = [json.loads(line) for line in back.splitlines()]
    assert sorted(map(fields, imported), key=str) == sorted(map(fields, rows), key=str)
    async with open_service(load_settings(target)) as svc:
        loaded = await svc.conversations.load("chat-1")
        assert [m["content"] for m in loaded] == ["hi", "hello"]
        found = await svc.memories.search("tea", user_id="alice")
        assert found[0].metadata == {"topic": "drinks", "n": 2}
        assert svc.memories.writer.file_for(Scope(user_id="alice"), "core") == (found[0].path)


async def test_import_reads_mem0_exports_and_names_bad_lines(tmp_path: Path) -> None:
    vault = tmp_path / "v"
    (vault / "memory").mkdir(parents=True)
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    mem0 = {"count": 2, "next": None, "results": [
        {"id": "6f1c0a52-8f0b-4b7e-9d1a-111111111111", "memory": "Gina likes jazz",
         "user_id": "gina", "metadata": {"src": "mem0"}, "categories": ["music"],
         "created_at": "2025-03-01T10:00:00-08:00", "updated_at": "2025-03-02T10:00:00Z"},
        {"id": "bad id with spaces", "memory": "x", "user_id": "gina"},
    ]}  # fmt: skip
    export = tmp_path / "mem0.json"
    export.write_text(json.dumps(mem0))
    code, said, err = await asyncio.to_thread(cli, "--vault", str(vault), "import", str(export))
    assert code == 1 and said.strip() == "imported 1, 0 already there, 1 skipped"
    assert err.strip() == (
        "memcore: line 2: id must be 1-128 letters, digits and - _ . : @ + = ~, not starting "
        "with '.' (got 'bad id with spaces')"
    )
    lines = tmp_path / "mixed.jsonl"
    lines.write_text('{"memory": "Hal runs", "user_id": "hal"}\nnot json\n{"memory": ""}\n'
                     '{"memory": "ok", "user_id": " "}\n')  # fmt: skip
    code, said, err = await asyncio.to_thread(cli, "--vault", str(vault), "import", str(lines))
    assert code == 1 and said.strip() == "imported 1, 0 already there, 3 skipped"
    assert [e.split(":")[1].strip() for e in err.strip().splitlines()] == [
        "line 2", "line 3", "line 4"]  # fmt: skip
    async with open_service(load_settings(vault)) as svc:
        (jazz,) = await svc.memories.get_all(user_id="gina", category="music")
        assert jazz.id == "6f1c0a52-8f0b-4b7e-9d1a-111111111111"
        assert jazz.created == "2025-03-01T10:00:00.000-08:00"
        assert [r.text for r in await svc.memories.get_all(user_id="hal")] == ["Hal runs"]


async def test_import_straight_from_a_mem0_server_through_the_official_client(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Mem0 server here is another memcore serve: what it holds arrives with its ids."""
    monkeypatch.setenv("MEM0_TELEMETRY", "false")
    monkeypatch.setenv("REMOTE_KEY", "r-key")
    source, target = tmp_path / "remote", tmp_path / "local"
    for vault in (source, target):
        (vault / "memory").mkdir(parents=True)
        (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    async with open_service(load_settings(source)) as svc:
        added = [
            *(await svc.memories.add("Ivy paints", user_id="ivy", metadata={"medium": "oil"})),
            *(await svc.memories.add("The bot retries twice", agent_id="bot")),
            *(await svc.memories.add("Sprint goal: ship", run_id="s-9", category="plans")),
        ]
        async with server(svc, token="r-key") as url:
            code, said, err = await asyncio.to_thread(
                cli, "--vault", str(target), "import", url, "--from-mem0",
                "--api-key-env", "REMOTE_KEY",
            )  # fmt: skip
    assert code == 0, err
    assert said.strip() == "imported 3, 0 already there"
    async with open_service(load_settings(target)) as svc:
        got = {r.id: r for r in await svc.memories.get_all(user_id=None)}
        got |= {r.id: r for r in await svc.memories.get_all(agent_id="bot")}
        got |= {r.id: r for r in await svc.memories.get_all(run_id="s-9", category="plans")}
    assert {r.id: (r.text, r.user_id, r.agent_id, r.run_id, r.category, dict(r.metadata),
                   r.created) for r in added} == {
        i: (r.text, r.user_id, r.agent_id, r.run_id, r.category, dict(r.metadata), r.created)
        for i, r in got.items()}  # fmt: skip
    code, _, err = await asyncio.to_thread(
        cli, "--vault", str(target), "import", "http://127.0.0.1:9", "--from-mem0",
        "--api-key-env", "NO_SUCH_VARIABLE",
    )  # fmt: skip
    assert code == 2 and "needs the server's API key in $NO_SUCH_VARIABLE" in err


@pytest.mark.parametrize(
    "memory_id", ["../../etc/passwd", "a/b", ".hidden", "x --> y", "has space", "a\\b"]
)
def test_an_imported_id_that_is_a_path_or_breaks_its_comment_is_refused(memory_id: str) -> None:
    with pytest.raises(InputError, match="id must be"):
        new_memory({"memory": "text", "id": memory_id})


@pytest.mark.parametrize("memory_id", ["m-1a2b", "4f5d2c1e-8d7b-4a3c-9f1e-2b3c4d5e6f70", "mem0:42"])
def test_ids_real_exports_carry_are_taken(memory_id: str) -> None:
    assert new_memory({"memory": "text", "id": memory_id}).id == memory_id


async def test_an_import_goes_in_by_list_each_page_written_once_and_runs_again_after_a_stop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An export interleaved over users is imported a part of whole lists at a time: each
    user's page written once. A part that fails stops the import with what went in, and the
    same import run again adds the rest. Stdin in JSON Lines arrives the same."""
    from memcore.cli import import_file
    from memcore.memory import file_writes

    monkeypatch.setattr(import_file, "CHUNK_LINES", 3)
    vault, piped = tmp_path / "v", tmp_path / "piped"
    for v in (vault, piped):
        (v / "memory").mkdir(parents=True)
        (v / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    writes: list[str] = []
    real = file_writes.replace_if_unchanged

    def counted(path: Path, text: str, expected: bytes | None) -> bool:
        writes.append(path.relative_to(path.parents[3]).as_posix())
        return real(path, text, expected)

    monkeypatch.setattr(file_writes, "replace_if_unchanged", counted)
    users = ["ann", "blocked", "bob", "ann", "bob", "ann", "bob"]
    rows = [json.dumps({"id": f"m{n}", "memory": f"fact {n} of {u}", "user_id": u})
            for n, u in enumerate(users, 1)]  # fmt: skip
    export = tmp_path / "export.jsonl"
    export.write_text("\n".join([*rows[:4], "", "not json", *rows[4:]]) + "\n")
    blocker = vault / "memory/users/blocked/core.md"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("# A note of mine, not a memory file\n")

    code, said, err = await asyncio.to_thread(cli, "--vault", str(vault), "import", str(export))
    assert code == 1 and "not a memory file" in err, err
    assert err.strip().splitlines()[-1] == (
        "memcore: 3 memories went in before the failure; the same import run again adds the "
        "rest (ids already there are skipped)"
    )
    assert writes == ["memory/users/ann/core.md"]  # ann's three memories, one write
    blocker.unlink()
    writes.clear()
    code, said, err = await asyncio.to_thread(cli, "--vault", str(vault), "import", str(export))
    assert code == 1 and said.strip() == "imported 4, 3 already there, 1 skipped"
    assert err.strip() == "memcore: line 6: not JSON (Expecting value: line 1 column 1 (char 0))"
    assert sorted(writes) == ["memory/users/blocked/core.md", "memory/users/bob/core.md"]

    writes.clear()  # stdin: grouped by list a chunk of lines at a time, as it comes
    monkeypatch.setattr(import_file, "CHUNK_LINES", 100)
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(export.read_bytes())))
    code, said, err = await asyncio.to_thread(cli, "--vault", str(piped), "import", "-")
    assert code == 1 and said.strip() == "imported 7, 0 already there, 1 skipped", err
    assert sorted(writes) == [
        "memory/users/ann/core.md",
        "memory/users/blocked/core.md",
        "memory/users/bob/core.md",
    ]
    for v in (vault, piped):
        async with open_service(load_settings(v)) as svc:
            for user in ("ann", "bob", "blocked"):
                got = [r.text for r in await svc.memories.get_all(user_id=user)]
                assert got == [f"fact {n} of {u}" for n, u in enumerate(users, 1) if u == user]


async def test_an_export_is_one_snapshot_read_page_after_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Writes while an export runs neither show in it nor shift its pages (each page starts
    where the last ended); an export that fails leaves the file it was to replace as it was."""
    from memcore.memory import transfer

    monkeypatch.setattr(transfer, "PAGE", 2)
    vault = tmp_path / "v"
    (vault / "memory").mkdir(parents=True)
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    async with open_service(load_settings(vault)) as svc:
        m = svc.memories
        for n in range(5):
            await m.add(f"fact {n}", user_id=f"u{n % 2}")
        before = [r.id for r in await m.get_all(user_id=None, limit=100)]
        rows = transfer.export_rows(m.writer)
        first = await anext(rows)
        await m.delete(before[1])  # on the first page, read already
        await m.delete(before[3])  # on the second, not read yet
        await m.add("fact 5", user_id="u0")
        rest = [row async for row in rows]
        assert [first["id"], *(r["id"] for r in rest)] == before
        assert len(await m.get_all(user_id=None, limit=100)) == 4

    out = tmp_path / "memories.jsonl"
    out.write_text("an earlier export\n")

    async def broken(writer: object, history: bool = False) -> AsyncIterator[dict[str, object]]:
        yield {"id": "x"}
        raise StorageError("the disk went away")

    monkeypatch.setattr(transfer, "export_rows", broken)
    code, _, err = await asyncio.to_thread(cli, "--vault", str(vault), "export", str(out))
    assert code != 0 and "the disk went away" in err
    assert out.read_text() == "an earlier export\n"
    left = await asyncio.to_thread(lambda: sorted(p.name for p in tmp_path.iterdir()))
    assert left == ["memories.jsonl", "v"]


def test_an_export_read_only_in_part_ends_quietly(tmp_path: Path) -> None:
    """`memcore export | head -1`: the reader goes away after a line; the export ends as a
    tool ended by SIGPIPE does (status 141), with nothing on stderr."""
    import subprocess
    import sys

    vault = tmp_path / "v"
    (vault / "memory").mkdir(parents=True)
    (vault / "memcore.toml").write_text('[embedder]\nprovider = "static"\n')
    rows = tmp_path / "rows.jsonl"
    rows.write_text(
        "".join(
            json.dumps({"memory": f"fact {n} " + "x" * 200, "user_id": f"u{n % 7}"}) + "\n"
            for n in range(3000)
        )
    )  # fmt: skip  (well past a pipe's buffer)
    memcore = [sys.executable, "-m", "memcore", "--vault", str(vault)]
    subprocess.run([*memcore, "import", str(rows)], check=True, capture_output=True)
    with subprocess.Popen(
        [*memcore, "export"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as proc:
        assert proc.stdout is not None and proc.stderr is not None
        first = json.loads(proc.stdout.readline())
        proc.stdout.close()
        err = proc.stderr.read()
        assert proc.wait(timeout=60) == 141
    assert first["memory"].startswith("fact ") and err == b""
