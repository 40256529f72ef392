"""What the per-primitive rules are written with (the rules sit beside each op family).

Four rule kinds, each a table in :mod:`minigrad.rules` keyed by primitive:

* ``vmap(B, args, batched) -> out``: ``args`` as the op was applied, the batched ones with the
  batch as their leading dim (``batched[i]`` says which); returns the batched output (batch
  leading). The interpreter (minigrad.func.vmap) moves user axes to 0 and back.
* ``jvp(args, tangents) -> (out, tangent)``: ``tangents[i]`` is None for a zero tangent; the
  tangent is built only with *linear* ops of the tangents (see ``transpose``).
* ``transpose(ct, args, linear, avals) -> cts``: for an op that is linear in the inputs marked
  ``linear`` (the others are known values), the cotangent of each linear input. Reverse mode is
  jvp (with the tangent side traced) followed by transposition, so only the ops that jvp
  rules apply to tangents need one.
* ``lower(em, eqn, ins) -> str``: StableHLO text for the op (minigrad.func.stablehlo); or a
  :class:`Decomposition`: the op written with simpler primitives, lowered inline.

Most rules are not written by hand but derived from one declaration (as PyTorch's
``derivatives.yaml`` and JAX's ``defvjp`` / ``def_linear`` do):

* an elementwise map declares its derivative once (``chain`` / ``partials`` in
  :mod:`minigrad.ops.elementwise`): its Jacobian is diagonal, so the same formula gives the
  backward (applied to a cotangent), the jvp (applied to a tangent) and, for the inputs it is
  linear in, the transpose;
* an op linear in some inputs declares them (``rules_for(prim, linear=(0,))``): its jvp is the
  op applied to the tangents, and its transpose is its own ``backward``
  (:func:`transpose_from_backward`).

Every rule applies primitives (``P["Mul"].apply`` or Tensor operators) to its arguments, never
NumPy on them: the arguments may be tracers of an enclosing transformation, which is what
lets ``vmap(grad(f))`` or ``jacfwd(jacrev(f))`` work without a single new rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minigrad.ops.array_or_tensor import shape_of
from minigrad.rules import PRIMITIVES as P
from minigrad.rules import RuleCtx, register
from minigrad.tensor import Tensor


def rules_for(
    prim: type, linear: tuple[int, ...] | None = None, **table: Callable[..., Any] | None
) -> None:
    """Register the given rules (vmap=..., jvp=..., transpose=..., lower=...) for ``prim``.

    ``linear=(i, ...)`` declares the op linear in those inputs (the others static or
    constant): jvp and transpose are then derived, unless given.
    """
    if linear is not None:
        table.setdefault("jvp", linear_jvp(prim, linear))
        table.setdefault("transpose", transpose_from_backward(prim))
    for kind, rule in table.items():
        if rule is not None:
            register(kind, prim)(rule)


def is_array(x: Any) -> bool:
    return isinstance(x, (Tensor, np.ndarray))


# ----------------------------------------------------------------------------- vmap helpers
def ex_ndim(x: Any, batched: bool) -> int:
    """Rank of one example of ``x``."""
    return len(shape_of(x)) - (1 if batched else 0)


def align(x: Any, batched: bool, rank: int) -> Any:
    """A batched ``x`` of example rank < ``rank`` gets unit dims after the batch dim, so that
    right-aligned broadcasting lines its example dims up with the others'."""
    if not batched:
        return x
    ex = x.shape[1:]
    if len(ex) >= rank:
        return x
    return P["Reshape"].apply(x, (x.shape[0],) + (1,) * (rank - len(ex)) + ex)


def to_batched(x: Any, batched: bool, size: int) -> Any:
    """``x`` with a leading batch dim (an unbatched value repeated, as a broadcast view)."""
    if batched:
        return x
    if isinstance(x, Tensor):
        return P["BroadcastTo"].apply(x, (size,) + x.shape)
    return np.broadcast_to(np.asarray(x), (size,) + np.shape(x))


