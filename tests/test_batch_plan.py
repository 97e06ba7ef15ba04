"""The parts of `memcore add --file` (memory/batch_plan.py): whole lists a part, every line
once, the file's order within a part and within a list, lines read back as they are."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memcore.core.errors import InputError
from memcore.memory.batch_plan import plan_parts

LINE = st.one_of(
    st.tuples(st.sampled_from(["ann", "bob", "cy", "dee"]), st.sampled_from(["core", "prefs"])),
    st.sampled_from(["not json", "", "[1, 2]", "\xff"]),
)


def _file(tmp_path: Path, lines: list[object]) -> tuple[Path, list[bytes]]:
    raw = []
    for n, line in enumerate(lines, 1):
        if isinstance(line, tuple):
            user, category = line
            row = {"memory": f"fact {n} ü", "user_id": user, "category": category}
            raw.append(json.dumps(row, ensure_ascii=False).encode() + b"\n")
        else:
            raw.append(str(line).encode("latin-1") + (b"\r\n" if n % 3 else b"\n"))
    path = tmp_path / "batch.jsonl"
    path.write_bytes(b"".join(raw))
    return path, raw


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    lines=st.lists(LINE, min_size=1, max_size=40),
    max_lines=st.integers(1, 12),
    start=st.integers(1, 5),
)
def test_parts_hold_whole_lists_every_line_once_in_the_files_order(
    tmp_path: Path, lines: list[object], max_lines: int, start: int
) -> None:
    path, raw = _file(tmp_path, lines)
    plan = plan_parts(str(path), start, max_lines, 1 << 20)
    numbers = [[n for n, _ in plan.read(p)] for p in range(len(plan.parts))]
    flat = [n for part in numbers for n in part]
    assert sorted(flat) == list(range(start, len(lines) + 1))  # every line once
    assert plan.lines == max(0, len(lines) - start + 1)
    for part in numbers:
        assert part == sorted(part) and 0 < len(part) <= max_lines
    lists: dict[object, list[int]] = {}
    for n in flat:
        lists.setdefault(lines[n - 1] if isinstance(lines[n - 1], tuple) else None, []).append(n)
    for key, members in lists.items():
        assert members == sorted(members)  # a list's lines keep the file's order
        holding = [p for p, part in enumerate(numbers) if set(part) & set(members)]
        if key is not None and len(members) <= max_lines:
            assert len(holding) == 1, (key, numbers)  # a list that fits is in one part
        assert holding == list(range(holding[0], holding[0] + len(holding)))
    for p in range(len(plan.parts)):  # each line read back as written, without its ending
        for n, text in plan.read(p):
            want = raw[n - 1]
            try:
                assert text == want.decode().removesuffix("\n").removesuffix("\r")
            except UnicodeDecodeError:
                assert text is None
        assert plan.sizes[p] == sum(len(raw[n - 1]) for n in numbers[p])


def test_parts_keep_to_the_byte_limit_and_name_the_plan(tmp_path: Path) -> None:
    path, raw = _file(tmp_path, [("ann", "core")] * 6 + [("bob", "core")] * 2)
    size = len(raw[0])
    plan = plan_parts(str(path), 1, 100, 3 * size)
    assert [len(p) for p in plan.parts] == [3, 3, 2]
    assert max(plan.sizes) <= 3 * size
    same = plan_parts(str(path), 1, 100, 3 * size)
    assert same.digest == plan.digest
    assert plan_parts(str(path), 2, 100, 3 * size).digest != plan.digest
    assert plan_parts(str(path), 1, 100, 4 * size).digest != plan.digest
    path.write_bytes(path.read_bytes().replace(b"fact 1 ", b"fact 9 "))
    assert plan_parts(str(path), 1, 100, 3 * size).digest != plan.digest


def test_a_file_changed_after_it_was_planned_is_refused_not_misread(tmp_path: Path) -> None:
    path, _ = _file(tmp_path, [("ann", "core"), ("bob", "core")])
    plan = plan_parts(str(path), 1, 1, 1 << 20)
    assert [text for _, text in plan.read(0)]
    with path.open("r+b") as fh:
        fh.truncate(10)
    with pytest.raises(InputError, match="changed while it was being added"):
        list(plan.read(1))
