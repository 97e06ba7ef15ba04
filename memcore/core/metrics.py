"""What an operator scrapes: ``GET /metrics`` in Prometheus' text format, made by the maintained
client library (prometheus_client), one registry per service (two services in one process
never mix their counts).

Counted as it happens: HTTP requests by route template, method and status, and their latency;
searches by how they ranked (vector, keyword, fused) and whether the result cache answered,
with their latency and that of the query embedding and the keyword half; embedder batches,
texts, failures and latency, and batches waiting for the embedder. Read at each scrape (see
``Metrics.observe_status``): files, chunks, memories, vectors still to embed, files waiting to
be indexed, the index generation, seconds since the last index write, the database's size,
reviews skipped, readiness; and the process's own (resident memory, CPU, open files).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    ProcessCollector,
    generate_latest,
)

CONTENT_TYPE = CONTENT_TYPE_LATEST
# 1 ms to 10 s: a warm search is a few ms, a large write or a cold embedder seconds
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
# what the status document says, as gauges: (status key, metric name, help)
STATUS_GAUGES = (
    ("files", "memcore_index_files", "Files in the index."),
    ("chunks", "memcore_index_chunks", "Chunks in the index."),
    ("memories", "memcore_memories", "Memories in the index (items of memory files)."),
    ("vectors_pending", "memcore_embed_queue_chunks", "Chunks whose vector is still to come."),
    ("indexing", "memcore_index_queue_files", "Files written and waiting to be indexed."),
    ("generation", "memcore_index_generation", "The index's generation (each write moves it)."),
    ("db_bytes", "memcore_index_bytes", "The index database's size in bytes."),
    ("reviews_skipped", "memcore_reviews_skipped", "Reads whose review was not recorded."),
)  # fmt: skip


class Metrics:
    """The counters and histograms of one service, and the gauges a scrape reads."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry()
        if sys.platform == "linux":  # process_resident_memory_bytes, CPU, open files (/proc)
            ProcessCollector(registry=r)
        self.requests = Counter(
            "memcore_http_requests", "HTTP requests answered, by route template, method and "
            "status.", ["route", "method", "status"], registry=r,
        )  # fmt: skip
        self.request_seconds = Histogram(
            "memcore_http_request_duration_seconds", "Time to answer an HTTP request, by route "
            "template and method.", ["route", "method"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.search_seconds = Histogram(
            "memcore_search_duration_seconds", "Searches, by how they ranked (vector, keyword or "
            "fused) and whether the result cache answered (hit, miss, off).", ["path", "cache"],
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.search_part_seconds = Histogram(
            "memcore_search_part_duration_seconds", "A search's parts: embedding the query "
            "(query_embedding) and the keyword half (keyword).", ["part"],
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.embed_batches = Counter(
            "memcore_embed_batches", "Batches sent to the embedder, by outcome (ok, failed: "
            "one attempt of a batch that may be retried).", ["outcome"], registry=r,
        )  # fmt: skip
        self.embed_texts = Counter(
            "memcore_embed_texts", "Texts embedded (documents and queries).", registry=r
        )
        self.embed_seconds = Histogram(
            "memcore_embed_batch_duration_seconds", "Time the embedder took for a batch.",
            buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.embed_waiting = Gauge(
            "memcore_embed_batches_waiting", "Batches waiting for a free embedder slot "
            "(embedder.concurrency).", registry=r,
        )  # fmt: skip
        self.index_lag = Gauge(
            "memcore_index_lag_seconds", "Seconds since the index was last written, while "
            "files are waiting to be indexed (0 when none is).", registry=r,
        )  # fmt: skip
        self.ready = Gauge(
            "memcore_ready", "1 once the index has caught up with the vault.", registry=r
        )
        self._status = {
            key: Gauge(name, text, registry=r) for key, name, text in STATUS_GAUGES
        }  # fmt: skip

    def observe_status(self, status: Mapping[str, object], last_write_age_s: float | None) -> None:
        """Set the gauges from a status document (``service.status_document``)."""
        for key, gauge in self._status.items():
            value = status.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                gauge.set(value)
        readiness = status.get("readiness")
        self.ready.set(
            1 if isinstance(readiness, Mapping) and readiness.get("phase") == "ready" else 0
        )
        waiting = status.get("indexing") or status.get("vectors_pending")
        self.index_lag.set(last_write_age_s if waiting and last_write_age_s is not None else 0)

    def exposition(self) -> bytes:
        """The registry in Prometheus' text format."""
        return generate_latest(self.registry)
