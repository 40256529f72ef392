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
* ``lower(ctx, ins, eqn) -> str``: StableHLO text for the op (minigrad.func.stablehlo).

Every rule applies primitives (``P["Mul"].apply`` or Tensor operators) to its arguments, never
NumPy on them: the arguments may be tracers of an enclosing transformation, which is what
lets ``vmap(grad(f))`` or ``jacfwd(jacrev(f))`` work without a single new rule.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minigrad.rules import PRIMITIVES as P
from minigrad.rules import register
from minigrad.tensor import Tensor


def rules_for(prim: type, **table: Callable[..., Any] | None) -> None:
    """Register the given rules (vmap=..., jvp=..., transpose=..., lower=...) for ``prim``."""
    for kind, rule in table.items():
        if rule is not None:
            register(kind, prim)(rule)


def is_array(x: Any) -> bool:
    return isinstance(x, (Tensor, np.ndarray))


def shape_of(x: Any) -> tuple[int, ...]:
    return x.shape if is_array(x) else ()


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


def unary_jvp(prim: type, derivative: Callable[..., Any]) -> Callable[..., Any]:
    """jvp of a unary map: tangent * f'(x), f' given by ``derivative(t, x, out, *params)``."""

    def rule(args: tuple, tans: tuple) -> tuple[Any, Any]:
        out = prim.apply(*args)
        t = tans[0]
        return out, None if t is None else derivative(t, args[0], out, *args[1:])

    return rule


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


class FakeCtx:
    """Stands in for ``ctx`` when a transpose rule reuses an op's own backward (for ops whose
    backward reads nothing but the saved inputs and ``needs_input_grad``)."""

    def __init__(self, saved: tuple, needs: tuple) -> None:
        self.saved_tensors, self.needs_input_grad = saved, needs
