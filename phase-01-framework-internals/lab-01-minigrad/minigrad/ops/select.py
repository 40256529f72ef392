"""Joining and selecting: cat, stack, gather (and its scatter-add), where-style fills,
embedding lookups. Each backward routes the gradient back to the elements that were picked."""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from minigrad.function import Primitive
from minigrad.ops.array_or_tensor import cast, index_arg, reduce_sum, sum_to, value
from minigrad.ops.dtypes import promote_types
from minigrad.ops.rulekit import (
    P,
    align,
    bcast,
    ex_ndim,
    rules_for,
    tangent_sum,
    to_batched,
    transpose_from_backward,
    zeros,
)
from minigrad.ops.shape import IndexBackward
from minigrad.rules import RuleCtx
from minigrad.tensor import Tensor, dims_to_axis
from minigrad.tracer_base import is_tracer


def _along(dim: int, ndim: int, index: Any) -> tuple:
    """The indexing key that picks ``index`` along ``dim`` (a slice or an int)."""
    return (slice(None),) * dim + (index,) + (slice(None),) * (ndim - dim - 1)


def _promoted(arrays: list) -> list[np.ndarray]:
    """The arrays in their common dtype by torch's rule (int64 with float32 is float32, where
    NumPy would give float64)."""
    arrays = [np.asarray(a) for a in arrays]
    dtype = functools.reduce(promote_types, [a.dtype for a in arrays])
    return [a if a.dtype == dtype else a.astype(dtype) for a in arrays]


class Cat(Primitive):
    """``torch.cat(tensors, dim)``, applied as ``Cat.apply(dim, *tensors)``."""

    @staticmethod
    def forward(ctx, dim, *arrays):
        ctx.dtypes = [np.asarray(a).dtype for a in arrays]
        arrays = _promoted(arrays)
        # torch's legacy rule: a 1-D empty tensor is skipped beside tensors of another rank
        ndim = max(a.ndim for a in arrays)
        skipped = [a.shape == (0,) and ndim > 1 for a in arrays]
        kept = [a for a, skip in zip(arrays, skipped, strict=True) if not skip]
        out = np.concatenate(kept, axis=dim) if kept else np.zeros((0,), arrays[0].dtype)
        ctx.dim, ctx.ndim, ctx.skipped = dim, out.ndim, skipped
        ctx.sizes = [0 if skip else a.shape[dim] for a, skip in zip(arrays, skipped, strict=True)]
        return out

    @staticmethod
    def backward(ctx, g):
        grads, start = [None], 0
        needs = ctx.needs_input_grad[1:]
        for size, dtype, need, skip in zip(ctx.sizes, ctx.dtypes, needs, ctx.skipped, strict=True):
            if not need:
                grads.append(None)
            elif skip:
                grads.append(cast(g.reshape(-1)[:0], dtype))  # the empty gradient, shape (0,)
            else:
                piece = g[_along(ctx.dim, ctx.ndim, slice(start, start + size))]
                grads.append(cast(piece, dtype))
            start += size
        return tuple(grads)


class Stack(Primitive):
    """``torch.stack(tensors, dim)``, applied as ``Stack.apply(dim, *tensors)``."""

    @staticmethod
    def forward(ctx, dim, *arrays):
        ctx.dtypes = [np.asarray(a).dtype for a in arrays]
        out = np.stack(_promoted(arrays), axis=dim)
        ctx.dim, ctx.ndim = dim, out.ndim
        return out

    @staticmethod
    def backward(ctx, g):
        needs = ctx.needs_input_grad[1:]
        return (None,) + tuple(
            cast(g[_along(ctx.dim, ctx.ndim, i)], dt) if need else None
            for i, (dt, need) in enumerate(zip(ctx.dtypes, needs, strict=True))
        )


def _gather_key(index: np.ndarray, dim: int) -> tuple:
    """Full index arrays: position i of ``index`` reads ``[..., index[i], ...]`` along dim."""
    grid = list(np.indices(index.shape, sparse=True))
    grid[dim] = index
    return tuple(grid)


