"""The TF Profiler joined with the static cost model, on a roofline of this CPU.

:func:`profile_function` runs a function under ``tf.profiler.experimental`` for N steps (the
trace is written where TensorBoard's profile plugin opens it), reads the trace's XPlane (the
``tf_Compute`` lines: one event per executed op, named ``node:OpType``) into a per-op-type table
of time, share and count, and :func:`join_with_costs` puts the cost model's FLOPs and bytes
beside it: achieved GFLOP/s and GB/s per op type, and each one's place under the roofline
measured by :func:`roofline_probe` in the same process. Op types the cost model cannot cost are
listed as such, not guessed.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from phase01_common.timing import wall_clock_seconds

__all__ = [
    "OpProfile",
    "ProfileRow",
    "Roofline",
    "join_with_costs",
    "profile_function",
    "roofline_probe",
]


@dataclass(frozen=True)
class OpProfile:
    op_type: str
    seconds: float  # over all profiled steps
    count: int  # executions over all steps


@dataclass(frozen=True)
class Roofline:
    peak_flops: float  # FLOP/s, a large float32 matmul
    bandwidth: float  # bytes/s, a large elementwise add (read 2, write 1)

    def attainable(self, intensity: float) -> float:
        """FLOP/s the roofline allows at ``intensity`` FLOP/byte."""
        return min(self.peak_flops, self.bandwidth * intensity)


@dataclass(frozen=True)
class ProfileRow:
    op_type: str
    seconds_per_step: float
    share: float  # of the profiled op time
    count_per_step: float
    flops_per_step: int | None  # None: the cost model cannot cost this op type
    bytes_per_step: int | None
    reason: str = ""  # why not costed

    @property
    def gflops(self) -> float | None:
        if self.flops_per_step is None or self.seconds_per_step <= 0:
            return None
        return self.flops_per_step / self.seconds_per_step / 1e9

    @property
    def gbytes(self) -> float | None:
        if self.bytes_per_step is None or self.seconds_per_step <= 0:
            return None
        return self.bytes_per_step / self.seconds_per_step / 1e9

    @property
    def intensity(self) -> float | None:
        if not self.flops_per_step or not self.bytes_per_step:
            return None
        return self.flops_per_step / self.bytes_per_step


def _op_type(event_name: str) -> str:
    """``MatMul_1:_MklMatMul`` -> ``MatMul``: the op type of the traced graph. oneDNN's rewrite
    prefix goes, and Grappler's fusions count as their main op (``_MklFusedMatMul``, a MatMul
    with its BiasAdd/activation, is timed as ``MatMul``; the cost model costs the BiasAdd
    separately, so the MatMul row's achieved FLOP/s is a slight underestimate)."""
    op = event_name.rsplit(":", 1)[-1]
    for prefix in ("_MklNative", "_Mkl", "_Fused", "Fused"):
        if op.startswith(prefix) and op != prefix:
            op = op[len(prefix) :]
    return op


def read_trace(logdir: Path) -> list[OpProfile]:
    """Per-op-type time and count from the newest ``*.xplane.pb`` under ``logdir``."""
    try:
        from tsl.profiler.protobuf import xplane_pb2
    except ImportError:  # pragma: no cover - older layout
        from tensorflow.tsl.profiler.protobuf import xplane_pb2

    files = sorted(Path(logdir).rglob("*.xplane.pb"), key=lambda p: p.stat().st_mtime)
    if not files:
        raise FileNotFoundError(f"no profiler trace (*.xplane.pb) under {logdir}")
    space = xplane_pb2.XSpace()
    space.ParseFromString(files[-1].read_bytes())
    seconds: Counter[str] = Counter()
    counts: Counter[str] = Counter()
    for plane in space.planes:
        names = plane.event_metadata
        for line in plane.lines:
            if not line.name.startswith("tf_Compute"):
                continue  # executor threads: one event per op executed
            for event in line.events:
                name = names[event.metadata_id].name
                if ":" not in name or "::" in name:
                    continue  # executor bookkeeping (ExecutorState::Process…)
                op = _op_type(name)
                seconds[op] += event.duration_ps * 1e-12
                counts[op] += 1
    return [
        OpProfile(op, seconds[op], counts[op]) for op in sorted(seconds, key=lambda o: -seconds[o])
    ]


def profile_function(
    fn: Callable[..., Any], args: tuple, steps: int, logdir: Path
) -> list[OpProfile]:
    """Run ``fn(*args)`` once to warm up, then ``steps`` times under the profiler."""
    import tensorflow as tf

    fn(*args)
    logdir = Path(logdir)
    tf.profiler.experimental.start(str(logdir))
    try:
        for _ in range(steps):
            fn(*args)
    finally:
        tf.profiler.experimental.stop()
    return read_trace(logdir)


def roofline_probe(size: int = 1024, megabytes: int = 64, repeats: int = 5) -> Roofline:
    """Peak float32 FLOP/s (a ``size``² matmul) and memory bandwidth (an add over
    ``megabytes`` per operand, far beyond the caches), best of ``repeats``."""
    import tensorflow as tf

    a = tf.random.stateless_normal([size, size], seed=[1, 2])
    matmul = tf.function(lambda x: tf.matmul(x, x))
    matmul(a).numpy()
    best = min(wall_clock_seconds(lambda: matmul(a).numpy()) for _ in range(repeats))
    peak = 2 * size**3 / best
    n = megabytes * 2**20 // 4
    x, y = tf.ones([n]), tf.ones([n])
    add = tf.function(lambda p, q: p + q)
    add(x, y).numpy()
    best = min(wall_clock_seconds(lambda: add(x, y)._numpy()) for _ in range(repeats))  # noqa: SLF001
    return Roofline(peak, 3 * 4 * n / best)


def join_with_costs(profile: list[OpProfile], report: Any, steps: int) -> list[ProfileRow]:
    """Each profiled op type beside the cost model's FLOPs and bytes for one step (the
    ``GraphReport`` of the same function at the same shapes)."""
    flops: Counter[str] = Counter()
    moved: Counter[str] = Counter()
    reasons: dict[str, str] = {}
    for node in report.nodes:
        if node.inside is not None:
            continue
        if node.cost is None:
            reasons.setdefault(node.op, node.uncostable_reason or "not costed")
            continue
        flops[node.op] += node.cost.flops
        moved[node.op] += node.cost.bytes_moved
    total = sum(p.seconds for p in profile) or 1.0
    rows = []
    for p in profile:
        costed = p.op_type in flops or p.op_type in moved
        rows.append(
            ProfileRow(
                p.op_type,
                p.seconds / steps,
                p.seconds / total,
                p.count / steps,
                flops[p.op_type] if costed else None,
                moved[p.op_type] if costed else None,
                ""
                if costed
                else reasons.get(p.op_type, "made at run time (not in the traced graph)"),
            )
        )
    return rows
