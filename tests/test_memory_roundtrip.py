"""Any text and any JSON metadata come back exactly as they were added: from the service, from
the Markdown after a full reindex, on every backend. One add is one memory, whatever the text
holds (HTML comment markers, newlines, white space, carriage returns, pipes, 10 KB, emoji, RTL)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from memcore.core.models import MemoryRecord
from memcore.core.settings import Settings
from memcore.vault.memory_format import MemoryItem, parse_memory_file, render_item
from tests.conftest import make_service, on_backend
from tests.support import FakeEmbedder

TEXT = st.text(
    st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1
).filter(lambda t: t.strip() != "")
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=8,
)
METADATA = st.dictionaries(st.text(max_size=12), JSON, max_size=4)
SPECIAL = [
    ("Beta <!-- tricky", {"note": "<!-- x -->"}),
    ("closes --> early", {"a|b": "`code` | pipe"}),
    ("line one\n\nline three\n  indented\n\ttabbed", {}),
    ("  leading and trailing white space \n", {"n": -0.0}),
    ("windows\r\nline ends\rand a lone CR", {"deep": {"x": [1, 2.5, None, True]}}),
    ("- looks like an item\n# looks like a heading\n```\nfence", {}),
    ("emoji 🧠🦀 and RTL שלום عربى", {"ключ": "значение"}),
    ("x" * 10_000, {"big": "y" * 2_000}),
    ('ends with a fake comment <!-- memcore {"id": "m-0000000000000000"} -->', {}),
]


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, vault: Path) -> Settings:
    return on_backend(request, vault)


def same(record: MemoryRecord, text: str, metadata: dict[str, object]) -> bool:
    """Equal text, and metadata equal as JSON (so -0.0 and 0.0 stay apart)."""
    return record.text == text and json.dumps(record.metadata, sort_keys=True) == json.dumps(
        metadata, sort_keys=True
    )


def test_any_text_and_metadata_round_trip_through_add_get_and_reindex(backend: Settings) -> None:
    added: list[tuple[str, str, dict[str, object]]] = []

    async def add_one(text: str, metadata: dict[str, object]) -> None:
        async with make_service(backend, FakeEmbedder()) as svc:
            records = await svc.memories.add(text, user_id="u", metadata=metadata)
            assert len(records) == 1, records
            got = await svc.memories.get(records[0].id)
            assert same(got, text, metadata), (got.text, got.metadata)
            added.append((records[0].id, text, metadata))

    @settings(max_examples=40, deadline=None, database=None)
    @given(TEXT, METADATA)
    def one(text: str, metadata: dict[str, object]) -> None:
        asyncio.run(add_one(text, metadata))

    for text, metadata in SPECIAL:
        one = example(text, metadata)(one)
    one()

    async def after_reindex() -> None:
        async with make_service(backend, FakeEmbedder()) as svc:
            await svc.index(full=True)
            everything = await svc.memories.get_all(user_id="u", limit=1000)
            assert len(everything) == len(added)  # one memory per add, nothing doubled
            by_id = {r.id: r for r in everything}
            for memory_id, text, metadata in added:
                assert same(by_id[memory_id], text, metadata), memory_id

    asyncio.run(after_reindex())


@given(TEXT, METADATA)
@settings(max_examples=300, deadline=None, database=None)
@example("a --> b -->", {"x": "-->"})  # one-line texts render unchecked: the odd ones
@example("- nested item", {})
@example("vertical\x0btab, form\x0cfeed, \u2028line and \x85next", {})
@example("ends in a backslash \\", {"q": '"'})
@example("#tag `code` | pipe * star", {"<": ">"})
def test_an_item_renders_to_lines_that_parse_back_to_it(text: str, metadata: dict) -> None:
    """The pure half, with many more examples: the rendered lines, read back as a file,
    are the same item (render_item checks the lines of texts that could read back
    differently and raises rather than write them; one-line texts it writes unchecked)."""
    item = MemoryItem(id="m-0123456789abcdef", text=text, key="k", metadata=metadata)
    lines = render_item(item)
    assert lines[0].startswith("- ")
    (back,) = parse_memory_file("m.md", {}, "\n".join(["# M", "", *lines, ""]), 0).items
    assert (back.id, back.text, back.key) == (item.id, text, "k")
    assert json.dumps(back.metadata, sort_keys=True) == json.dumps(metadata, sort_keys=True)