class Gather(Primitive):
    """``torch.gather(a, dim, index)``: out[i][j] = a[index[i][j]][j] (for dim 0)."""

    @staticmethod
    def forward(ctx, a, dim, index):
        index = np.asarray(index)
        if index.dtype.kind not in "iu":
            raise TypeError(f"gather: index must be an integer tensor, got {index.dtype}")
        a1, i1 = a.reshape(a.shape or (1,)), index.reshape(index.shape or (1,))
        ctx.in_shape, ctx.dim, ctx.index = a.shape, dim, index
        if index.size == 0:  # torch accepts an empty index of any rank: an empty result
            ctx.key = None
            return np.zeros(index.shape, a.dtype)
        if a1.ndim != i1.ndim:
            raise ValueError(f"gather: index {index.shape} and input {a.shape} differ in rank")
        if i1.size and (i1.min() < -a1.shape[dim] or i1.max() >= a1.shape[dim]):
            raise IndexError(f"gather: index out of range for dim {dim} of size {a1.shape[dim]}")
        ctx.key = _gather_key(i1 % max(a1.shape[dim], 1), dim)
        return a1[ctx.key].reshape(index.shape)

    @staticmethod
    def backward(ctx, g):
        return ScatterAdd.apply(g, ctx.in_shape, ctx.dim, ctx.index, ctx.key), None, None


class ScatterAdd(Primitive):
    """Gather's backward: add ``g`` into zeros of ``shape`` at the gathered positions."""

    @staticmethod
    def forward(ctx, g, shape, dim, index, key):
        ctx.dim, ctx.index = dim, index
        out = np.zeros(shape or (1,), dtype=g.dtype)
        if key is not None:  # None: an empty index, nothing was gathered
            np.add.at(out, key, np.reshape(g, index.shape or (1,)))
        return out.reshape(shape)

    @staticmethod
    def backward(ctx, gg):
        return Gather.apply(gg, ctx.dim, ctx.index), None, None, None, None

    @classmethod
    def apply(cls, g: Any, *args: Any) -> Any:  # type: ignore[override]
        if isinstance(g, Tensor):
            return super().apply(g, *args)
        return cls.forward(RuleCtx(), g, *args)  # fast path: plain NumPy


class MaskedFill(Primitive):
    """``a.masked_fill(mask, value)``; a 0-dim tensor ``value`` gets the masked gradient sum."""

    @staticmethod
    def forward(ctx, a, mask, value):
        mask = np.asarray(mask)
        if mask.dtype != bool:
            raise TypeError(
                f"masked_fill only supports boolean masks, but got mask of {mask.dtype}"
            )
        if np.ndim(value) != 0:
            raise ValueError(
                "masked_fill only supports a 0-dimensional value tensor, but got tensor with "
                f"{np.ndim(value)} dimension(s)"
            )
        ctx.mask, ctx.shape = mask, a.shape
        # out of place, torch broadcasts the input against the mask too
        return np.where(mask, np.asarray(value).astype(a.dtype), a)

    @staticmethod
    def backward(ctx, g):
        na, _, nv = ctx.needs_input_grad
        ga = sum_to(g * ~ctx.mask, ctx.shape) if na else None
        gv = reduce_sum(g * ctx.mask, None, False) if nv else None
        return ga, None, gv


class Embedding(Primitive):
    """Rows of ``weight`` at integer ``indices``; the ``padding_idx`` row gets no gradient."""

    @staticmethod
    def forward(ctx, indices, weight, padding_idx):
        indices = np.asarray(indices)
        if indices.dtype.kind not in "iu":
            raise TypeError(f"embedding: indices must be integers, got {indices.dtype}")
        n = weight.shape[0]
        if indices.size and (indices.min() < 0 or indices.max() >= n):
            raise IndexError(f"embedding: index out of range for a table of {n} rows")
        ctx.indices, ctx.shape, ctx.padding_idx = indices, weight.shape, padding_idx
        return weight[indices]

    @staticmethod
    def backward(ctx, g):
        gw = IndexBackward.apply(g, ctx.shape, ctx.indices)
        if ctx.padding_idx is not None:
            keep = np.ones((ctx.shape[0],) + (1,) * (len(ctx.shape) - 1), dtype=bool)
            keep[ctx.padding_idx] = False
            gw = gw * keep
        return None, gw, None


def gather(x: Tensor, dim: int, index: Any) -> Tensor:
    return Gather.apply(x, dims_to_axis(dim, x.ndim) if x.ndim else 0, index_arg(index))


# ----------------------------------------------------------------------------- rules
def _join_vmap(prim):
    """cat/stack: every piece gets the batch dim (unbatched ones repeated), dim moves up."""

    def rule(size, args, batched):
        dim, *xs = args
        pieces = [to_batched(x, b, size) for x, b in zip(xs, batched[1:], strict=True)]
        return prim.apply(dim + 1, *pieces)

    return rule


def _join_jvp(prim):
    def rule(args, tans):
        dim, *xs = args
        out = prim.apply(*args)
        ts = [t if t is not None else zeros(x) for x, t in zip(xs, tans[1:], strict=True)]
        return out, prim.apply(dim, *ts)

    return rule


