from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memcore.vault.chunker import (
    ChunkerConfig,
    _after_lines,
    chunk_markdown,
    parse_day,
    split_front_matter,
)


def chunks_of(text: str, path: str = "memory/note.md", **cfg: int):  # type: ignore[no-untyped-def]
    chunks, _ = chunk_markdown(text, path, ChunkerConfig(**cfg) if cfg else None)
    return chunks


def test_hash_lines_in_code_fences_are_not_headings() -> None:
    text = "# Setup\n\nRun this:\n\n```bash\n# install deps\npip install x\n## not a heading\n```\n"
    chunks = chunks_of(text)
    assert len(chunks) == 1
    assert chunks[0].heading_path == ("Setup",)
    assert "# install deps" in chunks[0].text
    assert "## not a heading" in chunks[0].text


def test_heading_path_nests_and_pops() -> None:
    text = "# A\n\nx\n\n## B\n\ny\n\n### C\n\nz\n\n## D\n\nw\n"
    paths = [c.heading_path for c in chunks_of(text)]
    assert paths == [("A",), ("A", "B"), ("A", "B", "C"), ("A", "D")]


def test_line_spans_are_one_based_and_inclusive() -> None:
    text = "intro line\n\n# Title\n\nfirst para\nstill first\n\nsecond para\n"
    chunks = chunks_of(text)
    assert [(c.start_line, c.end_line) for c in chunks] == [(1, 1), (3, 8)]
    lines = text.split("\n")
    assert lines[chunks[1].start_line - 1] == "# Title"
    assert lines[chunks[1].end_line - 1] == "second para"


def test_empty_sections_produce_no_chunk() -> None:
    text = "# Empty\n\n## Also empty\n\n## Full\n\ncontent\n"
    chunks = chunks_of(text)
    assert [c.heading_path for c in chunks] == [("Empty", "Full")]


def test_a_file_of_headings_alone_is_one_chunk_and_an_empty_one_none() -> None:
    """A title waiting for text (or an outline) is found by its headings; a file with no
    text at all, or only white space, holds nothing to find."""
    (only,) = chunks_of("# Project Zephyr\n")
    assert (only.text, only.heading_path, only.start_line, only.end_line) == (
        "# Project Zephyr", ("Project Zephyr",), 1, 1)  # fmt: skip
    (outline,) = chunks_of("# Plan\n\n## Goals\n\n## Risks\n")
    assert outline.text == "# Plan\n\n## Goals\n\n## Risks" and outline.end_line == 5
    assert chunks_of("") == [] and chunks_of("  \n\n\t\n") == []


def test_five_thousand_word_section_is_windowed_with_overlap() -> None:
    words = [f"w{i}" for i in range(5000)]
    text = "# Long\n\n" + " ".join(words) + "\n"
    cfg = ChunkerConfig(chunk_tokens=400, overlap_tokens=50)  # the design's windows
    chunks = chunks_of(text, chunk_tokens=400, overlap_tokens=50)
    assert len(chunks) > 10
    for c in chunks:
        assert len(c.text) <= cfg.max_chars
    for prev, cur in pairwise(chunks):
        overlap = cur.text.split("\n", 1)[0]
        assert overlap and prev.text.endswith(overlap)
        assert 150 <= len(overlap) <= cfg.overlap_chars
    seen = set(" ".join(c.text for c in chunks).split())
    assert {f"w{i}" for i in range(5000)} <= seen  # nothing lost


def test_many_paragraphs_pack_into_windows_and_carry_overlap() -> None:
    paras = [f"Paragraph {i} " + "lorem ipsum dolor sit amet " * 8 for i in range(40)]
    text = "# Notes\n\n" + "\n\n".join(paras) + "\n"
    chunks = chunks_of(text)
    assert len(chunks) > 3
    assert all(c.heading_path == ("Notes",) for c in chunks)
    assert all(len(c.text) <= ChunkerConfig().max_chars for c in chunks)
    for prev, cur in pairwise(chunks):
        overlap = cur.text.split("\n", 1)[0]
        assert prev.text.endswith(overlap)
    starts = [c.start_line for c in chunks]
    assert starts == sorted(starts)


def test_tables_and_lists_stay_whole_when_they_fit() -> None:
    table = "| a | b |\n|---|---|\n" + "".join(f"| {i} | {i * 2} |\n" for i in range(20))
    items = "".join(f"- item {i}\n" for i in range(15))
    filler = "x " * 700
    text = f"# T\n\n{filler}\n\n{table}\n{items}"
    chunks = chunks_of(text, chunk_tokens=400, overlap_tokens=50)
    assert sum(1 for c in chunks if "| 19 | 38 |" in c.text and "| 0 | 0 |" in c.text) == 1
    assert sum(1 for c in chunks if "- item 0" in c.text and "- item 14" in c.text) == 1


def test_cjk_text_is_chunked_and_kept_intact() -> None:
    text = (
        "# 会议记录\n\n用户喜欢喝咖啡，下午不要安排会议。\n\n"
        "## 决定\n\n记忆以 Markdown 文件保存。\n"
    )
    chunks = chunks_of(text)
    assert [c.heading_path for c in chunks] == [("会议记录",), ("会议记录", "决定")]
    assert "用户喜欢喝咖啡" in chunks[0].text


