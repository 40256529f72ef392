"""minigrad as a ``torch.compile`` backend: Dynamo → AOTAutograd + ``torch._decomp`` → minigrad.

The path a compiled call takes:

1. Dynamo rewrites the Python bytecode of ``forward`` and hands the backend a torch-level FX
   graph (``nn.Linear`` calls, ``F.silu`` ...) plus example inputs.
2. AOTAutograd (``torch._dynamo.backends.common.aot_autograd``) traces that graph down to ATen,
   runs the autograd engine ahead of time and splits the result into a *forward* graph (which
   also returns what backward needs) and a *backward* graph. While tracing it applies our
   decomposition table: every op listed in :data:`DECOMPOSED_OPS` is replaced by the
   ``torch._decomp`` implementation written in smaller ATen ops (``addmm`` → ``mm`` + ``mul``
   + ``add``, ``silu`` → ``mul(x, sigmoid(x))`` ...).
3. Both graphs are handed to :class:`MinigradInterpreter`, an ``fx.Interpreter`` that runs each
   ATen node as a minigrad op (:data:`ATEN_TO_MINIGRAD`) on ``minigrad.Tensor`` values. The
   backward graph is explicit ATen code, so it too runs on minigrad tensors, with minigrad's
   own autograd switched off (``no_grad``): AOTAutograd already did the differentiation.

An ATen op that is neither mapped nor decomposed is refused at compile time with an error that
names it and, when ``torch._decomp`` has one, the decomposition that would remove it.
"""

from __future__ import annotations

import collections
import operator
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import minigrad
import numpy as np
import torch
import torch._decomp
import torch.fx
from torch._dynamo.backends.common import aot_autograd

aten = torch.ops.aten

# Ops AOTAutograd must decompose before minigrad sees the graph (each has a torch._decomp
# entry): the fused/composite ops of an MLP, its loss and their backward formulas.
DECOMPOSED_OPS: list[Any] = [
    aten.addmm,
    aten.t,
    aten.silu,
    aten.silu_backward,
    aten.threshold_backward,
    aten.sigmoid_backward,
    aten.tanh_backward,
    aten._softmax,
    aten._softmax_backward_data,
    aten._log_softmax,
    aten._log_softmax_backward_data,
    aten.mse_loss,
    aten.mse_loss_backward,
    aten.nll_loss_forward,
    aten.nll_loss_backward,
    # what an nn.Sequential with LayerNorm, GELU and Dropout adds
    aten.native_layer_norm,
    aten.native_layer_norm_backward,
    aten.gelu,
    aten.gelu_backward,
]

_NP_DTYPES = {
    torch.float64: np.float64,
    torch.float32: np.float32,
    torch.float16: np.float16,
    torch.int64: np.int64,
    torch.int32: np.int32,
    torch.bool: np.bool_,
}


def _np_dtype(dtype: torch.dtype | None, default: Any = np.float32) -> Any:
    if dtype is None:
        return default
    if dtype not in _NP_DTYPES:
        raise TypeError(f"minigrad_backend: dtype {dtype} has no NumPy equivalent here")
    return _NP_DTYPES[dtype]


# ----------------------------------------------------------------------------- the op table
# Every mapping uses minigrad's own ops and primitives: comparisons are its ``Compare`` primitive
# (a boolean mask, no gradient), ``aten.where`` its ``Where``, ``aten.gather`` its ``Gather``,
# constants its creation functions. The one op minigrad has no primitive for, scatter of a value
# (the one-hot targets of a decomposed cross-entropy), is built from the Tensor's NumPy data: it
# carries no gradient, and the backward graph needs none (it is already explicit ATen code).
def _compare(op: str) -> Callable[..., minigrad.Tensor]:
    def run(a: minigrad.Tensor, b: Any) -> minigrad.Tensor:
        return minigrad.ops.Compare.apply(a, b, op)

    return run


def _scalar_tensor(value: float, dtype: torch.dtype | None = None, **_: Any) -> minigrad.Tensor:
    return minigrad.tensor(np.array(value, dtype=_np_dtype(dtype)))