def _scatter_add(g: Any, shape: tuple, dim: int, index: Any) -> Any:
    """Gather's transpose: ScatterAdd with the key Gather's forward computes from ``index``."""
    idx = np.asarray(value(index))
    i1 = idx.reshape(idx.shape or (1,))
    key = None if idx.size == 0 else _gather_key(i1 % max((shape or (1,))[dim], 1), dim)
    return ScatterAdd.apply(g, shape, dim, index, key)


def _gather_vmap(size, args, batched):
    a, dim, index = args
    a, index = to_batched(a, batched[0], size), to_batched(index, batched[2], size)
    return Gather.apply(a, dim + 1, index)


def _scatter_vmap(size, args, batched):
    g, shape, dim, index, _ = args
    g, index = to_batched(g, batched[0], size), to_batched(index, batched[3], size)
    return _scatter_add(g, (size,) + tuple(shape), dim + 1, index)


def _masked_fill_vmap(size, args, batched):
    a, mask, fill = args
    if not batched[2]:
        rank = max(ex_ndim(a, batched[0]), ex_ndim(mask, batched[1]))
        return MaskedFill.apply(align(a, batched[0], rank), align(mask, batched[1], rank), fill)
    rank = max(ex_ndim(a, batched[0]), ex_ndim(mask, batched[1]))
    fill = P["Cast"].apply(align(fill, True, rank), a.dtype)
    mask, a = align(mask, batched[1], rank), align(a, batched[0], rank)
    return P["Where"].apply(mask, fill, a)


def _masked_fill_jvp(args, tans):
    a, mask, fill = args
    out = MaskedFill.apply(*args)
    ta, _, tv = tans
    terms = [None if ta is None else MaskedFill.apply(ta, mask, 0.0)]
    if tv is not None:
        terms.append(P["Where"].apply(mask, tv, 0.0))
    return out, bcast(tangent_sum(terms, out.shape), out.shape)


def _masked_fill_transpose(ct, args, linear, avals):
    a, mask, _ = args
    ga = sum_to(MaskedFill.apply(ct, mask, 0.0), avals[0][0]) if linear[0] else None
    gv = P["Sum"].apply(P["Where"].apply(mask, ct, 0.0), None, False) if linear[2] else None
    return ga, None, gv


def _embedding_vmap(size, args, batched):
    ids, weight, pad = args
    if not batched[1]:
        return Embedding.apply(ids, weight, pad)
    ids = np.asarray(value(to_batched(ids, batched[0], size)))
    rows = np.arange(size).reshape((size,) + (1,) * (ids.ndim - 1))
    return P["Index"].apply(weight, (rows, ids))


def _embedding_transpose(ct, args, linear, avals):
    ids, _, pad = args
    shape = avals[1][0]
    if is_tracer(ids):  # traced ids (vmap(grad) over tokens): a ScatterAdd that
        # records them, so the batching rule sees every example's ids, not the first's
        rows = ct.reshape(-1, shape[-1]) if len(shape) == 2 else ct.reshape(-1)
        index = ids.reshape(-1, 1).expand(*rows.shape) if len(shape) == 2 else ids.reshape(-1)
        gw = _scatter_add(rows, shape, 0, index)
    else:
        gw = IndexBackward.apply(ct, shape, np.asarray(ids))
    if pad is not None:  # as torch: the padding row gets no gradient
        keep = np.ones((shape[0],) + (1,) * (len(shape) - 1), dtype=bool)
        keep[pad] = False
        gw = P["Where"].apply(keep, gw, 0.0)
    return None, gw, None


# cat / stack are linear in every piece; the transpose is the backward.
for _prim in (Cat, Stack):
    rules_for(
        _prim,
        vmap=_join_vmap(_prim),
        jvp=_join_jvp(_prim),
        transpose=transpose_from_backward(_prim),
    )
# Gather, ScatterAdd, MaskedFill and Embedding are linear too, but their backwards read the
# index or mask as an array kept on ctx; the transposes below take it as an operand instead,
# so that a traced (batched) index or mask stays traced.
rules_for(
    Gather,
    vmap=_gather_vmap,
    linear=(0,),
    transpose=lambda ct, args, lin, avals: (_scatter_add(ct, avals[0][0], *args[1:]), None, None),
)
rules_for(
    ScatterAdd,
    vmap=_scatter_vmap,
    linear=(0,),
    transpose=lambda ct, args, lin, avals: (Gather.apply(ct, args[2], args[3]),) + (None,) * 4,
)
rules_for(
    MaskedFill,
    vmap=_masked_fill_vmap,
    jvp=_masked_fill_jvp,
    transpose=_masked_fill_transpose,
)
rules_for(
    Embedding,
    vmap=_embedding_vmap,
    linear=(1,),
    transpose=_embedding_transpose,
)
