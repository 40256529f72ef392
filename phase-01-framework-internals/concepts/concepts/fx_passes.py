"""torch.fx: trace a model into a Graph of Nodes, run it node by node, rewrite it, find its limits.

- :func:`trace` — ``fx.symbolic_trace`` runs ``forward`` once with Proxy objects instead of
  tensors; every operation on a Proxy appends a Node (placeholder, call_module,
  call_function, call_method, get_attr, output) to the Graph.
- :class:`ShapeProfiler` — an ``fx.Interpreter`` (executes the Graph node by node) that records
  each node's output shape, dtype and time: shape propagation plus a per-node profile.
- :class:`SoftmaxToWarpSoftmax` — an ``fx.Transformer`` (re-traces the Graph through
  overridable hooks) that swaps every ``F.softmax`` call for Lab 02's ``warp_softmax.softmax``.
- The limits: a Proxy has no value, so ``if x.sum() > 0`` cannot be decided while tracing
  (:func:`symbolic_trace_error`); Dynamo, which traces bytecode with real inputs, splits the
  function at the branch instead: a graph break (:func:`dynamo_graph_breaks`).
"""

from __future__ import annotations

import dataclasses
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn


class SmallNet(nn.Module):
    """Linear → ReLU → Linear → softmax: modules, a method and a function call to trace."""

    def __init__(self, d_in: int = 16, hidden: int = 32, d_out: int = 8) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, hidden)
        self.fc2 = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x).relu()
        return F.softmax(self.fc2(h) * 2.0, dim=-1)


def trace(model: nn.Module) -> fx.GraphModule:
    """``symbolic_trace``: the model as a GraphModule (its ``.graph`` and generated ``.code``)."""
    return fx.symbolic_trace(model)


def node_table(gm: fx.GraphModule) -> list[tuple[str, str, str, str]]:
    """(op, name, target, args) per node, for printing the Graph."""
    rows = []
    for node in gm.graph.nodes:
        target = node.target if isinstance(node.target, str) else _qualname(node.target)
        rows.append((node.op, node.name, target, str(node.args)))
    return rows


def _qualname(fn: Any) -> str:
    module = getattr(fn, "__module__", None) or ""
    name = getattr(fn, "__qualname__", None) or str(fn)
    return f"{module}.{name}" if module else name


@dataclass
class NodeProfile:
    name: str
    op: str
    target: str
    shape: tuple[int, ...] | None
    dtype: torch.dtype | None
    seconds: float


class ShapeProfiler(fx.Interpreter):
    """Runs the graph and records, per node, the output's shape, dtype and wall time."""

    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm)
        self.profile: list[NodeProfile] = []

    def run_node(self, n: fx.Node) -> Any:
        start = time.perf_counter()
        result = super().run_node(n)
        seconds = time.perf_counter() - start
        is_tensor = isinstance(result, torch.Tensor)
        target = n.target if isinstance(n.target, str) else _qualname(n.target)
        self.profile.append(
            NodeProfile(
                n.name,
                n.op,
                target,
                tuple(result.shape) if is_tensor else None,
                result.dtype if is_tensor else None,
                seconds,
            )
        )
        # Like fx.passes.shape_prop: leave the metadata on the node for later passes.
        if is_tensor:
            n.meta["shape"], n.meta["dtype"] = tuple(result.shape), result.dtype
        return result


def profile_nodes(gm: fx.GraphModule, *inputs: torch.Tensor, repeats: int = 5) -> list[NodeProfile]:
    """One profile per node: shape and dtype, and the median time over ``repeats`` runs (the
    first run pays one-off costs such as kernel selection and page faults)."""
    runs = []
    for _ in range(max(repeats, 1)):
        profiler = ShapeProfiler(gm)
        profiler.run(*inputs)
        runs.append(profiler.profile)
    median = [statistics.median(run[i].seconds for run in runs) for i in range(len(runs[0]))]
    return [dataclasses.replace(p, seconds=t) for p, t in zip(runs[0], median, strict=True)]


_SOFTMAX_TARGETS = (F.softmax, torch.softmax)


class SoftmaxToWarpSoftmax(fx.Transformer):
    """Replaces ``F.softmax(x, dim)`` (and ``torch.softmax``) with ``warp_softmax.softmax``.

    A call with an explicit ``dtype`` stays as it is: warp_softmax has no dtype argument."""

    def __init__(self, gm: fx.GraphModule) -> None:
        super().__init__(gm)
        self.replaced = 0

    def call_function(self, target: Any, args: tuple, kwargs: dict[str, Any]) -> Any:
        if target in _SOFTMAX_TARGETS and kwargs.get("dtype") is None:
            import warp_softmax  # the compiled Lab 02 library; loaded only when a pass needs it

            dim = args[1] if len(args) > 1 else kwargs.get("dim")
            if dim is not None:
                self.replaced += 1
                return super().call_function(warp_softmax.softmax, (args[0],), {"dim": dim})
        return super().call_function(target, args, kwargs)


def swap_softmax(gm: fx.GraphModule) -> tuple[fx.GraphModule, int]:
    """The rewritten GraphModule and how many softmax calls were swapped."""
    transformer = SoftmaxToWarpSoftmax(gm)
    new_gm = transformer.transform()
    return new_gm, transformer.replaced


# ----------------------------------------------------------------------------- the limits
def data_dependent(x: torch.Tensor) -> torch.Tensor:
    """Python control flow on a tensor's value: fine eagerly, impossible for a Proxy."""
    y = torch.sin(x) * 2
    if y.sum() > 0:
        return torch.cos(y)
    return y - 1


def symbolic_trace_error(fn: Callable[..., Any] = data_dependent) -> str | None:
    """The error ``fx.symbolic_trace`` raises for ``fn`` (None if it traces)."""
    try:
        fx.symbolic_trace(fn)
    except fx.proxy.TraceError as error:
        return f"{type(error).__name__}: {error}"
    return None


@dataclass
class GraphBreaks:
    graph_count: int
    graph_break_count: int
    reasons: list[str]


def dynamo_graph_breaks(fn: Callable[..., Any], *inputs: torch.Tensor) -> GraphBreaks:
    """How Dynamo captures ``fn``: graphs, graph breaks and why (``torch._dynamo.explain``)."""
    torch._dynamo.reset()
    explained = torch._dynamo.explain(fn)(*inputs)
    torch._dynamo.reset()
    reasons = [str(b.reason).splitlines()[0] for b in explained.break_reasons]
    return GraphBreaks(explained.graph_count, explained.graph_break_count, reasons)
