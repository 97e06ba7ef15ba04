"""How the vector graph's storage type and build effort trade build time, search time and
recall, on a real index's vectors and real questions.

    python bench/graph_quant.py --vault /tmp/memcore-fleet/vault --dtypes i8 f16 \
        --expansion-add 128 --search 2048:100 1024:50

For each storage type (usearch ``i8``, ``bf16``, ``f16``) and build effort: the build time on
every core (keys shuffled, as ann.py adds them), then for each ``ef:candidates`` pair the
search time a question (one thread) and recall@10 against an exact scan of the float32
vectors, raw (the graph's own order) and re-scored (the candidates ranked by their exact
cosines, as ann.py does with its float16 copies). Questions are the bench corpus's (500-699),
embedded with the static model: run it on a vault indexed with ``--embedder static``.
"""

from __future__ import annotations

import argparse
import os
import resource
import sqlite3
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import onnxruntime  # noqa: F401  (before usearch: see memcore/storage/ann.py)
from usearch.index import Index

from bench.corpus import questions
from memcore.embedders.local import StaticMiniLMEmbedder


def vectors(db: Path, sample: int) -> tuple[np.ndarray, np.ndarray]:
    """(ids, unit float32 rows) of the index's vectors; every ``sample``-th chunk id only."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    ids: list[int] = []
    blobs: list[bytes] = []
    sql = "SELECT id, embedding FROM memory_chunks WHERE embedding IS NOT NULL AND id % ? = 0"
    for cid, blob in conn.execute(sql, (sample,)):
        ids.append(cid)
        blobs.append(blob)
    mat = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(len(ids), -1).copy()
    mat /= np.linalg.norm(mat, axis=1, keepdims=True)
    return np.asarray(ids, dtype=np.uint64), mat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vault", type=Path, required=True)
    ap.add_argument("--dtypes", nargs="+", default=["i8", "f16"])
    ap.add_argument("--expansion-add", type=int, nargs="+", default=[128])
    ap.add_argument("--connectivity", type=int, nargs="+", default=[16])
    ap.add_argument("--search", nargs="+", default=["2048:100", "1024:50"], help="ef:candidates")
    ap.add_argument("--sample", type=int, default=1, help="every n-th chunk id (1: all)")
    ap.add_argument("--questions", type=int, default=200)
    args = ap.parse_args()

    started = time.perf_counter()
    ids, mat = vectors(args.vault / ".memcore" / "index.db", args.sample)
    print(f"{len(ids):,} vectors of {mat.shape[1]} dimensions read in "
          f"{time.perf_counter() - started:.1f} s")  # fmt: skip
    emb = StaticMiniLMEmbedder()
    emb._ensure_loaded()
    texts = questions(500 + args.questions)[500:]
    q = np.asarray(emb._run(texts), dtype=np.float32)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    truth = [set(ids[row].tolist()) for row in np.argpartition(-(q @ mat.T), 10, axis=1)[:, :10]]
    row_of = {int(k): i for i, k in enumerate(ids)}
    order = np.random.default_rng(len(ids)).permutation(len(ids))
    builds = [(d, c, e) for d in args.dtypes for c in args.connectivity for e in args.expansion_add]
    for dtype, degree, effort in builds:
        graph = Index(ndim=mat.shape[1], metric="cos", dtype=dtype, connectivity=degree,
                      expansion_add=effort)  # fmt: skip
        started = time.perf_counter()
        graph.add(ids[order], mat[order], threads=os.cpu_count() or 1)
        build = time.perf_counter() - started
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"{dtype} connectivity {degree}, expansion_add {effort}: built in {build:.1f} s "
              f"(process peak RSS {peak:,.0f} MB)")  # fmt: skip
        for pair in args.search:
            ef, count = (int(x) for x in pair.split(":"))
            graph.expansion_search = ef  # type: ignore[misc]  # see ann._set_expansion
            started = time.perf_counter()
            found = graph.search(q, count, threads=1)
            per = (time.perf_counter() - started) / len(q) * 1000
            raw = rescored = 0
            for i in range(len(q)):
                rows = np.array([row_of[int(k)] for k in found.keys[i] if int(k) in row_of])
                raw += len(set(ids[rows[:10]].tolist()) & truth[i])
                best = rows[np.argsort(-(mat[rows] @ q[i]), kind="stable")[:10]]
                rescored += len(set(ids[best].tolist()) & truth[i])
            n = 10 * len(q)
            print(f"  ef {ef}, {count} candidates: {per:.2f} ms a question, recall@10 "
                  f"raw {raw / n:.4f}, re-scored {rescored / n:.4f}")  # fmt: skip
        del graph


if __name__ == "__main__":
    main()
