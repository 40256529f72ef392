"""Prometheus metrics (Triton's vocabulary) and structured JSON logs.

``inference_count`` counts rows, ``inference_exec_count`` counts model executions, so
``inference_count / inference_exec_count`` is the average batch size. Those two and
``inference_requests`` are rendered from the statistics extension's counters
(``serving.statistics``), so ``/metrics`` and ``/v2/models/stats`` agree by construction; the
histograms and the queue gauge live here. Each server gets its own registry, so several
servers (tests) can live in one process.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Sequence

from prometheus_client import CollectorRegistry, Gauge, Histogram

from inference_pipeline.serving.statistics import ModelStatistics

LATENCY_BUCKETS = (
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0,
)  # fmt: skip
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)


class ServerMetrics:
    """The histograms and gauges of one server, in its own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.queue_time = Histogram(
            "inference_queue_seconds", "Time a request waited in the batcher's queue",
            ["model"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.compute_time = Histogram(
            "inference_compute_seconds", "Time one batch spent in the model",
            ["model"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.request_time = Histogram(
            "inference_request_seconds", "Infer request time inside the server",
            ["model"], buckets=LATENCY_BUCKETS, registry=r,
        )  # fmt: skip
        self.batch_size = Histogram(
            "inference_batch_size", "Rows per execution", ["model"],
            buckets=BATCH_BUCKETS, registry=r,
        )  # fmt: skip
        self.queue_size = Gauge(
            "inference_queue_size", "Requests waiting in the batcher's queue", ["model"],
            registry=r,
        )  # fmt: skip

    def observer(self, model: str, statistics: ModelStatistics) -> ModelObserver:
        return ModelObserver(self, model, statistics)


class ModelObserver:
    """The batcher's view of the metrics for one model (implements ``BatchObserver``)."""

    def __init__(self, metrics: ServerMetrics, model: str, statistics: ModelStatistics) -> None:
        self._queue = metrics.queue_size.labels(model)
        self._batch = metrics.batch_size.labels(model)
        self._compute = metrics.compute_time.labels(model)
        self._queue_time = metrics.queue_time.labels(model)
        self._statistics = statistics

    def queue_size(self, requests: int) -> None:
        self._queue.set(requests)

    def batch_done(self, rows: int, compute_s: float, queue_s: Sequence[float]) -> None:
        self._batch.observe(rows)
        self._compute.observe(compute_s)
        for seconds in queue_s:
            self._queue_time.observe(seconds)
        self._statistics.queued(queue_s)


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message and any ``extra`` fields."""

    STANDARD = set(vars(logging.makeLogRecord({}))) | {"message", "asctime"}

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        entry.update({k: v for k, v in vars(record).items() if k not in self.STANDARD})
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_json_logging(level: str = "info") -> None:
    """Route this process's logs (ours and uvicorn's) to stderr as JSON lines."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter())
    for name in ("inference_pipeline", "uvicorn", "uvicorn.error"):
        logger = logging.getLogger(name)
        logger.handlers[:] = [handler]
        logger.setLevel(level.upper())
        logger.propagate = False
