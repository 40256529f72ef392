"""Every use the GPU check makes of the serving batcher and the generation engine, in one place.

The batcher and the engine change on their own branches; when their APIs move, this module is
the one to adapt. What is relied on:

- ``inference_pipeline.serving.batcher.DynamicBatcher(settings, run_batch, observer)``,
  ``await start()``, ``await submit(payload, rows=, length=)``, ``await close()``;
  ``run_batch(instance, payloads) -> one result per payload``; the observer's
  ``queue_size(requests)`` and ``batch_done(rows, compute_s, queue_s)``;
- ``inference_pipeline.serving.config.BatchingSettings`` (``max_batch_size``,
  ``preferred_batch_sizes``, ``max_queue_delay_us``, ``max_queue_size``) and the repository's
  batching constants (``inference_pipeline.repository``: ``MAX_BATCH_SIZE``,
  ``PREFERRED_BATCH_SIZES``, ``MAX_QUEUE_DELAY_MICROSECONDS``);
- the generation step-function signature (``inference_pipeline.generation.runtime``:
  ``StepFunction``, ``TorchStep``, ``empty_past``) and the generation benchmark's closed loop
  (``inference_pipeline_harness.generation_bench``: ``benchmark``, ``verdict``,
  ``RunResult``), which builds both engines (``ContinuousBatchingEngine``,
  ``StaticBatchingEngine``) and drives them with ``EngineRunner``.

The serving modules import ``tritonclient`` (Triton's config schema) at import time, which the
lent GPU machine may not hold: :func:`batcher_import_problem` says so before anything is built,
so that the step records "skipped: <module> missing" instead of failing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from inference_pipeline.generation.model import GPT, TINY_CONFIG, GPTConfig
from inference_pipeline.generation.runtime import StepFunction, TorchStep, empty_past
from inference_pipeline_harness.generation_bench import RunResult, benchmark, verdict

__all__ = [
    "GPT",
    "TINY_CONFIG",
    "GPTConfig",
    "RunResult",
    "StepFunction",
    "TorchStep",
    "BatchCounter",
    "batcher_import_problem",
    "batching_settings",
    "engine_comparison",
    "empty_past",
    "new_batcher",
    "submit",
]

BATCHER_MODULES = (
    "inference_pipeline.serving.batcher",
    "inference_pipeline.serving.config",
    "inference_pipeline.repository",
)


def batcher_import_problem() -> str | None:
    """Why the batcher's modules cannot be imported here ("tritonclient missing", or the
    error of a module that is there but refuses to load, e.g. protobuf's generated-code
    version check), else None."""
    for name in BATCHER_MODULES:
        try:
            importlib.import_module(name)
        except ModuleNotFoundError as exc:
            return f"{exc.name or name} missing"
        except Exception as exc:  # noqa: BLE001 - said in the record, not hidden
            return f"{name} does not import: {type(exc).__name__}: {exc}"
    return None


def batching_settings(batched: bool) -> Any:
    """The model repository's dynamic-batching settings (max batch 32, preferred 4/8/16, a
    2 ms queue delay); ``batched=False`` is the same with ``max_batch_size`` 1, as the serving
    benchmark's unbatched server (``--max-batch-size 1``)."""
    from inference_pipeline.repository import (
        MAX_BATCH_SIZE,
        MAX_QUEUE_DELAY_MICROSECONDS,
        PREFERRED_BATCH_SIZES,
    )
    from inference_pipeline.serving.config import BatchingSettings

    settings = BatchingSettings(
        max_batch_size=MAX_BATCH_SIZE,
        preferred_batch_sizes=PREFERRED_BATCH_SIZES,
        max_queue_delay_us=MAX_QUEUE_DELAY_MICROSECONDS,
        max_queue_size=1024,
    )
    return settings if batched else settings.with_overrides(max_batch_size=1)


class BatchCounter:
    """A batch observer: how many executions, how many rows, how much compute time."""

    def __init__(self) -> None:
        self.executions = 0
        self.rows = 0
        self.compute_s = 0.0

    def queue_size(self, requests: int) -> None:
        pass

    def batch_done(self, rows: int, compute_s: float, queue_s: Sequence[float]) -> None:
        self.executions += 1
        self.rows += rows
        self.compute_s += compute_s


def new_batcher(
    settings: Any, run_batch: Callable[[int, list[Any]], list[Any]], observer: BatchCounter
) -> Any:
    """A DynamicBatcher (not started: ``await batcher.start()`` on the running loop)."""
    from inference_pipeline.serving.batcher import DynamicBatcher

    return DynamicBatcher(settings, run_batch, observer, name="gpu-check")


async def submit(batcher: Any, payload: Any, length: int) -> Any:
    """One request of one row through the batcher; its result."""
    return await batcher.submit(payload, rows=1, length=length)


def engine_comparison(
    step: StepFunction, text: np.ndarray, concurrency: int, requests_per_client: int, rounds: int
) -> tuple[list[RunResult], dict[str, float | bool | str]]:
    """Static vs continuous batching on the same closed-loop workload (the generation
    benchmark's), alternating round by round; the field-wise medians and the verdict at
    ``concurrency``."""
    results = benchmark(step, text, [concurrency], requests_per_client, rounds, progress=print)
    return results, verdict(results, concurrency)
