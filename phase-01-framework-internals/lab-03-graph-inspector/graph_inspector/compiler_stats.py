"""Compiler views of a traced function: XLA (compile time, HLO op counts) and the TF-dialect
MLIR that ``tf.mlir.experimental.convert_function`` emits."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = ["XlaStats", "example_inputs", "hlo_op_counts", "mlir_op_counts", "xla_stats"]


@dataclass(frozen=True)
class XlaStats:
    compile_seconds: float
    run_seconds: float
    hlo_op_counts: dict[str, int]

    @property
    def hlo_op_total(self) -> int:
        return sum(self.hlo_op_counts.values())


_HLO_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*.*?\s([a-z][a-z0-9\-]*)\(")


def hlo_op_counts(hlo_text: str) -> dict[str, int]:
    """Count HLO instructions by opcode in HLO text (``%x = f32[2] add(%a, %b)``)."""
    counts: Counter[str] = Counter()
    for line in hlo_text.splitlines():
        m = _HLO_INSTRUCTION.match(line)
        if m:
            counts[m.group(1)] += 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def xla_stats(fn: Callable[..., Any], *args: Any) -> XlaStats:
    """Compile ``fn`` with XLA (``jit_compile=True``) for these tensor arguments.

    compile_seconds = first call (compile + run) minus the median of three later calls (run).
    """
    import tensorflow as tf

    python_fn = getattr(fn, "python_function", fn)
    jitted = tf.function(python_fn, jit_compile=True)
    start = time.perf_counter()
    jitted(*args)
    first = time.perf_counter() - start
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        jitted(*args)
        runs.append(time.perf_counter() - start)
    run = sorted(runs)[1]
    hlo = jitted.experimental_get_compiler_ir(*args)(stage="hlo")
    return XlaStats(max(first - run, 0.0), run, hlo_op_counts(hlo))


_MLIR_OP = re.compile(r'(?:=|^)\s*"?((?:tf|tf_executor|tfl|func|mhlo|stablehlo)\.[A-Za-z0-9_.]+)"?')


def mlir_op_counts(concrete: Any) -> dict[str, int]:
    """Op counts of the TF-dialect MLIR that ``tf.mlir.experimental.convert_function`` emits."""
    import tensorflow as tf

    text = tf.mlir.experimental.convert_function(concrete)
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        m = _MLIR_OP.search(line.strip())
        if m:
            counts[m.group(1)] += 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def example_inputs(concrete: Any, unknown_dim: int = 1) -> list[Any]:
    """Zeros matching a signature's inputs (unknown dimensions set to ``unknown_dim``)."""
    import tensorflow as tf

    specs = tf.nest.flatten(concrete.structured_input_signature)
    out = []
    for spec in specs:
        shape = [unknown_dim if d is None else d for d in spec.shape.as_list()]
        out.append(tf.zeros(shape, dtype=spec.dtype))
    return out
