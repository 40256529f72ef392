"""What tracing does to Python: AutoGraph's rewrite of ``if``/``for``, and how variables differ
from captured Python values. Run ``python -m graph_inspector_harness.graph_semantics`` to see it.

- A Python ``if`` on a Python bool is decided while tracing (no op in the graph); on a tensor,
  AutoGraph rewrites it to ``tf.cond`` (an ``If``/``StatelessIf`` node with both branches).
- A ``for`` over ``range(n)`` is unrolled at trace time (n copies of the body); over
  ``tf.range(n)`` AutoGraph rewrites it to ``tf.while_loop`` (one ``While`` node, n at run time).
- A ``tf.Variable`` is captured by reference: ``assign`` is seen by the graph without retracing.
  A Python number is captured by value: changing it afterwards is silently ignored.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from graph_inspector.inspect_graph import GraphReport, trace_and_inspect


def _tf() -> Any:
    import tensorflow as tf

    return tf


def python_if(x, use_relu: bool):
    if use_relu:  # Python bool: decided at trace time
        return _tf().nn.relu(x)
    return x


def tensor_if(x):
    if _tf().reduce_sum(x) > 0:  # tensor condition: AutoGraph -> tf.cond
        return _tf().nn.relu(x)
    return -x


def python_for(x):
    for _ in range(3):  # Python range: unrolled, three Mul nodes
        x = x * 2.0
    return x


def tensor_for(x, n):
    for _ in _tf().range(n):  # tensor range: AutoGraph -> tf.while_loop
        x = x * 2.0
    return x


@dataclass
class ControlFlowView:
    name: str
    report: GraphReport
    autograph_code: str

    def count(self, *ops: str) -> int:
        return sum(self.report.op_histogram.get(op, 0) for op in ops)


def control_flow_views() -> list[ControlFlowView]:
    """Trace each example; keep its GraphReport and the code AutoGraph generated for it."""
    tf = _tf()
    x = tf.TensorSpec([4], tf.float32)
    cases = [
        ("python if (bool=True)", python_if, (x, True)),
        ("tensor if", tensor_if, (x,)),
        ("python for range(3)", python_for, (x,)),
        ("tensor for tf.range(n)", tensor_for, (x, tf.TensorSpec([], tf.int32))),
    ]
    views = []
    for name, fn, args in cases:
        report = trace_and_inspect(tf.function(fn), *args)
        views.append(ControlFlowView(name, report, tf.autograph.to_code(fn)))
    return views


@dataclass
class CaptureDemo:
    variable_before: float
    variable_after_assign: float
    python_before: float
    python_after_rebind: float
    traces: int


def variable_vs_python_capture() -> CaptureDemo:
    """Same function shape, two captures: a tf.Variable (by reference), a float (by value)."""
    tf = _tf()
    scale_var = tf.Variable(2.0)
    scale_py = 2.0

    @tf.function
    def with_variable(x):
        return x * scale_var

    @tf.function
    def with_python(x):
        return x * scale_py

    one = tf.constant(1.0)
    v0, p0 = float(with_variable(one)), float(with_python(one))
    scale_var.assign(5.0)
    scale_py = 5.0  # noqa: F841 - the graph captured 2.0; this rebinding is never seen
    v1, p1 = float(with_variable(one)), float(with_python(one))
    traces = with_variable.experimental_get_tracing_count() + (
        with_python.experimental_get_tracing_count()
    )
    return CaptureDemo(v0, v1, p0, p1, traces)


def main() -> int:
    for view in control_flow_views():
        control = {
            op: n
            for op, n in view.report.op_histogram.items()
            if op in ("If", "StatelessIf", "While", "StatelessWhile", "Mul", "Relu", "Neg")
        }
        print(f"== {view.name}: {view.report.node_count} nodes; {control}")
        print(view.autograph_code)
    demo = variable_vs_python_capture()
    print(
        f"tf.Variable capture: {demo.variable_before} -> {demo.variable_after_assign} after "
        f"assign(5.0); Python float capture: {demo.python_before} -> {demo.python_after_rebind} "
        f"after rebinding to 5.0; traces: {demo.traces} (no retrace either way)"
    )
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    raise SystemExit(main())