def test_long_cjk_paragraph_without_spaces_is_split() -> None:
    text = "# 长\n\n" + "记忆系统" * 1000 + "\n"
    chunks = chunks_of(text)
    assert len(chunks) >= 3
    assert all(len(c.text) <= ChunkerConfig().max_chars for c in chunks)


def test_front_matter_keys_tags_and_date_become_metadata() -> None:
    text = (
        "---\ntitle: Plan\ntags: [arch, decision]\ndate: 2024-04-18\n---\n"
        "# Plan\n\nUse SQLite. #storage\n"
    )
    chunks = chunks_of(text)
    assert len(chunks) == 1
    c = chunks[0]
    assert c.metadata["title"] == "Plan"
    assert c.tags == ("arch", "decision", "storage")
    assert c.date == "2024-04-18"
    assert c.start_line == 6  # line numbers count the front matter


def test_date_comes_from_daily_note_file_name_then_fallback() -> None:
    dated, _ = chunk_markdown("text\n", "memory/2024-05-02.md")
    undated, _ = chunk_markdown("text\n", "memory/topic.md", fallback_date="2020-01-01")
    assert dated[0].date == "2024-05-02"
    assert undated[0].date == "2020-01-01"


@pytest.mark.parametrize(
    ("text", "day"),
    [
        ("2023/05/21 (Sun) 19:50", "2023-05-21"),
        ("2023-5-1", "2023-05-01"),
        ("1:56 pm on 8 May, 2023", "2023-05-08"),
        ("May 8th, 2023", "2023-05-08"),
        ("Sept. 3 2021", "2021-09-03"),
        ("2023-02-30", None),  # no such day
        ("someday soon", None),
        ("32 May 2023", None),
    ],
)
def test_parse_day_reads_common_free_form_dates(text: str, day: str | None) -> None:
    assert parse_day(text) == day


def test_date_line_at_the_top_dates_a_file_without_other_date() -> None:
    session = "# Session 3\n\n**Date:** 1:56 pm on 8 May, 2023\n\nUser: hi\n"
    chunks, _ = chunk_markdown(session, "memory/session-3.md", fallback_date="2020-01-01")
    assert {c.date for c in chunks} == {"2023-05-08"}
    # front matter and a dated file name still win over the line
    fm = "---\ndate: 2024-01-02\n---\nDate: 2023/05/21\n\ntext\n"
    assert chunk_markdown(fm, "memory/x.md")[0][0].date == "2024-01-02"
    named, _ = chunk_markdown("Date: 2023/05/21\n\ntext\n", "memory/2024-05-02.md")
    assert named[0].date == "2024-05-02"
    # a "Date:" line deep in the body is content, not the file's date
    deep = "".join(f"para {i}\n\n" for i in range(8)) + "Date: 2023/05/21\n"
    assert chunk_markdown(deep, "memory/x.md", fallback_date="2020-01-01")[0][0].date == (
        "2020-01-01"
    )


def test_hashtags_in_code_are_not_tags() -> None:
    text = "# X\n\nreal #tag here and `#notatag` and issue #123\n\n```\n#nope\n```\n"
    assert chunks_of(text)[0].tags == ("tag",)


def test_broken_front_matter_is_reported_and_the_body_still_indexed() -> None:
    text = "---\ntags: [unclosed\n---\n# Body\n\nstill here\n"
    chunks, warnings = chunk_markdown(text, "memory/x.md")
    assert warnings and warnings[0].startswith("front matter ignored")
    assert "still here" in chunks[0].text


def test_front_matter_split_handles_missing_end() -> None:
    meta, lines, err = split_front_matter("---\nno end\n")
    assert (meta, lines, err) == ({}, 0, None)


def test_content_hash_changes_only_with_content() -> None:
    a = chunks_of("# A\n\none\n\n# B\n\ntwo\n")
    b = chunks_of("# A\n\none\n\n# B\n\ntwo changed\n")
    assert a[0].content_hash == b[0].content_hash
    assert a[1].content_hash != b[1].content_hash


def test_window_size_is_configurable() -> None:
    text = "# S\n\n" + " ".join(f"w{i}" for i in range(1000)) + "\n"
    small = chunks_of(text, chunk_tokens=100, overlap_tokens=10)
    large = chunks_of(text, chunk_tokens=400, overlap_tokens=50)
    assert len(small) > len(large)
    assert all(len(c.text) <= 400 for c in small)


def test_paragraph_split_gives_each_dialog_turn_its_own_chunk() -> None:
    turns = "".join(
        f"[D1:{i}] **{'Ann' if i % 2 else 'Bob'}:** turn number {i}\n\n" for i in range(1, 6)
    )
    chunks, _ = chunk_markdown(
        "# Session 1\n\n" + turns, "memory/s.md", ChunkerConfig(split="paragraph")
    )
    assert len(chunks) == 5
    assert chunks[0].text.startswith("# Session 1\n\n[D1:1]")  # the heading stays with the first
    assert [c.start_line for c in chunks[1:]] == [5, 7, 9, 11]
    assert all(c.heading_path == ("Session 1",) for c in chunks)


