"""graph_inspector: see inside ``tf.function``, explain every retrace, ship a checked TFLite model.

- :mod:`graph_inspector.inspect_graph`: :func:`trace_and_inspect` captures the FuncGraph of a
  traced function and returns a :class:`GraphReport` (nodes, op histogram, captures, per-node cost,
  text / JSON / DOT / TensorBoard output).
- :mod:`graph_inspector.retrace`: :class:`RetraceMonitor` / :func:`explain_retracing` say *why* a
  ``tf.function`` traced again, argument by argument, with the fix.
- :mod:`graph_inspector.bert`, :mod:`graph_inspector.pipeline`, :mod:`graph_inspector.tflite`: the
  BERT classifier carried through SavedModel to TFLite (float32 and dynamic-range), validated.
- :mod:`graph_inspector.graph_semantics`: AutoGraph's ``if``/``for`` rewrite and variable vs
  Python-value capture, measured on traced graphs.
- :mod:`graph_inspector.retrace_scenarios`: every retracing trigger as a runnable scenario.
- ``python -m graph_inspector {inspect,convert,demo}``: the command line
  (:mod:`graph_inspector.cli`).

TensorFlow is imported lazily by each module's functions that need it, so ``import
graph_inspector`` and the CLI's argument checks stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "GraphReport",
    "NodeCost",
    "RetraceMonitor",
    "explain_retracing",
    "inspect_savedmodel",
    "trace_and_inspect",
]

if TYPE_CHECKING:
    from graph_inspector.inspect_graph import (
        GraphReport,
        NodeCost,
        inspect_savedmodel,
        trace_and_inspect,
    )
    from graph_inspector.retrace import RetraceMonitor, explain_retracing


def __getattr__(name: str) -> Any:
    # Lazy re-exports: importing the package must not import TensorFlow (slow, noisy).
    if name in {"GraphReport", "NodeCost", "trace_and_inspect", "inspect_savedmodel"}:
        from graph_inspector import inspect_graph

        return getattr(inspect_graph, name)
    if name in {"RetraceMonitor", "explain_retracing"}:
        from graph_inspector import retrace

        return getattr(retrace, name)
    raise AttributeError(f"module 'graph_inspector' has no attribute {name!r}")