def _full_like(x: minigrad.Tensor, value: float, dtype: torch.dtype | None = None, **_: Any):
    return minigrad.full_like(x, value, dtype=_np_dtype(dtype, x.dtype))


def _scatter_value(
    x: minigrad.Tensor, dim: int, index: minigrad.Tensor, value: float
) -> minigrad.Tensor:
    out = np.array(x.numpy(), copy=True)  # functional: scatter returns a new tensor
    np.put_along_axis(out, index.numpy(), value, axis=dim)
    return minigrad.tensor(out)


def _squeeze_dim(x: minigrad.Tensor, dim: int) -> minigrad.Tensor:
    dim = dim % max(x.ndim, 1)
    if x.ndim == 0 or x.shape[dim] != 1:
        return x
    return x.reshape(*x.shape[:dim], *x.shape[dim + 1 :])


def _sum_dims(x: minigrad.Tensor, dims: Any = None, keepdim: bool = False, dtype: Any = None):
    out = x.sum() if not dims else x.sum(dim=tuple(dims), keepdim=keepdim)
    return out if dtype is None else out.to(_np_dtype(dtype))


def _var_mean(
    x: minigrad.Tensor, dims: Any = None, *, correction: float = 1, keepdim: bool = False
) -> tuple[minigrad.Tensor, minigrad.Tensor]:
    dim = None if dims is None else tuple(dims)
    return (
        x.var(dim=dim, correction=correction, keepdim=keepdim),
        x.mean(dim=dim, keepdim=keepdim),
    )


ATEN_TO_MINIGRAD: dict[Any, Callable[..., Any]] = {
    aten.mm.default: lambda a, b: a @ b,
    aten.bmm.default: lambda a, b: a @ b,
    aten.add.Tensor: lambda a, b, alpha=1: a + (b if alpha == 1 else b * alpha),
    aten.sub.Tensor: lambda a, b, alpha=1: a - (b if alpha == 1 else b * alpha),
    aten.rsub.Scalar: lambda a, b, alpha=1: b - (a if alpha == 1 else a * alpha),
    aten.mul.Tensor: lambda a, b: a * b,
    aten.div.Tensor: lambda a, b: a / b,
    aten.neg.default: lambda a: -a,
    aten.pow.Tensor_Scalar: lambda a, e: a**e,
    aten.exp.default: lambda a: a.exp(),
    aten.log.default: lambda a: a.log(),
    aten.tanh.default: lambda a: a.tanh(),
    aten.sigmoid.default: lambda a: a.sigmoid(),
    aten.relu.default: lambda a: a.relu(),
    aten.rsqrt.default: lambda a: a.rsqrt(),
    aten.erf.default: lambda a: a.erf(),
    aten.var_mean.correction: _var_mean,
    aten.sum.dim_IntList: _sum_dims,
    aten.sum.default: lambda a, dtype=None: _sum_dims(a, None, False, dtype),
    aten.mean.dim: lambda a, dims, keepdim=False, dtype=None: a.mean(
        dim=tuple(dims), keepdim=keepdim
    ),
    aten.amax.default: lambda a, dims, keepdim=False: a.amax(dim=tuple(dims), keepdim=keepdim),
    aten.view.default: lambda a, shape: a.reshape(*shape),
    aten._unsafe_view.default: lambda a, shape: a.reshape(*shape),
    aten.reshape.default: lambda a, shape: a.reshape(*shape),
    aten.transpose.int: lambda a, d0, d1: a.transpose(d0, d1),
    aten.permute.default: lambda a, dims: a.permute(*dims),
    aten.expand.default: lambda a, shape, implicit=False: a.expand(*shape),
    aten.unsqueeze.default: lambda a, dim: a.unsqueeze(dim),
    aten.squeeze.dim: _squeeze_dim,
    aten.detach.default: lambda a: a.detach(),
    aten.clone.default: lambda a, memory_format=None: a.clone(),
    aten._to_copy.default: lambda a, dtype=None, **_: a.to(_np_dtype(dtype, a.dtype), copy=True),
    aten.le.Scalar: _compare("le"),
    aten.lt.Scalar: _compare("lt"),
    aten.gt.Scalar: _compare("gt"),
    aten.ge.Scalar: _compare("ge"),
    aten.eq.Scalar: _compare("eq"),
    aten.ne.Scalar: _compare("ne"),
    aten.where.self: minigrad.where,
    aten.gather.default: minigrad.gather,
    aten.scatter.value: _scatter_value,
    aten.scalar_tensor.default: _scalar_tensor,
    aten.full_like.default: _full_like,
    aten.zeros_like.default: lambda a, dtype=None, **kw: _full_like(a, 0, dtype),
    aten.ones_like.default: lambda a, dtype=None, **kw: _full_like(a, 1, dtype),
}


