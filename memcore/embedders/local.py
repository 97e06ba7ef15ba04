"""In-process embedders shipped with memcore: MiniLM-L6 int8 ONNX and its static distillation.

Both load their artifact from memcore/assets on first use (no download, no PyTorch) and run
in a worker thread so the event loop stays responsive.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import importlib
import logging
import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from memcore.core.errors import EmbedderError
from memcore.core.vectors import normalize_rows
from memcore.core.workers import worker_pool

log = logging.getLogger(__name__)
ASSETS = Path(__file__).resolve().parent.parent / "assets"
Matrix = npt.NDArray[np.float32]


def _asset(folder: str, name: str) -> Path:
    path = ASSETS / folder / name
    if not path.is_file():
        raise EmbedderError(
            f"model file {path} is missing from this installation; reinstall memcore"
        )
    return path


class _InProcess:
    """Shared lazy-loading and thread hand-off for the in-process models."""

    model_id = ""
    libraries: tuple[str, ...] = ("tokenizers",)  # imported when the model loads
    concurrency = 1  # one model, all cores: parallel batches would only contend
    reads_cjk = False  # all-MiniLM-L6-v2 was trained on English
    in_process = True

    def __init__(self, batch_size: int = 32, threads: int = 0) -> None:
        self.batch_size = batch_size
        self.threads = threads or os.cpu_count() or 1
        self._lock = threading.Lock()
        self._loaded = False
        self._preloading: threading.Thread | None = None
        self._thread: ThreadPoolExecutor | None = None  # the model's own (see embed)

    def _load(self) -> None:
        raise NotImplementedError

    def _run(self, texts: Sequence[str]) -> Matrix:
        raise NotImplementedError

    def _ensure_loaded(self) -> None:
        with self._lock:
            if not self._loaded:
                self._load()
                self._loaded = True

    def load(self) -> None:
        """Load the model now, in this thread (it loads on first use otherwise)."""
        self._ensure_loaded()

    @classmethod
    def import_libraries(cls) -> None:
        """Import the libraries the model loads with (they hold the GIL while they import)."""
        for name in cls.libraries:
            importlib.import_module(name)

    def preload(self) -> None:
        """Start loading the model in a thread of its own, for a process that will surely
        embed soon (a one-shot search): the load, mostly native code that releases the GIL,
        overlaps the rest of the start-up instead of following it. A failure here is not
        reported: the first embedding loads again and raises it."""
        if self._loaded or self._preloading is not None:
            return
        # Imported here, not in the thread: two threads importing at once can meet in a
        # circular import (numpy's own breaks), and an import holds the GIL anyway.
        self.import_libraries()
        self._preloading = threading.Thread(target=self._preload, name="memcore-preload")
        self._preloading.daemon = True
        self._preloading.start()

    def _preload(self) -> None:
        with contextlib.suppress(Exception):
            self._ensure_loaded()

    def embed_sync(self, texts: Sequence[str]) -> Matrix:
        self._ensure_loaded()
        return normalize_rows(self._run(texts))

    async def embed(self, texts: Sequence[str]) -> Matrix:
        """``embed_sync`` on the model's own thread, the same one each time. A search's query
        ran in whichever of asyncio's workers was free; on a thread of its own a warm search
        is 0.2-0.3 ms faster (bench/search.py: 3.04-3.10 against 2.78-2.83 ms p50, seven runs
        each). One thread: the runner hands this model one batch at a time (``concurrency``),
        whose texts it spreads over threads itself (``_run``)."""
        if self._thread is None:
            self._thread = worker_pool(1, "memcore-model")
        run = functools.partial(contextvars.copy_context().run, self.embed_sync, texts)
        return await asyncio.get_running_loop().run_in_executor(self._thread, run)

    async def aclose(self) -> None:
        if self._preloading is not None:  # not left in native code while Python exits
            await asyncio.to_thread(self._preloading.join)
        if self._thread is not None:  # a run still going finishes; a later embed starts anew
            self._thread.shutdown(wait=False)
            self._thread = None


class OnnxMiniLMEmbedder(_InProcess):
    """all-MiniLM-L6-v2, int8 per-channel ONNX, mean pooling, 384 dimensions."""

    model_id = "local:minilm-l6-v2-int8"
    folder = "minilm-l6-v2-int8"
    libraries = ("tokenizers", "onnxruntime")
    max_tokens = 256  # the length the model was trained with

    def _load(self) -> None:
        # The graph is small and its weights a file of their own beside it, which
        # onnxruntime reads as they are: 18 ms to a session, where parsing them in-line out
        # of one 22 MB protobuf took 45 (tools/build_models.py writes both).
        graph = _asset(self.folder, "model.onnx")
        _asset(self.folder, "model.onnx.data")
        try:
            self._session: Any = open_session(graph)
        except Exception as exc:  # onnxruntime raises its own untyped errors
            raise EmbedderError(f"cannot load the local model: {exc}") from exc
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(_asset(self.folder, "tokenizer.json")))
        tok.enable_truncation(self.max_tokens)
        tok.no_padding()
        self._tokenizer = tok
        # the calling thread runs a text; these, the others of a batch beside it
        # (started by the model's thread, they take its priority)
        self._beside = (
            ThreadPoolExecutor(self.threads - 1, "memcore-beside") if self.threads > 1 else None
        )

    def _run(self, texts: Sequence[str]) -> Matrix:
        # One sequence per run: int8 dynamic quantisation scales activations per run, so a
        # batch would make a text's vector depend on its batch-mates (cosine 0.98 to itself).
        # One thread per run, and as many runs at once as threads: a run split over two
        # threads waits for the slower half at each of the model's ~50 steps, so a query
        # takes 1.6 ms on two threads and 1.2 on one, and two texts side by side on one
        # thread each make 1.8x the vectors a second of both threads on one text at a time
        # (383 against 209 a second, ~100-token paragraphs; the same vectors, bit for bit).
        encoded = self._tokenizer.encode_batch(list(texts))
        out = np.zeros((len(texts), 384), dtype=np.float32)
        rows = iter(range(len(encoded)))
        lock = threading.Lock()

        def take() -> None:
            while True:
                with lock:
                    row = next(rows, None)
                if row is None:
                    return
                out[row] = self._one(encoded[row].ids)

        beside = []
        if self._beside is not None:
            beside = [self._beside.submit(take) for _ in range(min(self.threads, len(texts)) - 1)]
        try:
            take()
        finally:
            for run in beside:  # the others' texts are done (or failed) before this returns
                run.result()
        return out

    def _one(self, ids: list[int]) -> npt.NDArray[np.float32]:
        row = np.array([ids], dtype=np.int64)
        hidden = self._session.run(
            None,
            {
                "input_ids": row,
                "attention_mask": np.ones_like(row),
                "token_type_ids": np.zeros_like(row),
            },
        )[0]
        pooled: npt.NDArray[np.float32] = hidden[0].mean(axis=0)
        return pooled


UNFUSED = ("SkipLayerNormFusion", "BiasGeluFusion")  # onnxruntime's names for them


def open_session(graph: Path, save_optimized: Path | None = None) -> Any:
    """An onnxruntime session of the int8 MiniLM graph that runs on its caller's thread.

    Some ops stay as the graph has them (tools/build_models.py unfuse): onnxruntime would
    fuse each layer norm's Add, Add and LayerNormalization into a SkipLayerNormalization, whose
    CPU kernel takes 3-5x as long (32 against 10 us on 16 tokens, 112 against 21 on 64; a fifth
    of a query's whole run), and each Add and Gelu into a BiasGelu (~5% of a run). The same
    vectors either way, within float rounding. ``save_optimized`` writes the graph as the
    session runs it (for tests)."""
    import onnxruntime as ort

    ort.disable_telemetry_events()  # a local model sends nothing anywhere
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = 1  # OnnxMiniLMEmbedder runs texts side by side instead
    opts.inter_op_num_threads = 1
    opts.log_severity_level = 3
    if save_optimized is not None:
        opts.optimized_model_filepath = str(save_optimized)
    return ort.InferenceSession(
        str(graph),
        opts,
        providers=["CPUExecutionProvider"],
        disabled_optimizers=list(UNFUSED),
    )


class Helper(Protocol):
    """A process that runs this model for the command (embedders/helper.py)."""

    def embed(self, texts: Sequence[str]) -> Matrix | None: ...

    def discard(self) -> None: ...


class HelperEmbedder(OnnxMiniLMEmbedder):
    """The same model, run by a helper process while there is one (a one-shot search on two
    cores: embedders/helper.py), else in this process: the same vectors and errors either way."""

    def __init__(self, helper: Helper, batch_size: int = 32, threads: int = 0) -> None:
        super().__init__(batch_size, threads)
        self._helper: Helper | None = helper

    def embed_sync(self, texts: Sequence[str]) -> Matrix:
        with self._lock:
            if self._helper is not None:
                rows = self._helper.embed(texts)
                if rows is not None:
                    return rows
                log.debug("the model's helper process did not answer; loading the model here")
                self._let_go()
        return super().embed_sync(texts)

    def _let_go(self) -> None:
        if self._helper is not None:
            self._helper.discard()
            self._helper = None

    async def aclose(self) -> None:
        def let_go() -> None:
            with self._lock:  # after a request still out (its thread is reading the answer)
                self._let_go()

        await asyncio.to_thread(let_go)
        await super().aclose()


class StaticMiniLMEmbedder(_InProcess):
    """model2vec distillation of all-MiniLM-L6-v2: the mean of static token vectors (numpy)."""

    model_id = "static:minilm-l6-v2-m2v256"
    folder = "minilm-l6-v2-static"
    max_tokens = 512

    def _load(self) -> None:
        from tokenizers import Tokenizer

        self._table = np.load(_asset(self.folder, "embeddings.npy")).astype(np.float32)
        tok = Tokenizer.from_file(str(_asset(self.folder, "tokenizer.json")))
        tok.no_padding()
        tok.no_truncation()
        self._tokenizer = tok
        self._unk = tok.token_to_id("[UNK]")

    def _run(self, texts: Sequence[str]) -> Matrix:
        enc = self._tokenizer.encode_batch(list(texts), add_special_tokens=False)
        out = np.zeros((len(texts), self._table.shape[1]), dtype=np.float32)
        for row, e in enumerate(enc):
            ids = [i for i in e.ids[: self.max_tokens] if i != self._unk]
            if ids:
                out[row] = self._table[ids].mean(axis=0)
        return out
