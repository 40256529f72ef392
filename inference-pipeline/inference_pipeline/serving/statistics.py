"""Triton's statistics extension: per-model counts and durations, in Triton's JSON shape.

``GET /v2/models/stats`` (every model), ``/v2/models/{m}/stats`` and
``/v2/models/{m}/versions/{v}/stats`` answer ``{"model_stats": [...]}``, one entry per model:

- ``inference_count``: rows inferred; ``execution_count``: model executions (batches), so
  their ratio is the average batch size; ``last_inference``: ms since the epoch.
- ``inference_stats``: ``success`` / ``fail`` (requests and their time in the server),
  ``queue`` (time in the batcher's queue), ``compute_input`` / ``compute_infer`` /
  ``compute_output`` (a batch's input assembly, model run, output split), each ``{count, ns}``.
- ``batch_stats``: per batch size, ``compute_input`` / ``compute_infer`` / ``compute_output``.

The same numbers feed ``/metrics``'s ``inference_requests_total``, ``inference_count_total``
and ``inference_exec_count_total`` (:func:`counter_families`), so the two views cannot
disagree. Counters are updated from the event loop and from the worker threads that run
batches, under one lock. A snapshot is a plain dict that sums across processes (Ray Serve's
replicas, :func:`merge`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily

DURATIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")
PHASES = ("compute_input", "compute_infer", "compute_output")


@dataclass
class Phases:
    """Seconds one batch spent assembling its inputs, in the model, and splitting outputs."""

    input_s: float = 0.0
    infer_s: float = 0.0
    output_s: float = 0.0

    def as_tuple(self) -> tuple[float, float, float]:
        return self.input_s, self.infer_s, self.output_s


def _ns(seconds: float) -> int:
    return int(round(seconds * 1e9))


def empty_model_stats(name: str, version: str) -> dict:
    return {
        "name": name,
        "version": version,
        "last_inference": 0,
        "inference_count": 0,
        "execution_count": 0,
        "inference_stats": {key: {"count": 0, "ns": 0} for key in DURATIONS},
        "batch_stats": [],
        "requests_by_status": {},  # ours: /metrics's inference_requests_total{status}
    }


class ModelStatistics:
    """The counters of one model, safe to update from several threads."""

    def __init__(self, name: str, version: str) -> None:
        self.name, self.version = name, version
        self._lock = threading.Lock()
        self._stats = empty_model_stats(name, version)
        self._batches: dict[int, dict[str, list[int]]] = {}  # size -> phase -> [count, ns]

    def request_done(self, status_label: str, seconds: float) -> None:
        """One infer request answered (``status_label``: "success" or why it was refused)."""
        with self._lock:
            by_status = self._stats["requests_by_status"]
            by_status[status_label] = by_status.get(status_label, 0) + 1
            key = "success" if status_label == "success" else "fail"
            entry = self._stats["inference_stats"][key]
            entry["count"] += 1
            entry["ns"] += _ns(seconds)

    def batch_done(self, rows: int, phases: Phases) -> None:
        """One successful execution of ``rows`` rows (called from the worker thread)."""
        with self._lock:
            stats = self._stats
            stats["inference_count"] += rows
            stats["execution_count"] += 1
            stats["last_inference"] = int(time.time() * 1000)
            per_size = self._batches.setdefault(rows, {p: [0, 0] for p in PHASES})
            for phase, seconds in zip(PHASES, phases.as_tuple(), strict=True):
                entry = stats["inference_stats"][phase]
                entry["count"] += 1
                entry["ns"] += _ns(seconds)
                per_size[phase][0] += 1
                per_size[phase][1] += _ns(seconds)

    def queued(self, seconds: Iterable[float]) -> None:
        """Queue waits of the requests of one batch (called on the event loop)."""
        with self._lock:
            entry = self._stats["inference_stats"]["queue"]
            for value in seconds:
                entry["count"] += 1
                entry["ns"] += _ns(value)

    def snapshot(self) -> dict:
        """A copy in Triton's shape (plus ``requests_by_status``)."""
        with self._lock:
            stats = {
                **self._stats,
                "inference_stats": {k: dict(v) for k, v in self._stats["inference_stats"].items()},
                "requests_by_status": dict(self._stats["requests_by_status"]),
            }
            stats["batch_stats"] = [
                {"batch_size": size}
                | {phase: {"count": c, "ns": ns} for phase, (c, ns) in phases.items()}
                for size, phases in sorted(self._batches.items())
            ]
        return stats


def merge(snapshots: Iterable[list[dict]]) -> list[dict]:
    """Sum several processes' snapshots (each a list of model entries) model by model."""
    merged: dict[tuple[str, str], dict] = {}
    for snapshot in snapshots:
        for model in snapshot:
            key = (model["name"], model["version"])
            total = merged.setdefault(key, empty_model_stats(*key))
            total["last_inference"] = max(total["last_inference"], model["last_inference"])
            for field in ("inference_count", "execution_count"):
                total[field] += model[field]
            for name, entry in model["inference_stats"].items():
                total["inference_stats"][name]["count"] += entry["count"]
                total["inference_stats"][name]["ns"] += entry["ns"]
            for status, count in model["requests_by_status"].items():
                by_status = total["requests_by_status"]
                by_status[status] = by_status.get(status, 0) + count
            sizes = {b["batch_size"]: b for b in total["batch_stats"]}
            for batch in model["batch_stats"]:
                into = sizes.setdefault(
                    batch["batch_size"],
                    {"batch_size": batch["batch_size"]}
                    | {p: {"count": 0, "ns": 0} for p in PHASES},
                )
                for phase in PHASES:
                    into[phase]["count"] += batch[phase]["count"]
                    into[phase]["ns"] += batch[phase]["ns"]
            total["batch_stats"] = [sizes[size] for size in sorted(sizes)]
    return [merged[key] for key in sorted(merged)]


def triton_json(models: list[dict]) -> dict:
    """The statistics extension's answer (our ``requests_by_status`` left out)."""
    return {
        "model_stats": [
            {k: v for k, v in model.items() if k != "requests_by_status"} for model in models
        ]
    }


def counter_families(models: list[dict], unknown_requests: dict[str, int]) -> list:
    """``inference_requests_total{model,status}``, ``inference_count_total{model}`` and
    ``inference_exec_count_total{model}`` for ``/metrics``, from the same snapshot;
    ``unknown_requests``: requests for a model that does not exist, by status."""
    requests = CounterMetricFamily(
        "inference_requests", "Infer requests by outcome", labels=["model", "status"]
    )
    rows = CounterMetricFamily("inference_count", "Rows (batch items) inferred", labels=["model"])
    execs = CounterMetricFamily(
        "inference_exec_count", "Model executions (batches)", labels=["model"]
    )
    for model in models:
        for status, count in sorted(model["requests_by_status"].items()):
            requests.add_metric([model["name"], status], count)
        rows.add_metric([model["name"]], model["inference_count"])
        execs.add_metric([model["name"]], model["execution_count"])
    for status, count in sorted(unknown_requests.items()):
        requests.add_metric(["_unknown", status], count)
    return [requests, rows, execs]
