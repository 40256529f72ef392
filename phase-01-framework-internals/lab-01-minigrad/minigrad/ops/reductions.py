"""Reductions over dims: sum, mean, max (first arg-max), amax (ties share)."""

from __future__ import annotations

from typing import Any

import numpy as np

from minigrad.function import Primitive
from minigrad.ops.array_or_tensor import exp, expand, log, reduce_sum, value
from minigrad.ops.dtypes import Cast
from minigrad.ops.rulekit import P, cmp, rules_for, shift_axis, where0
from minigrad.tensor import Tensor
from minigrad.tracer_base import is_tracer


def _kept_shape(shape: tuple[int, ...], axis: Any) -> tuple[int, ...]:
    if axis is None:
        return (1,) * len(shape)
    axes = axis if isinstance(axis, tuple) else (axis,)
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


class Sum(Primitive):
    @staticmethod
    def forward(ctx, a, axis, keepdims):
        ctx.in_shape = a.shape
        ctx.kept = _kept_shape(a.shape, axis)
        return a.sum(axis=axis, keepdims=keepdims)

    @staticmethod
    def backward(ctx, g):
        return expand(g.reshape(ctx.kept), ctx.in_shape), None, None


class Mean(Primitive):
    @staticmethod
    def forward(ctx, a, axis, keepdims):
        ctx.in_shape = a.shape
        ctx.kept = _kept_shape(a.shape, axis)
        out = a.mean(axis=axis, keepdims=keepdims)
        ctx.count = a.size // max(out.size, 1) if a.size else 1
        return out

    @staticmethod
    def backward(ctx, g):
        return expand(g.reshape(ctx.kept) / ctx.count, ctx.in_shape), None, None


def _check_reduced_dims(a: np.ndarray, axis: Any) -> None:
    """max over a size-0 dim has no value (torch raises too); over other dims of an empty
    tensor it is just empty, e.g. (0, 3) -> (0,) along dim 1."""
    if a.size:
        return
    axes = range(a.ndim) if axis is None else axis if isinstance(axis, tuple) else (axis,)
    for d in axes:
        if a.shape[d] == 0:
            raise ValueError(f"max: reduction dim {d} has size 0 (input shape {a.shape})")


class Max(Primitive):
    """Max over one ``axis`` (or all); the gradient goes to the first arg-max, as in
    torch.max(dim)."""

    @staticmethod
    def forward(ctx, a, axis, keepdims):
        _check_reduced_dims(a, axis)
        ctx.in_shape = a.shape
        ctx.kept = _kept_shape(a.shape, axis)
        if axis is None:
            mask = np.zeros(a.shape, dtype=bool)
            mask.flat[np.argmax(a)] = True
        else:
            if isinstance(axis, tuple):
                raise ValueError("max over several dims at once is not supported; use amax")
            idx = np.expand_dims(np.argmax(a, axis=axis), axis)
            mask = np.zeros(a.shape, dtype=bool)
            np.put_along_axis(mask, idx, True, axis=axis)
        ctx.mask = mask
        return a.max(axis=axis, keepdims=keepdims)

    @staticmethod
    def backward(ctx, g):
        return expand(g.reshape(ctx.kept), ctx.in_shape) * ctx.mask, None, None


class AMax(Primitive):
    """Max over ``axis`` (None, an int or a tuple); tied maxima share the gradient evenly, as
    in torch.amax and torch.max() without dim."""

    @staticmethod
    def forward(ctx, a, axis, keepdims, nan_is_max=False):
        _check_reduced_dims(a, axis)
        ctx.in_shape = a.shape
        ctx.kept = _kept_shape(a.shape, axis)
        top = a.max(axis=axis, keepdims=True)
        hits = a == top
        if nan_is_max and np.isnan(top).any():
            # torch.max() without dim (evenly_distribute_backward) routes the gradient to the
            # NaN elements; amax leaves it NaN everywhere (NaN == NaN is false: 0 / 0)
            hits = np.isnan(a)
        with np.errstate(invalid="ignore"):  # 0 / 0 -> NaN on purpose (amax of a NaN row)
            weights = hits / hits.sum(axis=axis, keepdims=True)
        ctx.weights = weights.astype(a.dtype, copy=False)
        return top if keepdims else np.squeeze(top, axis=axis)

    @staticmethod
    def backward(ctx, g):
        return expand(g.reshape(ctx.kept), ctx.in_shape) * ctx.weights, None, None, None


