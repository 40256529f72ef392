"""graph_inspector: see inside ``tf.function``, explain every retrace, ship a checked TFLite model.

- :func:`trace_and_inspect` (:mod:`graph_inspector.inspect_graph`) captures the FuncGraph of a
  traced function and returns a :class:`GraphReport` (:mod:`graph_inspector.graph_model`: nodes,
  op histogram, captures, per-node cost); :mod:`graph_inspector.walker` walks the graph,
  :mod:`graph_inspector.render` draws it (DOT, SVG by name scope, TensorBoard),
  :mod:`graph_inspector.compiler_stats` adds the XLA and MLIR views.
- :class:`RetraceMonitor` / :func:`explain_retracing` (:mod:`graph_inspector.retrace`) say *why* a
  ``tf.function`` traced again, argument by argument (:mod:`graph_inspector.retrace_args`), with
  the fix from the table of causes (:mod:`graph_inspector.retrace_causes`).
- :mod:`graph_inspector.savedmodel` (the one SavedModel folder check, signatures, assets) and
  :mod:`graph_inspector.tflite` (:func:`convert_savedmodel`, :func:`validate_tflite`,
  :class:`TFLiteModel`): SavedModel to TFLite, never trusted unvalidated.
- :mod:`graph_inspector.bert`, :mod:`graph_inspector.pipeline`: the Keras 3 BERT classifier, its
  fine-tuning and SavedModel export.
- ``python -m graph_inspector --help``: inspect, convert, signatures, demo, bench. The demo,
  report section, benchmark and scenarios live in the ``graph_inspector_harness`` package.

TensorFlow is imported lazily by each module's functions that need it, so ``import
graph_inspector`` and the CLI's argument checks stay fast.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "ConversionError",
    "GraphReport",
    "NodeCost",
    "NotASavedModelError",
    "RetraceMonitor",
    "TFLiteModel",
    "convert_savedmodel",
    "convert_savedmodel_to_tflite",
    "explain_retracing",
    "inspect_savedmodel",
    "trace_and_inspect",
    "validate_tflite",
]

_TFLITE = {"TFLiteModel", "convert_savedmodel", "convert_savedmodel_to_tflite", "validate_tflite"}

if TYPE_CHECKING:
    from graph_inspector.errors import ConversionError, NotASavedModelError
    from graph_inspector.inspect_graph import (
        GraphReport,
        NodeCost,
        inspect_savedmodel,
        trace_and_inspect,
    )
    from graph_inspector.retrace import RetraceMonitor, explain_retracing
    from graph_inspector.tflite import (
        TFLiteModel,
        convert_savedmodel,
        convert_savedmodel_to_tflite,
        validate_tflite,
    )


def __getattr__(name: str) -> Any:
    # Lazy re-exports: importing the package must not import TensorFlow (slow, noisy).
    if name in {"GraphReport", "NodeCost", "trace_and_inspect", "inspect_savedmodel"}:
        from graph_inspector import inspect_graph

        return getattr(inspect_graph, name)
    if name in {"RetraceMonitor", "explain_retracing"}:
        from graph_inspector import retrace

        return getattr(retrace, name)
    if name in _TFLITE:
        from graph_inspector import tflite

        return getattr(tflite, name)
    if name in {"ConversionError", "NotASavedModelError"}:
        from graph_inspector import errors

        return getattr(errors, name)
    raise AttributeError(f"module 'graph_inspector' has no attribute {name!r}")
