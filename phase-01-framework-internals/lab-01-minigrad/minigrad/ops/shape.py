"""Shape and indexing primitives: reshape, permute, broadcast, sum_to, indexing."""

from __future__ import annotations

from typing import Any

import numpy as np

from minigrad.function import Primitive
from minigrad.ops.array_or_tensor import (
    expand,
    index_arg,
    np_sum_to,
    permute,
    sum_to,
)
from minigrad.ops.rulekit import P, align, rules_for
from minigrad.rules import RuleCtx
from minigrad.tensor import Tensor, dims_to_axis
from minigrad.tracer_base import TracingError, is_tracer


class Reshape(Primitive):
    may_view = True

    @staticmethod
    def forward(ctx, a, shape):
        ctx.in_shape = a.shape
        try:
            return a.reshape(shape)
        except ValueError:
            raise ValueError(f"cannot reshape a tensor of shape {a.shape} to {shape}") from None

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.in_shape), None


class Permute(Primitive):
    may_view = True

    @staticmethod
    def forward(ctx, a, axes):
        ctx.inverse = tuple(np.argsort(axes))
        return a.transpose(axes)

    @staticmethod
    def backward(ctx, g):
        return permute(g, ctx.inverse), None


class BroadcastTo(Primitive):
    may_view = True

    @staticmethod
    def forward(ctx, a, shape):
        ctx.in_shape = a.shape
        return np.broadcast_to(a, shape)

    @staticmethod
    def backward(ctx, g):
        return sum_to(g, ctx.in_shape), None


class SumTo(Primitive):
    @staticmethod
    def forward(ctx, a, shape):
        ctx.in_shape = a.shape
        return np_sum_to(a, shape)

    @staticmethod
    def backward(ctx, g):
        return expand(g, ctx.in_shape), None


def _is_basic_index(key: Any) -> bool:
    keys = key if isinstance(key, tuple) else (key,)
    return all(isinstance(k, (int, slice, type(None), type(Ellipsis))) for k in keys)


def _unwrap_key(key: Any) -> Any:
    keys = key if isinstance(key, tuple) else (key,)
    if any(is_tracer(k) for k in keys):  # its .data is one example's value only
        raise TracingError(
            "indexing with a traced tensor is not supported (the index would be frozen to "
            "one example's value); use gather / index_select / where"
        )
    if isinstance(key, Tensor):
        return key.data
    if isinstance(key, tuple):
        return tuple(k.data if isinstance(k, Tensor) else k for k in key)
    return key


class Index(Primitive):
    """``a[key]``: basic indexing (ints, slices, None, ...) and integer-array indexing."""

    may_view = True  # basic indexing returns a view; integer-array indexing a copy
    shape_from_values = (1,)  # a boolean key's count of True decides the output shape

    @staticmethod
    def forward(ctx, a, key):
        key = _unwrap_key(key)
        ctx.in_shape = a.shape
        ctx.key = key
        try:
            return a[key]
        except IndexError as e:
            msg = f"index {key!r} is invalid for a tensor of shape {a.shape}: {e}"
            raise IndexError(msg) from None

    @staticmethod
    def backward(ctx, g):
        return IndexBackward.apply(g, ctx.in_shape, ctx.key), None


class IndexBackward(Primitive):
    """Scatter-add ``g`` into zeros of ``shape`` at ``key`` (repeated indices accumulate)."""

    @staticmethod
    def forward(ctx, g, shape, key):
        ctx.key = key
        out = np.zeros(shape, dtype=g.dtype)
        if _is_basic_index(key):
            out[key] = g
        else:
            np.add.at(out, key, g)
        return out

    @staticmethod
    def backward(ctx, gg):
        return Index.apply(gg, ctx.key), None, None

    @classmethod
    def apply(cls, g: Any, shape: tuple[int, ...], key: Any) -> Any:  # type: ignore[override]
        if isinstance(g, Tensor):
            return super().apply(g, shape, key)
        return cls.forward(RuleCtx(), g, shape, key)  # fast path: plain NumPy


