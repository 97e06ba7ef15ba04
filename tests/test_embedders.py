"""Embedders: the shipped local models for real; Ollama and OpenAI over a loopback HTTP server."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest

from memcore.core import workers
from memcore.core.errors import EmbedderError, EmbedderUnavailable
from memcore.embedders import local
from memcore.embedders.base import EmbeddingRunner
from memcore.embedders.local import OnnxMiniLMEmbedder, StaticMiniLMEmbedder
from memcore.embedders.ollama import OllamaEmbedder
from memcore.embedders.openai import OpenAIEmbedder
from tests.support import FakeEmbedder, WireBehaviour, WireServer, free_port, hash_vector


@pytest.mark.parametrize("cls", [OnnxMiniLMEmbedder, StaticMiniLMEmbedder])
async def test_local_models_rank_a_paraphrase_above_an_unrelated_text(
    cls: type[OnnxMiniLMEmbedder],
) -> None:
    emb = cls()
    vecs = await emb.embed(
        [
            "The user likes coffee.",
            "She drinks espresso every morning.",
            "The build server runs Ubuntu.",
        ]
    )
    assert vecs.dtype == np.float32
    assert np.allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    assert vecs[0] @ vecs[1] > vecs[0] @ vecs[2]


async def test_onnx_model_is_deterministic_and_batch_independent() -> None:
    emb = OnnxMiniLMEmbedder()
    texts = ["short", "a much longer sentence that needs padding in a batch " * 3]
    together = await emb.embed(texts)
    alone = await emb.embed([texts[0]])
    assert together.shape == (2, 384)
    assert float(together[0] @ alone[0]) > 0.99999


async def test_a_batchs_texts_run_side_by_side_each_into_its_own_row() -> None:
    texts = [f"note {i}: " + "the deploy moved to the new runners " * (i % 5 + 1) for i in range(9)]
    one_by_one = OnnxMiniLMEmbedder(threads=1)
    alone = np.stack([one_by_one.embed_sync([t])[0] for t in texts])
    side_by_side = await OnnxMiniLMEmbedder(threads=3).embed(texts)
    assert np.array_equal(side_by_side, alone)  # the same vectors, bit for bit, in order
    assert len({row.tobytes() for row in alone}) == len(texts)


async def test_the_model_runs_on_a_thread_of_its_own_at_the_workers_priority() -> None:
    emb = StaticMiniLMEmbedder()
    ran: list[tuple[int, int]] = []
    real = emb.embed_sync

    def spy(texts: Sequence[str]) -> np.ndarray:
        me = threading.get_native_id()  # (a thread's id, never reused while the test runs)
        ran.append((me, os.getpriority(os.PRIO_PROCESS, me)))
        return real(texts)

    emb.embed_sync = spy  # type: ignore[method-assign]
    for text in ["one", "two", "three"]:
        await asyncio.gather(emb.embed([text]), *(asyncio.to_thread(len, text) for _ in range(4)))
    assert len({thread for thread, _ in ran}) == 1  # the same thread each time
    loop_nice = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    assert ran[0][1] == min(loop_nice + workers.WORKER_NICE, 19)
    await emb.aclose()
    assert (await emb.embed(["after close"])).shape == (1, 256)  # a new thread
    assert ran[-1][0] != ran[0][0]
    await emb.aclose()


def test_the_model_runs_its_layer_norms_and_gelus_unfused(tmp_path: Path) -> None:
    shipped = local.ASSETS / OnnxMiniLMEmbedder.folder / "model.onnx"
    assert _nodes(shipped.read_bytes(), "SkipLayerNormalization") == 0
    ran = tmp_path / "as-run.onnx"
    local.open_session(shipped, save_optimized=ran)
    graph = ran.read_bytes()
    assert _nodes(graph, "SkipLayerNormalization") == 0  # onnxruntime's slower fused kernels
    assert _nodes(graph, "BiasGelu") == 0
    assert _nodes(graph, "LayerNormalization") == 12  # two a layer, six layers
    assert _nodes(graph, "Gelu") == 6


def _nodes(graph: bytes, op: str) -> int:
    """How many nodes of an ONNX graph run ``op``: NodeProto's op_type is field 4, a string
    (tag 0x22, then its length), where names holding the op's name are other fields."""
    return graph.count(b"\x22" + bytes([len(op)]) + op.encode())


