"""Entry points of the graph inspector: trace a function (or open a SavedModel) and describe its
FuncGraph node by node.

The pieces live in their own modules: the graph model (:mod:`graph_inspector.graph_model`),
the walker that turns a FuncGraph into nodes (:mod:`graph_inspector.walker`), the renderers
(:mod:`graph_inspector.render`) and the compiler views (:mod:`graph_inspector.compiler_stats`).
The names below are re-exported so ``from graph_inspector.inspect_graph import ...`` keeps
working.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from graph_inspector.compiler_stats import (
    XlaStats,
    example_inputs,
    hlo_op_counts,
    mlir_op_counts,
    xla_stats,
)
from graph_inspector.cost_rules import NodeCost, TensorInfo
from graph_inspector.errors import NotASavedModelError
from graph_inspector.graph_model import Capture, GraphReport, Node
from graph_inspector.savedmodel import check_savedmodel_dir, load_savedmodel
from graph_inspector.walker import Container, flatten_with_paths, inspect_concrete_function

__all__ = [
    "Capture",
    "Container",
    "GraphReport",
    "Node",
    "NodeCost",
    "NotASavedModelError",
    "TensorInfo",
    "XlaStats",
    "check_savedmodel_dir",
    "example_inputs",
    "flatten_with_paths",
    "hlo_op_counts",
    "inspect_concrete_function",
    "inspect_savedmodel",
    "mlir_op_counts",
    "trace_and_inspect",
    "xla_stats",
]


def trace_and_inspect(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> GraphReport:
    """Trace ``fn`` for these inputs and describe the FuncGraph of the concrete function.

    ``fn`` may be a ``tf.function``, a plain Python function (wrapped in ``tf.function``), or a
    ``ConcreteFunction`` (then no arguments are needed). Arguments may be tensors, ``TensorSpec``s
    or Python values, exactly as ``get_concrete_function`` takes them. Keywords for the
    inspector itself: ``expand_calls=False`` keeps nested function calls as single nodes;
    ``unknown_dim=N`` costs every unknown (``None``) dimension as ``N``.
    """
    import tensorflow as tf

    expand_calls = bool(kwargs.pop("expand_calls", True))
    unknown_dim = kwargs.pop("unknown_dim", None)
    if isinstance(fn, tf.types.experimental.ConcreteFunction):
        if args or kwargs:
            raise TypeError("a ConcreteFunction is already traced: pass no arguments")
        concrete = fn
    elif isinstance(fn, tf.types.experimental.PolymorphicFunction):
        concrete = fn.get_concrete_function(*args, **kwargs)
    elif callable(fn):
        concrete = tf.function(fn).get_concrete_function(*args, **kwargs)
    else:
        raise TypeError(f"trace_and_inspect needs a callable, got {type(fn).__name__}")
    return inspect_concrete_function(concrete, expand_calls=expand_calls, unknown_dim=unknown_dim)


def inspect_savedmodel(
    path: str | Path, expand_calls: bool = True, unknown_dim: int | None = None
) -> dict[str, GraphReport]:
    """One GraphReport per serving signature of the SavedModel at ``path``.

    ``unknown_dim``: cost every unknown (``None``) dimension, a serving batch for example, as
    this size (without it such nodes are listed as not costed)."""
    folder = check_savedmodel_dir(path)
    loaded = load_savedmodel(folder)
    signatures = dict(loaded.signatures)
    if not signatures:
        raise NotASavedModelError(f"{folder} has no serving signatures to inspect")
    reports = {
        key: inspect_concrete_function(sig, expand_calls=expand_calls, unknown_dim=unknown_dim)
        for key, sig in sorted(signatures.items())
    }
    # Keep the loaded object alive while the reports' concrete functions are in use.
    for r in reports.values():
        r._loaded = loaded  # type: ignore[attr-defined]
    return reports