class UnmappedAtenOpError(NotImplementedError):
    """An ATen op in the graph has no minigrad mapping (raised at compile time)."""


def unmapped_op_message(op: Any, node_name: str) -> str:
    """The error for an op minigrad cannot run, with the decomposition that would remove it."""
    decomposition = torch._decomp.decomposition_table.get(op)
    if decomposition is not None:
        where = f"{decomposition.__module__}.{decomposition.__name__}"
        fix = (
            f"torch._decomp has a decomposition for it ({where}): add {op.overloadpacket} to "
            "concepts.compile_backend.DECOMPOSED_OPS (or to the backend's decompositions)"
        )
    else:
        fix = "torch._decomp has no decomposition for it: add a mapping to ATEN_TO_MINIGRAD"
    kind = "ATen op" if str(op).startswith("aten.") else "op"  # prims.* come from torch._refs
    return f"minigrad_backend: {kind} {op} (node '{node_name}') has no minigrad mapping; {fix}"


def check_mapped(graph: torch.fx.Graph) -> None:
    """Raise :class:`UnmappedAtenOpError` for the first call whose target minigrad lacks."""
    for node in graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        if node.target not in ATEN_TO_MINIGRAD:
            raise UnmappedAtenOpError(unmapped_op_message(node.target, node.name))


# ----------------------------------------------------------------------------- execution
def to_minigrad(value: Any) -> Any:
    """torch.Tensor → minigrad.Tensor (a NumPy view of the same memory); others unchanged."""
    if isinstance(value, torch.Tensor):
        return minigrad.tensor(value.detach().numpy())
    return value


def to_torch(value: Any) -> Any:
    if isinstance(value, minigrad.Tensor):
        return torch.from_numpy(np.array(value.numpy(), copy=True))
    return value


class MinigradInterpreter(torch.fx.Interpreter):
    """Runs an ATen FX graph node by node, each node as a minigrad op on minigrad Tensors."""

    def run_node(self, n: torch.fx.Node) -> Any:
        self.node_running = n.name  # for the error below (fx keeps no public current node)
        return super().run_node(n)

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        if target is operator.getitem:  # picks one output of a multi-output op (var_mean)
            return target(*args, **kwargs)
        if target not in ATEN_TO_MINIGRAD:
            node = getattr(self, "node_running", "?")
            raise UnmappedAtenOpError(unmapped_op_message(target, node))
        kwargs = {k: v for k, v in kwargs.items() if k not in ("layout", "device", "pin_memory")}
        return ATEN_TO_MINIGRAD[target](*args, **kwargs)


