"""ONNX Runtime sessions with a stated thread count, and batched inference over text lists."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from inference_pipeline.tokenization import TextTokenizer

Outputs = tuple[np.ndarray, np.ndarray]  # (logits [B, 5], embedding [B, 384])
Runner = Callable[[dict[str, np.ndarray]], Outputs]


def make_session(
    path: Path, threads: int = 2, level: str = "all", optimized_path: Path | None = None
) -> ort.InferenceSession:
    """A CPU session with ``threads`` intra-op threads (one inter-op thread: the graph is a
    chain, parallel branches buy nothing). ``optimized_path`` saves ORT's optimized graph."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: no per-session warnings about fusions
    options.graph_optimization_level = {
        "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }[level]
    if optimized_path is not None:
        options.optimized_model_filepath = str(optimized_path)
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def session_runner(session: ort.InferenceSession) -> Runner:
    names = [o.name for o in session.get_outputs()]

    def run(inputs: dict[str, np.ndarray]) -> Outputs:
        logits, embedding = session.run(names, inputs)
        return np.asarray(logits, np.float32), np.asarray(embedding, np.float32)

    return run


def run_texts(
    runner: Runner, tokenizer: TextTokenizer, texts: Sequence[str], batch_size: int
) -> Outputs:
    """Outputs for ``texts`` in order, in padded batches of ``batch_size`` (mixed lengths)."""
    logits, embeddings = [], []
    for start in range(0, len(texts), batch_size):
        out = runner(tokenizer.encode(texts[start : start + batch_size]))
        logits.append(out[0])
        embeddings.append(out[1])
    return np.concatenate(logits), np.concatenate(embeddings)


def measure_latency(
    runner: Runner, inputs: dict[str, np.ndarray], iterations: int, warmup: int = 3
) -> dict[str, float]:
    """Wall-clock latency of ``runner(inputs)`` in ms: p50, p90, p99 over ``iterations``."""
    from phase01_common.stats import percentiles
    from phase01_common.timing import time_interleaved

    timings = time_interleaved(
        {"run": lambda: runner(inputs)}, rounds=max(1, iterations), warmup=warmup
    )
    return {**percentiles(timings.samples["run"], scale=1e3), "runs": timings.rounds}
