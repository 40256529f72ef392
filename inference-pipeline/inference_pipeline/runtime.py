"""The one ONNX Runtime session factory (threads, spinning, optimization level), and batched
inference over text lists."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnxruntime as ort

from inference_pipeline.tokenization import TextTokenizer

Outputs = tuple[np.ndarray, np.ndarray]  # (logits [B, 5], embedding [B, 384])
Runner = Callable[[dict[str, np.ndarray]], Outputs]


LEVELS = {
    "disabled": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
}
# Idle intra-op threads spin-wait by default. Timing one model alone (gates, the offline
# bench), nothing else wants the cores and spinning shortens each op's wake-up; in a server the
# event loop must parse the next requests while a batch runs, and turning spinning off there
# raised the served throughput 2-3x at concurrency 16 on this 2-core machine.
SPIN_WHEN_ALONE = True
SPIN_IN_SERVER = False


def make_session(
    path: Path,
    threads: int = 2,
    level: str = "all",
    optimized_path: Path | None = None,
    spinning: bool = SPIN_WHEN_ALONE,
) -> ort.InferenceSession:
    """The one ONNX Runtime session factory: a CPU session with ``threads`` intra-op threads
    (one inter-op thread: the graphs here are chains, parallel branches buy nothing), errors
    only in the log, graph optimization ``level``; ``optimized_path`` saves ORT's optimized
    graph; ``spinning`` (see ``SPIN_IN_SERVER``)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.log_severity_level = 3  # errors only: no per-session warnings about fusions
    options.graph_optimization_level = LEVELS[level]
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
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
    import time

    for _ in range(warmup):
        runner(inputs)
    samples = []
    for _ in range(max(1, iterations)):
        start = time.perf_counter()
        runner(inputs)
        samples.append((time.perf_counter() - start) * 1e3)
    p50, p90, p99 = np.percentile(samples, [50, 90, 99])
    return {"p50": float(p50), "p90": float(p90), "p99": float(p99), "runs": len(samples)}