# ----------------------------------------------------------------------------- composed views
# torch's split/chunk/index_select/gather front ends: argument handling, then Index / Gather.
def split(x: Tensor, split_size_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
    """Views along ``dim``: pieces of ``split_size`` (the last may be smaller), or of the given
    sizes. Each piece is a recorded slice, so its gradient flows back to ``x``."""
    d = dims_to_axis(dim, x.ndim)
    length = x.shape[d] if x.ndim else 1
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step <= 0 and not (step == 0 and length == 0):
            raise ValueError(f"split: split_size must be positive, got {step}")
        sizes = [min(step, length - i) for i in range(0, length, step)] if length else [0]
    else:
        sizes = list(split_size_or_sections)
        if sum(sizes) != length:
            raise ValueError(f"split: sizes {sizes} do not add up to dim {dim}'s {length}")
    pieces, start = [], 0
    for size in sizes:
        key = (slice(None),) * d + (slice(start, start + size),)
        pieces.append(Index.apply(x, key))
        start += size
    return tuple(pieces)


def chunk(x: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    if chunks <= 0:
        raise ValueError(f"chunk: chunks must be positive, got {chunks}")
    length = x.shape[dims_to_axis(dim, x.ndim)] if x.ndim else 1
    return split(x, max(-(-length // chunks), 1), dim)


def index_select(x: Tensor, dim: int, index: Any) -> Tensor:
    idx = index_arg(index)
    if idx.ndim > 1:
        raise ValueError(f"index_select: index must be 0-d or 1-d, got shape {idx.shape}")
    if is_tracer(idx) and x.ndim:  # a traced index (vmap over it) must stay traced
        d, flat = dims_to_axis(dim, x.ndim), idx.reshape(-1)
        shape = x.shape[:d] + flat.shape + x.shape[d + 1 :]
        full = flat.reshape((1,) * d + (-1,) + (1,) * (x.ndim - d - 1)).expand(*shape)
        return P["Gather"].apply(x, d, full)
    if x.ndim == 0:
        return Index.apply(x.reshape(1), (idx.reshape(-1),)).reshape(())
    d = dims_to_axis(dim, x.ndim)
    return Index.apply(x, (slice(None),) * d + (idx.reshape(-1),))


# ----------------------------------------------------------------------------- rules
def _example_shape(shape: tuple[int, ...], size: int) -> tuple[int, ...]:
    """``shape`` with a -1 resolved for an example of ``size`` elements."""
    return np.empty(size, dtype=np.int8).reshape(shape).shape if -1 in shape else tuple(shape)


def _reshape_vmap(size, args, batched):
    a, shape = args
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    ex = _example_shape(shape, int(np.prod(a.shape[1:], dtype=np.int64)))
    return Reshape.apply(a, (size,) + ex)


def _permute_vmap(size, args, batched):
    a, axes = args
    return Permute.apply(a, (0,) + tuple(ax % len(axes) + 1 for ax in axes))


def _broadcast_vmap(size, args, batched):
    a, shape = args
    return BroadcastTo.apply(align(a, True, len(shape)), (size,) + tuple(shape))


def _sum_to_vmap(size, args, batched):
    a, shape = args
    lead = a.ndim - 1 - len(shape)
    if lead:
        a = P["Sum"].apply(a, tuple(range(1, lead + 1)), False)
    return SumTo.apply(a, (size,) + tuple(shape))


def _batched_key(key: Any) -> tuple | None:
    """The index key of a batched value, or None where NumPy would move the indexed dims
    (advanced indices split by a slice), which the per-example fallback handles."""
    key = key if isinstance(key, tuple) else (key,)
    advanced = [i for i, k in enumerate(key) if isinstance(k, (np.ndarray, list, Tensor))]
    if advanced and advanced[-1] - advanced[0] + 1 != len(advanced):
        return None
    return (slice(None),) + key


def _per_example(prim, size, args, batched):
    outs = [
        prim.apply(*[Index.apply(x, i) if b else x for x, b in zip(args, batched, strict=True)])
        for i in range(size)
    ]
    return P["Stack"].apply(0, *outs)


def _index_vmap(size, args, batched):
    a, key = args
    new_key = None if batched[1] else _batched_key(_unwrap_key(key))
    if new_key is None:
        return _per_example(Index, size, args, batched)
    return Index.apply(a, new_key)


def _index_backward_vmap(size, args, batched):
    g, shape, key = args
    new_key = None if batched[2] else _batched_key(key)
    if new_key is None or not batched[0]:
        return _per_example(IndexBackward, size, args, batched)
    return IndexBackward.apply(g, (size,) + tuple(shape), new_key)


# Each is linear in its tensor input: jvp applies the op to the tangent, the transpose is the
# backward (see rulekit.transpose_from_backward).
rules_for(Reshape, linear=(0,), vmap=_reshape_vmap)
rules_for(Permute, linear=(0,), vmap=_permute_vmap)
rules_for(BroadcastTo, linear=(0,), vmap=_broadcast_vmap)
rules_for(SumTo, linear=(0,), vmap=_sum_to_vmap)
rules_for(Index, linear=(0,), vmap=_index_vmap)
rules_for(IndexBackward, linear=(0,), vmap=_index_backward_vmap)