async def test_the_int8_models_weights_beside_it_missing_or_cut_short_are_one_line_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = ["the same vector from a copy of the model's files"]
    shipped = OnnxMiniLMEmbedder(threads=1).embed_sync(text)
    copy = tmp_path / OnnxMiniLMEmbedder.folder
    shutil.copytree(local.ASSETS / OnnxMiniLMEmbedder.folder, copy)
    monkeypatch.setattr(local, "ASSETS", tmp_path)
    assert np.array_equal(OnnxMiniLMEmbedder(threads=1).embed_sync(text), shipped)
    weights = copy / "model.onnx.data"
    with weights.open("r+b") as f:
        f.truncate(weights.stat().st_size // 2)
    with pytest.raises(EmbedderError) as cut:
        OnnxMiniLMEmbedder(threads=1).embed_sync(["x"])
    assert str(cut.value).startswith("cannot load the local model: ")
    assert "\n" not in str(cut.value)
    weights.unlink()
    with pytest.raises(EmbedderError) as gone:
        OnnxMiniLMEmbedder(threads=1).embed_sync(["x"])
    assert str(gone.value) == (
        f"model file {weights} is missing from this installation; reinstall memcore"
    )


async def test_runner_batches_and_keeps_order() -> None:
    fake = FakeEmbedder(batch_size=3)
    texts = [f"text number {i} " + "x" * (i % 5) for i in range(10)]
    out = await EmbeddingRunner(fake).embed(texts)
    assert fake.calls == 4
    for i, t in enumerate(texts):
        assert np.allclose(out[i], hash_vector(t))


async def test_runner_retries_transient_failures_then_gives_up() -> None:
    class Flaky(FakeEmbedder):
        failures = 2

        async def embed(self, texts):  # type: ignore[no-untyped-def]
            if self.failures:
                self.failures -= 1
                raise EmbedderUnavailable("busy")
            return await super().embed(texts)

    flaky = Flaky()
    out = await EmbeddingRunner(flaky, retries=3, backoff_s=0.01).embed(["a"])
    assert out.shape == (1, 64)
    always_down = FakeEmbedder(down=True)
    with pytest.raises(EmbedderUnavailable):
        await EmbeddingRunner(always_down, retries=2, backoff_s=0.01).embed(["a"])


async def test_ollama_embeds_in_batches_with_bounded_concurrency() -> None:
    with WireServer(WireBehaviour(delay_s=0.05)) as srv:
        emb = OllamaEmbedder(srv.url, "nomic-embed-text", timeout=5, concurrency=3, batch_size=4)
        runner = EmbeddingRunner(emb)
        texts = [f"memory {i}" for i in range(40)]
        out = await runner.embed(texts)
        await runner.aclose()
        b = srv.behaviour
    assert out.shape == (40, 16)
    assert np.allclose(out[7], hash_vector("memory 7", 16))
    assert len(b.requests) == 10
    assert all(r["path"] == "/api/embed" and len(r["body"]["input"]) == 4 for r in b.requests)
    assert b.max_in_flight == 3


async def test_ollama_retries_503_then_succeeds() -> None:
    with WireServer(WireBehaviour(fail_first=2, fail_status=503)) as srv:
        runner = EmbeddingRunner(
            OllamaEmbedder(srv.url, "nomic-embed-text"), retries=3, backoff_s=0.01
        )
        out = await runner.embed(["x"])
        await runner.aclose()
    assert out.shape == (1, 16)
    assert len(srv.behaviour.requests) == 3


async def test_ollama_missing_model_says_how_to_fix_it() -> None:
    with WireServer() as srv:
        emb = OllamaEmbedder(srv.url, "bge-m3")
        with pytest.raises(EmbedderError, match="ollama pull bge-m3") as info:
            await emb.embed(["x"])
        await emb.aclose()
    assert not isinstance(info.value, EmbedderUnavailable)


async def test_ollama_unreachable_is_transient() -> None:
    emb = OllamaEmbedder(f"http://127.0.0.1:{free_port()}", "nomic-embed-text", timeout=2)
    with pytest.raises(EmbedderUnavailable, match="unreachable"):
        await emb.embed(["x"])
    await emb.aclose()


async def test_ollama_timeout_is_transient() -> None:
    with WireServer(WireBehaviour(delay_s=1.0)) as srv:
        emb = OllamaEmbedder(srv.url, "nomic-embed-text", timeout=0.2)
        with pytest.raises(EmbedderUnavailable):
            await emb.embed(["x"])
        await emb.aclose()


async def test_openai_embeds_and_reorders_by_index() -> None:
    with WireServer(WireBehaviour(delay_s=0.03)) as srv:
        emb = OpenAIEmbedder(
            "text-embedding-3-small",
            "sk-test",
            base_url=srv.url + "/v1",
            concurrency=2,
            batch_size=5,
        )
        runner = EmbeddingRunner(emb)
        texts = [f"fact {i}" for i in range(20)]
        out = await runner.embed(texts)
        await runner.aclose()
        b = srv.behaviour
    assert np.allclose(out[3], hash_vector("fact 3", 16))
    assert len(b.requests) == 4 and b.max_in_flight == 2
    assert b.requests[0]["body"]["encoding_format"] == "float"
    assert "dimensions" not in b.requests[0]["body"]


async def test_openai_sends_dimensions_and_names_them_in_the_model_id() -> None:
    with WireServer() as srv:
        emb = OpenAIEmbedder(
            "text-embedding-3-small", "sk-test", base_url=srv.url + "/v1", dimensions=16
        )
        await emb.embed(["x"])
        await emb.aclose()
    assert srv.behaviour.requests[0]["body"]["dimensions"] == 16
    assert emb.model_id == "openai:text-embedding-3-small@16"


async def test_openai_bad_key_is_permanent_and_429_is_transient() -> None:
    with WireServer() as srv:
        bad = OpenAIEmbedder("text-embedding-3-small", "sk-wrong", base_url=srv.url + "/v1")
        with pytest.raises(EmbedderError, match="rejected the API key") as info:
            await bad.embed(["x"])
        assert not isinstance(info.value, EmbedderUnavailable)
        await bad.aclose()
    with WireServer(WireBehaviour(fail_first=1, fail_status=429)) as srv:
        emb = OpenAIEmbedder("text-embedding-3-small", "sk-test", base_url=srv.url + "/v1")
        with pytest.raises(EmbedderUnavailable):
            await emb.embed(["x"])
        out = await emb.embed(["x"])  # the next call goes through
        await emb.aclose()
    assert out.shape == (1, 16)


async def test_openai_unreachable_is_transient() -> None:
    emb = OpenAIEmbedder("m", None, base_url=f"http://127.0.0.1:{free_port()}/v1", timeout=2)
    with pytest.raises(EmbedderUnavailable):
        await emb.embed(["x"])
    await emb.aclose()


def test_openai_without_key_or_server_is_a_clear_error() -> None:
    with pytest.raises(EmbedderError, match="needs an API key"):
        OpenAIEmbedder("text-embedding-3-small", None)


async def test_concurrent_callers_share_one_semaphore() -> None:
    with WireServer(WireBehaviour(delay_s=0.05)) as srv:
        runner = EmbeddingRunner(
            OllamaEmbedder(srv.url, "nomic-embed-text", concurrency=2, batch_size=1)
        )
        await asyncio.gather(*(runner.embed([f"t{i}", f"u{i}"]) for i in range(4)))
        await runner.aclose()
    assert srv.behaviour.max_in_flight == 2


async def test_concurrent_queries_share_model_calls_and_repeats_come_from_the_cache() -> None:
    fake = FakeEmbedder()
    runner = EmbeddingRunner(fake, retries=0, query_prefix="q: ")
    queries = [f"question {n}" for n in range(40)]
    rows = await asyncio.gather(*(runner.embed_queries([q]) for q in queries))
    # 40 searches at once: batches of batch_size (16), not 40 calls; each row its own query's
    assert fake.calls == 3
    for q, row in zip(queries, rows, strict=True):
        assert np.array_equal(row[0], hash_vector("q: " + q))
    again = await runner.embed_queries(["question 7", "question 7", "question 99"])
    assert fake.calls == 4 and fake.texts[-1:] == ["q: question 99"]  # only the new one
    assert np.array_equal(again[0], again[1]) and np.array_equal(again[0], rows[7][0])


async def test_a_failed_batch_fails_every_query_waiting_on_it_then_recovers() -> None:
    fake = FakeEmbedder(down=True)
    runner = EmbeddingRunner(fake, retries=0)
    answers = await asyncio.gather(
        *(runner.embed_queries([f"q{n}"]) for n in range(5)), return_exceptions=True
    )
    assert all(isinstance(a, EmbedderUnavailable) for a in answers)
    fake.down = False
    assert (await runner.embed_queries(["q1"])).shape == (1, len(hash_vector("q1")))


async def test_texts_embedded_ahead_are_taken_by_the_index_run_and_failures_embedded_again() -> (
    None
):
    fake = FakeEmbedder()
    runner = EmbeddingRunner(fake, retries=0, document_prefix="d: ")
    runner.embed_ahead(["alpha", "beta"])
    out = await runner.embed(["beta", "gamma", "alpha"])  # waits for the two made ahead
    assert [np.array_equal(r, hash_vector("d: " + t)) for r, t in
            zip(out, ["beta", "gamma", "alpha"], strict=True)] == [True, True, True]  # fmt: skip
    assert fake.calls == 2 and sorted(fake.texts) == ["d: alpha", "d: beta", "d: gamma"]
    await runner.embed(["alpha"])  # taken once: a later run embeds it again
    assert fake.texts[-1] == "d: alpha"
    fake.down = True
    runner.embed_ahead(["delta"])
    await asyncio.sleep(0.01)  # it failed in the background, and said nothing
    fake.down = False
    assert np.array_equal((await runner.embed(["delta"]))[0], hash_vector("d: delta"))
    fake.down = True
    runner.mark_down("down")
    runner.embed_ahead(["epsilon"])  # nothing starts while the embedder is down
    assert fake.calls == 4
    runner.mark_up()
    fake.down = False
    runner.embed_ahead(["zeta"])
    await runner.aclose()  # cancels what is still being made ahead