def _count(shape: tuple[int, ...], axis: Any) -> int:
    if axis is None:
        return int(np.prod(shape, dtype=np.int64))
    axes = axis if isinstance(axis, tuple) else (axis,)
    return int(np.prod([shape[d] for d in axes], dtype=np.int64))


class Var(Primitive):
    """Variance over ``axis`` divided by N - correction (torch.var; correction=1 is Bessel's)."""

    @staticmethod
    def forward(ctx, a, axis, correction, keepdims):
        ctx.axis, ctx.in_shape, ctx.kept = axis, a.shape, _kept_shape(a.shape, axis)
        n = _count(a.shape, axis)
        ctx.n, ctx.divisor = n, max(n - correction, 0)
        d = a - a.mean(axis=axis, keepdims=True) if a.size else a
        ctx.save_for_backward(a)
        with np.errstate(divide="ignore", invalid="ignore"):  # N <= correction: inf/nan, as torch
            return (d * d).sum(axis=axis, keepdims=keepdims) / np.asarray(ctx.divisor, a.dtype)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        d = (
            a - reduce_sum(a, ctx.axis, True) / ctx.n
        )  # recomputed: differentiable under create_graph
        with np.errstate(divide="ignore", invalid="ignore"):
            scale = 2.0 / np.asarray(ctx.divisor, dtype=value(a).dtype)
        return expand(g.reshape(ctx.kept), ctx.in_shape) * d * scale, None, None, None


class LogSumExp(Primitive):
    """log(sum(exp(a))) over ``axis``, shifted by the max so nothing overflows."""

    @staticmethod
    def forward(ctx, a, axis, keepdims):
        ctx.axis, ctx.in_shape, ctx.kept = axis, a.shape, _kept_shape(a.shape, axis)
        if a.size == 0:
            m = np.zeros(ctx.kept, a.dtype)
        else:
            m = a.max(axis=axis, keepdims=True)
            m = np.where(np.isfinite(m), m, 0).astype(a.dtype)  # all -inf: shift by 0 (torch)
        out = m + np.log(np.exp(a - m).sum(axis=axis, keepdims=True))
        ctx.shift, ctx.out = m, out
        ctx.save_for_backward(a)
        if keepdims:
            return out
        return out.reshape(()) if axis is None else np.squeeze(out, axis=axis)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        if isinstance(a, Tensor):  # create_graph: the result as a recorded function of a
            lse = log(reduce_sum(exp(a - ctx.shift), ctx.axis, True)) + ctx.shift
        else:
            lse = ctx.out
        return expand(g.reshape(ctx.kept), ctx.in_shape) * exp(a - lse), None, None


class FirstMax(Primitive):
    """A one-hot boolean mask of the first arg-max along ``axis`` (or over all), a's shape:
    where Max sends its gradient. No gradient of its own (used by Max's jvp rule)."""

    differentiable = False

    @staticmethod
    def forward(ctx, a, axis):
        mask = np.zeros(a.shape, dtype=bool)
        if a.size == 0:
            return mask
        if axis is None:
            mask.flat[np.argmax(a)] = True
        else:
            np.put_along_axis(mask, np.expand_dims(np.argmax(a, axis=axis), axis), True, axis)
        return mask

    @staticmethod
    def backward(ctx, g):
        return None, None