def test_hex_colours_in_prose_are_not_tags() -> None:
    chunks, _ = chunk_markdown(
        "# Theme\n\nUse #ff0000 for errors, #0f0 and #a1b2c3ff too; tag it #design and #cafe.\n",
        "MEMORY.md",
    )
    assert set(chunks[0].tags) == {"design", "cafe"}


def test_a_memory_files_unchanged_memories_keep_their_chunks_and_changed_ones_get_new_ones() -> (
    None
):
    """A write to a file of a thousand memories re-chunks it: the memories that did not
    change or move hand out the chunk they had (no rebuilding, no re-encoding of its fields);
    an edited or moved one gets a chunk with its new text and lines."""
    from memcore.storage.rows import fresh_chunk_fields
    from memcore.vault.memory_format import MemoryItem, Scope, new_memory_file, render_item

    def item(n: int, text: str) -> list[str]:
        return render_item(MemoryItem(f"m{n}", text, None, f"2024-01-0{n}", "", {}))

    head = new_memory_file(Scope(user_id="u"), "core")
    lines = [*item(1, "likes tea"), *item(2, "works in Oslo")]
    path = "memory/users/u/core.md"
    first, _ = chunk_markdown(head + "\n".join(lines) + "\n", path)
    fields = [fresh_chunk_fields(c) for c in first]
    appended, _ = chunk_markdown(head + "\n".join([*lines, *item(3, "has a cat")]) + "\n", path)
    assert appended[0] is first[0] and appended[1] is first[1]
    assert [fresh_chunk_fields(c) for c in appended[:2]] == fields
    assert appended[2].text == "has a cat"
    edited, _ = chunk_markdown(
        head + "\n".join([*item(1, "likes green tea"), *item(2, "works in Oslo")]) + "\n", path
    )
    assert edited[0] is not first[0] and edited[0].text == "likes green tea"
    assert edited[1] is first[1]  # same lines, same text
    moved, _ = chunk_markdown(head + "\n".join([*item(2, "works in Oslo")]) + "\n", path)
    assert moved[0] is not first[1] and moved[0].start_line < first[1].start_line
    assert moved[0].index == 0 and moved[0].metadata["memory"]["id"] == "m2"  # type: ignore[index]
    other_head = new_memory_file(Scope(user_id="v"), "core")
    other, _ = chunk_markdown(other_head + "\n".join(lines) + "\n", "memory/users/v/core.md")
    assert other[0] is not first[0] and other[0].metadata["memory"]["user_id"] == "v"  # type: ignore[index]


def test_front_matter_of_a_long_file_is_read_from_its_head_and_never_shared() -> None:
    """Only the head of a file is split to find its front matter (a memory file of a
    thousand memories is read at every write to it); the YAML is read once per block, and
    every caller gets a dict of its own."""
    text = "---\ntags: [ops, db]\ndate: 2024-05-02\n---\n" + "".join(
        f"- item {n}\n" for n in range(5000)
    )
    meta, lines, error = split_front_matter(text)
    assert (meta, lines, error) == ({"tags": ["ops", "db"], "date": "2024-05-02"}, 4, None)
    meta["tags"].append("changed")
    assert split_front_matter(text)[0] == {"tags": ["ops", "db"], "date": "2024-05-02"}
    broken = split_front_matter("---\ntags: [ops\n---\nbody\n")
    assert broken[0] == {} and broken[1] == 3 and broken[2] is not None
    assert broken[2].startswith("front matter ignored:") and "\n" not in broken[2]
    assert split_front_matter("---\n" + "x: 1\n" * 500) == ({}, 0, None)  # never closed


def test_a_memory_files_last_parse_is_kept_for_the_next_write_and_no_other() -> None:
    from memcore.vault import chunker
    from memcore.vault.memory_format import Scope, new_memory_file

    head = new_memory_file(Scope(user_id="u"), "core")
    first = chunker.memory_file_of("memory/a.md", head + "- one\n")
    assert first is not None and chunker.memory_file_of("memory/a.md", head + "- one\n") is first
    second = chunker.memory_file_of("memory/a.md", head + "- one\n- two\n")
    assert second is not None and [i.text for i in second.items] == ["one", "two"]
    assert chunker.memory_file_of("memory/a.md", head + "- one\n") is not first  # one a file
    for n in range(chunker.PARSES_KEPT):
        chunker.memory_file_of(f"memory/other{n}.md", head + f"- {n}\n")
    assert "memory/a.md" not in chunker._PARSED and len(chunker._PARSED) == chunker.PARSES_KEPT
    assert chunker.memory_file_of("memory/plain.md", "# not a memory file\n") is None


@given(st.text(alphabet="ab\n\r", max_size=40), st.integers(min_value=0, max_value=12))
def test_a_body_past_its_front_matter_is_the_text_after_that_many_lines(text: str, n: int) -> None:
    assert _after_lines(text, n) == "\n".join(text.split("\n")[n:])
