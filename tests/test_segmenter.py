"""jieba loaded as cheaply as the text allows (core/segmenter.py): a query cut with only the
entries of the compact dictionary copy that it can touch comes out exactly as the whole
dictionary cuts it, and a process with the copy never loads the whole dictionary."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memcore.core import segmenter
from memcore.core.tokenize import query_terms

SAMPLE = Path(__file__).resolve().parent.parent / "sample_vault"
RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")


def sample_runs() -> list[str]:
    runs: list[str] = []
    for path in sorted(SAMPLE.rglob("*.md")):
        runs += RUN.findall(path.read_text(encoding="utf-8"))
    return runs


@pytest.fixture(scope="module")
def compact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("XDG_CACHE_HOME", str(cache))
        jieba = segmenter.full()
        path = cache / "copy.sqlite"
        segmenter.save_compact(jieba.dt.FREQ, jieba.dt.total, path)
    return path


def cuts(tokenizer: object, text: str) -> tuple[list[str], list[str], list[str]]:
    return (
        list(tokenizer.cut_for_search(text, HMM=True)),  # type: ignore[attr-defined]
        list(tokenizer.cut(text, HMM=True)),  # type: ignore[attr-defined]
        list(tokenizer.cut(text, HMM=False)),  # type: ignore[attr-defined]
    )


def test_the_sample_vaults_chinese_is_cut_the_same_from_the_compact_copy(compact: Path) -> None:
    runs = sample_runs()
    assert len(runs) > 20
    whole = segmenter.full().dt
    for run in runs:
        assert cuts(segmenter.compact_tokenizer(run, compact), run) == cuts(whole, run), run


ALPHABET = "".join(sorted(set("".join(sample_runs())))) + "杨昊现深度学习模型的渲染引擎设置"


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet=ALPHABET, min_size=1, max_size=40))
def test_any_text_is_cut_the_same_from_the_compact_copy(compact: Path, text: str) -> None:
    assert cuts(segmenter.compact_tokenizer(text, compact), text) == cuts(segmenter.full().dt, text)


def test_no_copy_at_a_path_is_none(tmp_path: Path) -> None:
    assert segmenter.compact_tokenizer("记忆", tmp_path / "missing.sqlite") is None
    (tmp_path / "broken.sqlite").write_bytes(b"not a database")
    assert segmenter.compact_tokenizer("记忆", tmp_path / "broken.sqlite") is None


def test_the_whole_dictionary_read_from_the_copy_is_jiebas_own(compact: Path) -> None:
    """A process with the copy loads the whole dictionary from it (~0.2 s against jieba's own
    ~0.7 s): the very entries and total jieba's own loading gives."""
    own = segmenter._import().Tokenizer()
    own.initialize()
    assert segmenter.read_whole(compact) == (own.FREQ, own.total)


def test_a_copy_without_the_whole_dictionary_or_broken_gives_none(tmp_path: Path) -> None:
    older = tmp_path / "v1.sqlite"
    with sqlite3.connect(older) as db:  # a copy made before the table ``whole``
        db.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL)")
        db.execute("INSERT INTO meta VALUES ('total', 10)")
    assert segmenter.read_whole(older) is None
    assert segmenter.read_whole(tmp_path / "missing.sqlite") is None
    (tmp_path / "broken.sqlite").write_bytes(b"not a database")
    assert segmenter.read_whole(tmp_path / "broken.sqlite") is None


PROBE = """
import json, sys
from memcore.core import segmenter
from memcore.core.tokenize import query_terms
terms = query_terms(sys.argv[1])
print(json.dumps({"terms": terms, "loaded": segmenter.loaded(),
                  "pkg_resources": "pkg_resources" in sys.modules}))
"""


def test_a_process_with_the_copy_cuts_a_query_without_loading_the_dictionary(
    tmp_path: Path,
) -> None:
    query = "渲染引擎的默认设置是什么，杨昊现说过吗"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path)}

    def probe() -> dict[str, object]:
        done = subprocess.run([sys.executable, "-c", PROBE, query], env=env, check=True,
                              capture_output=True, text=True, timeout=120)  # fmt: skip
        result: dict[str, object] = json.loads(done.stdout)
        return result

    first = probe()  # no copy yet: the whole dictionary, and a copy left for later
    assert first["loaded"] is True and first["pkg_resources"] is False
    assert list((tmp_path / "memcore").glob("jieba-dict-*.sqlite"))
    second = probe()
    assert second["loaded"] is False and second["terms"] == first["terms"]
    assert second["terms"] == query_terms(query)


def test_a_query_is_cut_in_a_worker_only_while_jieba_loads_or_when_long() -> None:
    """Cutting a short query once the dictionary is loaded costs less than a hop to a worker
    thread under load; loading it (about a second) never runs where the caller is."""
    from memcore.core import segmenter
    from memcore.core.tokenize import cuts_quickly

    assert cuts_quickly("render engine water " * 100)  # no Chinese: always where it is
    assert cuts_quickly("水彩画的颜料") == segmenter.loaded()
    segmenter.full()
    assert cuts_quickly("水彩画的颜料") and not cuts_quickly("水彩画的颜料" * 60)


WARM = """
import asyncio, json, sys
from pathlib import Path
from memcore import load_settings, open_service
from memcore.core import segmenter

async def main(vault):
    async with open_service(load_settings(Path(vault))) as svc:
        async with svc.store.snapshot() as reader:
            held = await reader.holds_chinese()
        await svc.warm()
        warmed = segmenter.loaded()
        (Path(vault) / "memory" / "zh.md").write_text("# 笔记\\n\\n渲染引擎的默认设置是水彩画。\\n")
        await svc.index()
        found = await svc.search("渲染引擎", limit=3)
        print(json.dumps({"held": held, "warmed": warmed, "loaded": segmenter.loaded(),
                          "hits": [h.path for h in found.hits]}))

asyncio.run(main(sys.argv[1]))
"""


@pytest.mark.parametrize("chinese", [False, True])
def test_a_daemon_loads_the_whole_dictionary_at_start_only_for_an_index_holding_chinese(
    tmp_path: Path, chinese: bool
) -> None:
    """Loading jieba's whole dictionary takes ~0.6 s and ~70 MB: a daemon on a vault without
    Chinese does not pay that at start (the index's own words tell, a seek in the full-text
    index), and Chinese text written later is still cut, indexed and found."""
    vault = tmp_path / "vault"
    (vault / "memory").mkdir(parents=True)
    text = "# Notes\n\nThe render engine defaults to watercolor.\n"
    if chinese:
        text += "\n## 笔记\n\n杨昊现说过颜料的事。\n"
    (vault / "MEMORY.md").write_text(text, encoding="utf-8")
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache"),
           "MEMCORE_EMBEDDER_PROVIDER": "static"}  # fmt: skip
    done = subprocess.run([sys.executable, "-c", WARM, str(vault)], env=env, check=True,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["held"] is chinese
    assert result["warmed"] is chinese
    assert result["loaded"] is True  # indexing Chinese text loaded it when it came
    assert result["hits"][0] == "memory/zh.md"