def std_from_var(v: Tensor) -> Tensor:
    """sqrt(var) with torch.std's gradient: 0, not nan, where the variance is 0 (a constant
    slice). The sqrt runs on 1 there and its result is masked, so no inf * 0 reaches var."""
    zero = v == 0  # a boolean array, or a traced Compare under minigrad.func
    return P["Where"].apply(zero, 0.0, P["Sqrt"].apply(P["Where"].apply(zero, 1.0, v)))


def arg_max(x: Tensor, axis: int | None, keepdim: bool, largest: bool = True) -> Tensor:
    """torch.argmax (the first maximum), or argmin. Eagerly NumPy's; on a traced tensor it
    is built from the FirstMax mask (sum of positions where it is set), so vmap/jit see
    every example's indices instead of the traced example's."""
    if not is_tracer(x):
        find = np.argmax if largest else np.argmin
        return Tensor._wrap(np.asarray(find(x.data, axis=axis, keepdims=keepdim)))
    mask = FirstMax.apply(x if largest else -x, axis)
    if axis is None:
        positions = np.arange(x.data.size).reshape(x.shape)
    else:
        positions = np.arange(x.shape[axis]).reshape((-1,) + (1,) * (x.ndim - axis - 1))
    picked = P["Where"].apply(mask, positions, 0)
    if axis is None:
        return picked.sum().reshape((1,) * x.ndim if keepdim else ())
    return P["Sum"].apply(picked, axis, keepdim)


# ----------------------------------------------------------------------------- rules
def _vmap_reduction(prim):
    """Reductions over (axis, ...): the example axes move one up; axis None means every
    example axis (Max and FirstMax, which take one axis, flatten the example first)."""

    def rule(size, args, batched):
        a, axis, *rest = args
        nd = a.ndim - 1
        if axis is None and prim in (Max, FirstMax):
            flat = P["Reshape"].apply(a, (size, -1))
            out = prim.apply(flat, 1, *rest)
            if prim is FirstMax:
                return P["Reshape"].apply(out, a.shape)
            return P["Reshape"].apply(out, (size,) + ((1,) * nd if rest[0] else ()))
        return prim.apply(a, shift_axis(axis, nd), *rest)

    return rule


def _max_jvp(args, tans):
    a, axis, keepdims = args
    out = Max.apply(a, axis, keepdims)
    mask = FirstMax.apply(a, axis)
    return out, Sum.apply(where0(mask, tans[0]), axis, keepdims)


def _amax_jvp(args, tans):
    a, axis, keepdims = args[:3]
    out = AMax.apply(*args)
    top = AMax.apply(a, axis, True)
    hits = Cast.apply(cmp(a, top, "eq"), a.dtype)
    weights = hits / Sum.apply(hits, axis, True)
    return out, Sum.apply(tans[0] * weights, axis, keepdims)


def _var_jvp(args, tans):
    a, axis, correction, keepdims = args
    out = Var.apply(*args)
    n = _count(a.shape, axis)
    centred = a - Mean.apply(a, axis, True)
    scale = 2.0 / max(n - correction, 0) if n - correction > 0 else float("inf")
    return out, Sum.apply(tans[0] * centred, axis, keepdims) * scale


def _lse_jvp(args, tans):
    a, axis, keepdims = args
    out = LogSumExp.apply(*args)
    lse = LogSumExp.apply(a, axis, True)
    return out, Sum.apply(tans[0] * exp(a - lse), axis, keepdims)


for _prim in (Sum, Mean, Max, AMax, Var, LogSumExp, FirstMax):
    rules_for(_prim, vmap=_vmap_reduction(_prim))
rules_for(Sum, linear=(0,))
rules_for(Mean, linear=(0,))
# The other reductions are not linear: their jvps are written apart from their backwards
# (a reduction's Jacobian is no diagonal that one formula could serve both directions with).
rules_for(Max, jvp=_max_jvp)
rules_for(AMax, jvp=_amax_jvp)
rules_for(Var, jvp=_var_jvp)
rules_for(LogSumExp, jvp=_lse_jvp)
rules_for(FirstMax, jvp=lambda args, tans: (FirstMax.apply(*args), None))