def vmap_elementwise(prim: type, positions: tuple[int, ...]) -> Callable[..., Any]:
    """The batching rule of a broadcasting elementwise op over the args at ``positions``."""

    def rule(size: int, args: tuple, batched: tuple) -> Any:
        rank = max(ex_ndim(args[i], batched[i]) for i in positions)
        new = list(args)
        for i in positions:
            new[i] = align(args[i], batched[i], rank)
        return prim.apply(*new)

    return rule


def shift_axis(axis: Any, ex_rank: int) -> Any:
    """A per-example reduction axis (None, int or tuple) as an axis of the batched value."""
    if axis is None:
        return tuple(range(1, ex_rank + 1))
    if isinstance(axis, tuple):
        return tuple(a % max(ex_rank, 1) + 1 for a in axis)
    return axis % max(ex_rank, 1) + 1


# ----------------------------------------------------------------------------- jvp helpers
def cmp(a: Any, b: Any, op: str) -> Any:
    """A boolean mask ``a <op> b`` as a (traceable) Compare op."""
    return P["Compare"].apply(a, b, op)


def where0(cond: Any, t: Any) -> Any:
    """``t`` where ``cond``, else 0 (a linear op of t)."""
    return P["Where"].apply(cond, t, 0.0)


def bcast(t: Any, shape: tuple[int, ...]) -> Any:
    if t is None or t.shape == shape:
        return t
    return P["BroadcastTo"].apply(t, shape)


def tangent_sum(terms: list, shape: tuple[int, ...]) -> Any:
    """The sum of the non-None tangent terms, broadcast to ``shape`` (None if all are None)."""
    total = None
    for t in terms:
        if t is not None:
            total = t if total is None else total + t
    return bcast(total, shape)


def linear_jvp(prim: type, positions: tuple[int, ...]) -> Callable[..., Any]:
    """jvp of an op linear in the args at ``positions`` (the others static): the op itself
    applied to the tangents (zeros for a missing one)."""

    def rule(args: tuple, tans: tuple) -> tuple[Any, Any]:
        out = prim.apply(*args)
        new = list(args)
        for i in positions:
            t = tans[i]
            new[i] = t if t is not None else zeros(args[i])
        return out, prim.apply(*new)

    return rule


def zeros(x: Any) -> Tensor:
    return Tensor._wrap(np.zeros(shape_of(x), dtype=getattr(x, "dtype", np.float64)))


def transpose_from_backward(prim: type) -> Callable[..., Any]:
    """The transpose rule of an op linear in the inputs ``linear`` marks: its own backward.

    The backward of a linear op, applied to a cotangent, *is* its transpose. It reads what
    forward left on ``ctx`` (shapes, axes, the saved inputs), so forward runs first on
    stand-ins (zeros for the linear inputs, the known values for the others); the saved
    arrays are then mapped back to the values they stand for, so that the backward records
    on them (they may be tracers of an enclosing transformation). Fit for ops whose ``ctx``
    attributes depend on shapes and static arguments only, not on array values.
    """

    def rule(ct: Any, args: tuple, linear: tuple, avals: tuple) -> tuple:
        raw, stands_for = [], {}
        for a, lin, aval in zip(args, linear, avals, strict=True):
            if lin:
                a = Tensor._wrap(np.zeros(aval[0], aval[1]))
            if isinstance(a, Tensor):
                stands_for[id(a.data)] = a
                a = a.data
            raw.append(a)
        ctx = RuleCtx()
        prim.forward(ctx, *raw)
        ctx.saved_tensors = tuple(stands_for.get(id(s), s) for s in ctx.saved_tensors)
        ctx.needs_input_grad = tuple(linear)
        cts = prim.backward(ctx, ct if isinstance(ct, Tensor) else Tensor._wrap(np.asarray(ct)))
        return cts if isinstance(cts, tuple) else (cts,)

    return rule


class Decomposition:
    """A ``lower`` rule given as a function of simpler primitives (same arguments as the op):
    the emitter traces and lowers it inline. A declaration only, so an op family can state
    its lowering without loading the emitter (``import minigrad`` loads no lowering code)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        self.fn = fn
