"""One rule for lines (core/lines.py): texts holding U+2028, U+2029, U+0085 and the other
characters ``str.splitlines`` breaks at round-trip through add, the history, export, import,
batch lines, a retried keyed add and a full reindex, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
import uuid
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memcore.core.lines import split_lines
from memcore.core.settings import Settings, load_settings
from memcore.memory.batch import parse_lines
from memcore.memory.transfer import export_rows, import_rows, in_parts, read_rows
from tests.conftest import make_service
from tests.support import FakeEmbedder

BREAKERS = "\u2028\u2029\u0085\x0b\x0c\x1c\x1d\x1e"
# any Unicode text memcore stores (no NUL, no lone surrogate), rich in what splitlines breaks at
TEXT = st.text(
    alphabet=st.one_of(
        st.sampled_from(BREAKERS + "\r\n\t "),
        st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"),
    ),
    min_size=1,
    max_size=40,
).filter(lambda t: bool(t.strip()))


@given(st.lists(st.text(st.characters(blacklist_characters="\n\r")), min_size=1, max_size=6))
def test_split_lines_breaks_at_newlines_only(parts: list[str]) -> None:
    assert split_lines("\n".join(parts) + "\n") == parts
    assert split_lines("\r\n".join(parts) + "\r\n") == parts


def test_a_splitlines_breaker_stays_inside_its_line() -> None:
    assert split_lines(f"a{BREAKERS}b\r\nc") == [f"a{BREAKERS}b", "c"]


@pytest.fixture(params=["sqlite", "postgres"])
def backends(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Settings, Settings]:
    out = []
    for name in ("source", "target"):
        vault = tmp_path / name
        (vault / "memory").mkdir(parents=True)
        if request.param == "postgres":
            url = request.getfixturevalue("postgres_url")
            ns = f"{request.getfixturevalue('namespace')}-{name}"
            out.append(load_settings(vault, {"storage.url": url, "storage.namespace": ns}))
        else:
            out.append(load_settings(vault))
    return out[0], out[1]


@settings(
    max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@example(texts=["line\u2028sep", "para\u2029sep", "next\u0085line", "form\x0cfeed"])
@given(texts=st.lists(TEXT, min_size=1, max_size=4, unique=True))
def test_any_text_round_trips_through_every_line_format(
    backends: tuple[Settings, Settings], texts: list[str]
) -> None:
    asyncio.run(_round_trip(*backends, texts))


async def _round_trip(source: Settings, target: Settings, texts: list[str]) -> None:
    run = uuid.uuid4().hex  # each example's keys its own: the vault outlives one example
    async with make_service(source, FakeEmbedder()) as svc:
        await svc.memories.delete_all(all=True)
        for n, text in enumerate(texts):
            for _ in range(3):  # three retries, one key: one memory
                (first,) = await svc.memories.add(
                    text, user_id="u", metadata={"t": text}, idempotency_key=f"{run}-{n}-{text}"
                )
            assert first.text == text
            history = await svc.memories.history(first.id)
            assert [e["new_memory"] for e in history if e["event"] == "ADD"][-1] == text
        assert await svc.memories.count(user_id="u") == len(texts)
        await svc.index(full=True)
        assert await svc.memories.count(user_id="u") == len(texts)
        rows = [row async for row in export_rows(svc.memories.writer, history=True)]
    assert sorted(r["memory"] for r in rows) == sorted(texts)
    dump = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    batch = [json.dumps({"memory": t}, ensure_ascii=False) for t in texts]
    memories, bad = parse_lines(split_lines("\n".join(batch) + "\n"))
    assert not bad and [m.content for m in memories] == texts
    async with make_service(target, FakeEmbedder()) as svc:
        await svc.memories.delete_all(all=True)
        report = await import_rows(svc.memories.writer, in_parts(read_rows(dump), 1000))
        assert report.added == len(texts) and not report.bad, report
        back = await svc.memories.get_all(user_id="u", limit=100)
        assert sorted(r.text for r in back) == sorted(texts)
        assert sorted(str(r.metadata["t"]) for r in back) == sorted(texts)
