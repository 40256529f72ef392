"""``Function`` (the torch.autograd.Function API), its context object, and grad mode.

A Function's ``apply`` runs ``forward`` and, when some input requires grad, records one graph
node: the context object ``ctx`` itself, which the engine later hands back to ``backward``.
Nothing here knows any particular op; the ops live in :mod:`minigrad.ops`.

Two flavours share this machinery:

* user Functions (like torch's): ``forward`` gets Tensors, ``backward`` gets Tensors;
* built-in primitives (``Primitive`` subclasses): ``forward`` and ``backward`` get raw
  ``np.ndarray`` s on the fast path, and Tensors when the engine runs with
  ``create_graph=True``, so one backward rule serves both first and higher order.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minigrad.grad_mode import enable_grad, grad_mode, is_grad_enabled, no_grad, set_grad_enabled
from minigrad.grad_mode import state as _mode
from minigrad.rules import PRIMITIVES
from minigrad.tensor import Tensor
from minigrad.tracing import TRACES, dispatch

__all__ = [
    "Context",
    "Function",
    "Primitive",
    "enable_grad",
    "is_grad_enabled",
    "no_grad",
    "set_grad_enabled",
]


# ----------------------------------------------------------------------------- context / node
class Context:
    """``ctx`` in forward/backward; after forward it *is* the graph node (``grad_fn``).

    ``next_edges[i]`` says where the gradient of input i goes: the producing node, the leaf
    Tensor itself (AccumulateGrad), or None.
    """

    # Plain class-level defaults instead of an __init__: a node is created per op, and forward
    # may stash extra data on it (ctx.dim = ...) as in torch.
    next_edges: tuple = ()
    input_shapes: tuple = ()  # recorded for user Functions only (the engine checks them)
    needs_input_grad: tuple[bool, ...] = ()
    _saved: tuple | None = None
    _saved_versions: tuple | None = None
    _raw_saved: tuple | None = None
    # (data, version counter) of the node's own output when forward saved it (see _link)
    _saved_output: tuple | None = None
    _freed = False
    _graph_mode = False
    _raw = False
    _fn: Any = None

    def save_for_backward(self, *tensors: Any) -> None:
        self._raw_saved = tensors

    @property
    def saved_tensors(self) -> tuple:
        if self._freed:
            raise RuntimeError(
                f"Trying to backward through the graph a second time (or to read the saved "
                f"tensors of {self.name()} after they were freed). Saved tensors are freed "
                "after backward; pass retain_graph=True to the first backward() if you need "
                "to backward through the graph again."
            )
        if self._raw and not self._graph_mode:
            # Fast path for primitives: the very arrays forward saved, no Tensor wrapping.
            return self._raw_saved or ()
        if self._saved_output is not None:
            # Rebuild the output Tensor (same data, version counter and grad_fn) on demand:
            # holding the Tensor itself would make a cycle output -> grad_fn -> output.
            data, vc = self._saved_output
            out = Tensor._wrap(data, self)
            out._version_counter = vc
            return tuple([out if s is _OUTPUT else s for s in self._saved])
        return self._saved or ()

    # The node's interface for the engine and for inspection.
    @property
    def next_functions(self) -> tuple:
        return tuple(
            (e, 0) if not isinstance(e, Tensor) else (AccumulateGrad(e), 0) for e in self.next_edges
        )

    @classmethod
    def name(cls) -> str:
        return cls.__name__

    def __repr__(self) -> str:
        return f"<{self.name()}>"

    def _check_versions(self) -> None:
        if self._saved_versions is None:
            return
        if self._freed:
            self.saved_tensors  # noqa: B018  (raises the retain_graph error)
        for t, v in self._saved_versions:
            if t._version_counter[0] != v:
                raise RuntimeError(
                    "one of the variables needed for gradient computation has been modified "
                    f"by an inplace operation: a tensor of shape {t.shape} saved by "
                    f"{self.name()} is at version {t._version_counter[0]}; expected version "
                    f"{v} instead."
                )


class _SavedOutput:
    """What ``_saved_versions`` holds for a saved output: its version counter and shape, not
    the output Tensor (that would be a reference cycle)."""

    __slots__ = ("_version_counter", "shape")

    def __init__(self, vc: list, shape: tuple) -> None:
        self._version_counter, self.shape = vc, shape


_OUTPUT = object()  # marks the output's place in ctx._saved


class AccumulateGrad:
    """What ``next_functions`` shows for a leaf (the engine accumulates directly)."""

    def __init__(self, variable: Tensor) -> None:
        self.variable = variable

    def __repr__(self) -> str:
        return f"<AccumulateGrad shape={self.variable.shape}>"


# ----------------------------------------------------------------------------- Function
class Function:
    """Subclass, define static ``forward(ctx, *args)`` and ``backward(ctx, *grads)``, call
    ``MyFunction.apply(*args)``; the same contract as ``torch.autograd.Function``.

    ``backward`` returns one gradient per forward argument (None for non-tensors).
    """

    _raw = False  # True for primitives: forward/backward see ndarrays on the fast path.
    # True for ops whose output *may* share memory with input 0 (NumPy decides: a reshape of a
    # non-contiguous array copies, basic indexing views, integer-array indexing copies). For
    # those, apply checks the actual output, and a real view shares its base's version counter.
    may_view = False
    _ctx_class: type[Context] = Context

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        # Each Function gets its own node class so grad_fn prints as <MulBackward>.
        cls._ctx_class = type(
            f"{cls.__name__}Backward",
            (Context,),
            {"_fn": cls, "_raw": cls._raw},
        )

    @staticmethod
    def forward(ctx: Context, *args: Any) -> Any:
        raise NotImplementedError

    @staticmethod
    def backward(ctx: Context, *grad_outputs: Any) -> Any:
        raise NotImplementedError

    @classmethod
    def apply(cls, *args: Any) -> Tensor:
        """Run ``forward``; when grad is enabled and some input requires grad, record the node.

        The one apply for user Functions and primitives; they differ only in what forward
        sees (Tensors, under no_grad, or raw ndarrays) and in how the output is wrapped.
        While a transformation traces (minigrad.func), an op on a Tracer is recorded instead.
        """
        if TRACES:
            traced = dispatch(cls, args)
            if traced is not NotImplemented:
                return traced
        ctx = cls._ctx_class()
        record = False
        if _mode.enabled:
            needs = tuple([isinstance(a, Tensor) and a._requires_grad for a in args])
            record = True in needs
            ctx.needs_input_grad = needs
        else:
            ctx.needs_input_grad = (False,) * len(args)
        if cls._raw:
            # A NumPy scalar operand (np.float64(2)) becomes a Python number: weak, as in
            # torch, so it does not promote a float32 tensor (NumPy 2 would).
            vals = [
                a.data if isinstance(a, Tensor) else a.item() if isinstance(a, np.generic) else a
                for a in args
            ]
            out = _forward_on_arrays(cls, ctx, vals)
            result = _new_tensor(Tensor)
            # A 0-d ufunc result is a NumPy scalar: wrap a 0-d array, but keep ``out`` as
            # forward returned it, so that a saved output is still recognised by identity.
            result.data = out if type(out) is np.ndarray else np.asarray(out)
            result.grad = None
            result.grad_fn = None
            result._requires_grad = False
            result._version_counter = [0]
        else:
            vals = None
            out, result = _forward_on_tensors(cls, ctx, args)
        if cls.may_view and _shares_memory(result, args[0]):
            result._version_counter = args[
                0
            ]._version_counter  # a view shares its base's version counter
            result._view = True
        if record:
            if not cls._raw:  # so the engine can check what a user backward returns
                ctx.input_shapes = tuple([a.shape if isinstance(a, Tensor) else None for a in args])
            _link(ctx, args, needs, vals, out, result)
        return result


def _forward_on_arrays(cls: type[Function], ctx: Context, vals: list) -> Any:
    try:
        return cls.forward(ctx, *vals)
    except ValueError as e:
        shapes = [v.shape for v in vals if isinstance(v, np.ndarray)]
        raise ValueError(f"{cls.__name__}: invalid input shapes {shapes}: {e}") from e


def _forward_on_tensors(cls: type[Function], ctx: Context, args: tuple) -> tuple[Any, Tensor]:
    """A user forward runs under no_grad on Tensors; its output is wrapped afresh unless it is
    already a new, graph-free Tensor."""
    with grad_mode(False):
        out = cls.forward(ctx, *args)
    if isinstance(out, tuple):
        raise TypeError(
            f"{cls.__name__}.forward returned a tuple; minigrad Functions return exactly one Tensor"
        )
    if isinstance(out, Tensor) and out.grad_fn is None and not any(out is a for a in args):
        return out, out
    return out, Tensor._wrap(out.data if isinstance(out, Tensor) else np.asarray(out))


def _resolve_saved(raw_saved: tuple, args: tuple, vals: list | None, out: Any, result: Tensor):
    """Map what forward saved back to Tensors, so create_graph can differentiate through it."""
    if vals is not None and len(raw_saved) <= len(args):
        # The common case: forward saved its leading inputs, in order.
        for s, v in zip(raw_saved, vals, strict=False):
            if s is not v:
                break
        else:
            return args[: len(raw_saved)], False
    resolved = []
    has_output = False
    for s in raw_saved:
        if s is out or s is result:  # ``out`` as forward returned it (maybe a NumPy scalar)
            resolved.append(_OUTPUT)
            has_output = True
            continue
        if vals is not None:
            for a, v in zip(args, vals, strict=True):
                if s is v:
                    resolved.append(a)
                    break
            else:
                # An intermediate array: a constant as far as higher-order grads go.
                if isinstance(s, (np.ndarray, np.generic)):
                    s = Tensor._wrap(np.asarray(s))
                resolved.append(s)
        else:
            resolved.append(s)
    return tuple(resolved), has_output


class Primitive(Function):
    """A built-in op. ``forward`` computes on ndarrays; ``backward`` must be written with
    operators and the helpers of :mod:`minigrad.ops.array_or_tensor`, so it runs both on
    ndarrays (fast, first order) and on Tensors (recorded, when ``create_graph=True``).

    Every subclass is entered in :data:`minigrad.rules.PRIMITIVES`; later per-op rules (vmap
    batching, IR lowering, ...) attach to it in :mod:`minigrad.rules` without touching the
    engine.
    """

    _raw = True

    # True in the body of a shared base (UnaryMap, Elementwise): a kind of op, not an op.
    abstract = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("abstract", False) and not cls.__name__.startswith("_"):
            PRIMITIVES[cls.__name__] = cls


def _link(ctx: Context, args: tuple, needs: tuple, vals: tuple, out: Any, result: Tensor) -> None:
    """Record ``result`` as made by ``ctx``: its edges to the inputs and what it saved."""
    ctx.next_edges = tuple(
        [
            (a.grad_fn if a.grad_fn is not None else a) if n else None  # a node, or the leaf
            for a, n in zip(args, needs, strict=True)
        ]
    )
    raw_saved = ctx._raw_saved
    if raw_saved:
        saved, has_output = _resolve_saved(raw_saved, args, vals, out, result)
        ctx._saved = saved
        # (tensor, version at save time) for every saved Tensor, checked at backward.
        versions = [(t, t._version_counter[0]) for t in saved if isinstance(t, Tensor)]
        if has_output:  # Exp, Tanh, Softmax, ...: keep the data, not the Tensor
            ctx._saved_output = (result.data, result._version_counter)
            versions.append(
                (_SavedOutput(result._version_counter, result.shape), result._version_counter[0])
            )
        ctx._saved_versions = tuple(versions)
    result.grad_fn = ctx
    result._requires_grad = True


_new_tensor = object.__new__


def _shares_memory(result: Tensor, base: Any) -> bool:
    """Is ``result`` a view of ``base`` (so an in-place change of one changes the other)?"""
    if not isinstance(base, Tensor):
        return False
    out = result.data
    # Cheap tests first: a fresh copy owns its data; may_share_memory only compares bounds.
    return out.base is not None and np.may_share_memory(out, base.data)