class MinigradGraph:
    """A compiled forward or backward graph: torch tensors in, minigrad runs it, torch out.

    ``_boxed_call``: AOTAutograd passes the arguments as one list it may free early (an
    instance attribute, so that the ``disable`` wrapper around the backward copies it)."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self._boxed_call = True
        self.gm = gm
        self.interpreter = MinigradInterpreter(gm)
        self.calls = 0
        self.seconds = 0.0

    def __call__(self, args: list) -> Any:
        start = time.perf_counter()
        inputs = [to_minigrad(a) for a in args]
        args.clear()
        with minigrad.no_grad():
            outputs = self.interpreter.run(*inputs)
        result = [to_torch(o) for o in outputs]
        self.calls += 1
        self.seconds += time.perf_counter() - start
        return result


@dataclass
class CompiledGraphs:
    """What one Dynamo graph became: its torch-level graph and the ATen graphs minigrad runs."""

    dynamo_code: str
    forward: MinigradGraph | None = None
    backward: MinigradGraph | None = None


@dataclass(repr=False)
class MinigradBackend:
    """``torch.compile(model, backend=MinigradBackend())``; records what it compiled.

    ``decompositions``: the ops AOTAutograd decomposes (default :data:`DECOMPOSED_OPS`).
    ``applied`` counts, per ATen op, how often its decomposition ran while tracing.
    """

    decompositions: Sequence[Any] = field(default_factory=lambda: list(DECOMPOSED_OPS))
    graphs: list[CompiledGraphs] = field(default_factory=list)
    applied: collections.Counter = field(default_factory=collections.Counter)

    def __repr__(self) -> str:  # Dynamo names the backend by it in its errors
        return "minigrad_backend"

    def decomposition_table(self) -> dict[Any, Callable[..., Any]]:
        """torch._decomp's entries for our ops, each wrapped to count when tracing uses it."""
        table = torch._decomp.get_decompositions(list(self.decompositions))

        def recording(op: Any, fn: Callable[..., Any]) -> Callable[..., Any]:
            def run(*args: Any, **kwargs: Any) -> Any:
                self.applied[str(op)] += 1
                return fn(*args, **kwargs)

            return run

        return {op: recording(op, fn) for op, fn in table.items()}

    def __call__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
        record = CompiledGraphs(dynamo_code=gm.code)
        self.graphs.append(record)

        def compile_forward(fw: torch.fx.GraphModule, _inputs: Any) -> MinigradGraph:
            check_mapped(fw.graph)
            record.forward = MinigradGraph(fw)
            return record.forward

        def compile_backward(bw: torch.fx.GraphModule, _inputs: Any) -> MinigradGraph:
            check_mapped(bw.graph)
            record.backward = MinigradGraph(bw)
            return record.backward

        inner = aot_autograd(
            fw_compiler=compile_forward,
            bw_compiler=compile_backward,
            decompositions=self.decomposition_table(),
        )
        return inner(gm, example_inputs)


def minigrad_backend(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> Callable:
    """The plain backend function: ``torch.compile(model, backend=minigrad_backend)``."""
    return MinigradBackend()(gm, example_inputs)


def graph_ops(gm: torch.fx.GraphModule | None) -> list[str]:
    """The distinct call targets of a graph, in first-use order (for reports)."""
    if gm is None:
        return []
    seen: dict[str, None] = {}
    for node in gm.graph.nodes:
        if node.op == "call_function":
            seen.setdefault(str(node.target), None)
    return list(seen)


def capture_aten_graphs(
    model: Callable[..., torch.Tensor], *inputs: torch.Tensor, decompositions: Sequence[Any] = ()
) -> tuple[torch.fx.GraphModule, torch.fx.GraphModule]:
    """The forward and backward ATen graphs AOTAutograd makes for ``model(*inputs).sum()``
    with the given decompositions (none: the graph before decomposition), run eagerly."""
    captured: dict[str, torch.fx.GraphModule] = {}

    def capture(name: str) -> Callable:
        def compiler(gm: torch.fx.GraphModule, _inputs: Any) -> Callable:
            captured[name] = gm
            run = gm.forward

            def boxed(args: list) -> Any:
                values = list(args)
                args.clear()
                return run(*values)

            boxed._boxed_call = True  # type: ignore[attr-defined]
            return boxed

        return compiler

    backend = aot_autograd(
        fw_compiler=capture("forward"),
        bw_compiler=capture("backward"),
        decompositions=torch._decomp.get_decompositions(list(decompositions)),
    )
    torch._dynamo.reset()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    compiled(*inputs).sum().backward()
    torch._dynamo.reset()
    return captured["forward"], captured["backward"]
