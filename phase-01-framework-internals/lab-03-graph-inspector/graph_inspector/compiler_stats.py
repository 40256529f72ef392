"""Compiler views of a traced function: XLA (compile time, HLO op counts) and the TF-dialect
MLIR that ``tf.mlir.experimental.convert_function`` emits."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

__all__ = [
    "BridgeRun",
    "MlirStage",
    "XlaStats",
    "bridge_comparison",
    "example_inputs",
    "hlo_op_counts",
    "mlir_op_counts",
    "mlir_stages",
    "xla_stats",
]


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
    from phase01_common.timing import time_interleaved, wall_clock_seconds

    python_fn = getattr(fn, "python_function", fn)
    jitted = tf.function(python_fn, jit_compile=True)
    first = wall_clock_seconds(lambda: jitted(*args))
    run = time_interleaved({"run": lambda: jitted(*args)}, rounds=3, warmup=0).median("run")
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


# --- the TF-dialect MLIR, stage by stage ---------------------------------------------------------

# (stage, pass pipeline for tf.mlir.experimental.convert_function): the graph as imported
# (tf_executor islands), after TF's standard cleanup (functional form, canonicalized), and
# legalized to StableHLO (what XLA compiles; variables frozen to constants first).
MLIR_STAGES: tuple[tuple[str, str], ...] = (
    ("imported", ""),
    ("tf-standard-pipeline", "tf-standard-pipeline"),
    ("legalized to StableHLO", "tf-lower-to-mlprogram-and-hlo"),
)

# An op name: dialect.Name, not a type (!tf_executor.control) or an attribute (tf._name).
_DIALECT_OP = re.compile(r"(?<![!\w.])((?:tf|tf_executor|stablehlo|mhlo)\.[A-Za-z][A-Za-z0-9_.]*)")


@dataclass(frozen=True)
class MlirStage:
    stage: str
    pipeline: str
    op_counts: dict[str, int]  # "tf.MatMul" -> count; empty when the stage failed
    text: str  # the full MLIR (what --mlir-dump writes)
    error: str | None = None

    def by_dialect(self) -> dict[str, int]:
        dialects: Counter[str] = Counter()
        for op, n in self.op_counts.items():
            dialects[op.split(".", 1)[0]] += n
        return dict(sorted(dialects.items()))


def mlir_stages(concrete: Any) -> list[MlirStage]:
    """The function's MLIR after each stage of :data:`MLIR_STAGES`, with op counts."""
    import tensorflow as tf
    from tensorflow.python.framework.convert_to_constants import (
        convert_variables_to_constants_v2,
    )

    try:  # legalization to HLO needs values, not resource handles
        frozen = convert_variables_to_constants_v2(concrete)
    except Exception:  # noqa: BLE001 - nothing to freeze, or not freezable: use as is
        frozen = concrete
    stages = []
    for stage, pipeline in MLIR_STAGES:
        fn = frozen if "HLO" in stage else concrete
        try:
            text = tf.mlir.experimental.convert_function(fn, pass_pipeline=pipeline)
        except Exception as exc:  # noqa: BLE001 - a stage that fails is reported, not fatal
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            stages.append(MlirStage(stage, pipeline, {}, "", first[:200]))
            continue
        counts = Counter(_DIALECT_OP.findall(text))
        ordered = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))
        stages.append(MlirStage(stage, pipeline, ordered, text))
    return stages


# --- the MLIR bridge on and off -------------------------------------------------------------------


@dataclass(frozen=True)
class BridgeRun:
    bridge: str  # "MLIR bridge" or "old bridge"
    compile_seconds: float  # median over fresh tf.function objects
    hlo_op_counts: dict[str, int]
    outputs: Any  # numpy array(s)

    @property
    def hlo_op_total(self) -> int:
        return sum(self.hlo_op_counts.values())


def bridge_comparison(fn: Callable[..., Any], *args: Any, repeats: int = 3) -> list[BridgeRun]:
    """Compile ``fn`` with ``jit_compile=True`` through TF's MLIR bridge and through the old
    bridge (``tf.config.experimental.enable_mlir_bridge`` / ``disable_mlir_bridge``): compile
    time, the HLO each produces and the outputs. An explicit setting is restored afterwards;
    TF's "unspecified" cannot be set back through its API and is left as the old bridge."""
    import tensorflow as tf
    from phase01_common.timing import time_interleaved
    from tensorflow.python.eager import context

    python_fn = getattr(fn, "python_function", fn)
    was_enabled = context.context().enable_mlir_bridge
    switches = {
        "MLIR bridge": tf.config.experimental.enable_mlir_bridge,
        "old bridge": tf.config.experimental.disable_mlir_bridge,
    }
    last: dict[str, tuple[Any, str]] = {}

    def compile_with(name: str) -> Callable[[], float]:
        def sample() -> float:
            """One compile through this bridge, a fresh function (each call compiles); its
            seconds, and its outputs and HLO read under the same bridge, untimed."""
            switches[name]()
            jitted = tf.function(python_fn, jit_compile=True)
            start = time.perf_counter()
            outputs = jitted(*args)
            seconds = time.perf_counter() - start
            last[name] = (outputs, jitted.experimental_get_compiler_ir(*args)(stage="hlo"))
            return seconds

        return sample

    try:
        # Interleaved: the first compile in a process also pays XLA's start-up, and must not
        # be charged to one bridge. Each sample times itself (the HLO read stays outside).
        timings = time_interleaved(
            {name: compile_with(name) for name in switches},
            rounds=repeats,
            warmup=0,
            timer=lambda sample: sample(),
        )
        runs = [
            BridgeRun(
                name,
                timings.median(name),
                hlo_op_counts(last[name][1]),
                tf.nest.map_structure(lambda t: t.numpy(), last[name][0]),
            )
            for name in switches
        ]
    finally:
        # TF keeps a tri-state (0 unspecified, 1 enabled, 2 disabled) but its API can only set
        # enabled or disabled: "unspecified" is left as disabled, the old bridge.
        switches["MLIR bridge" if was_enabled == 1 else "old bridge"]()
    return runs
