"""Joining and selecting: cat, stack, gather (and its scatter-add), where-style fills,
embedding lookups. Each backward routes the gradient back to the elements that were picked."""

from __future__ import annotations

from typing import Any

import numpy as np

from minigrad.function import Primitive
from minigrad.ops.dual import cast, reduce_sum, sum_to
from minigrad.ops.shape import IndexBackward, _Scratch
from minigrad.tensor import Tensor, _norm_dim


def _along(dim: int, ndim: int, index: Any) -> tuple:
    """The indexing key that picks ``index`` along ``dim`` (a slice or an int)."""
    return (slice(None),) * dim + (index,) + (slice(None),) * (ndim - dim - 1)


class Cat(Primitive):
    """``torch.cat(tensors, dim)``, applied as ``Cat.apply(dim, *tensors)``."""

    @staticmethod
    def forward(ctx, dim, *arrays):
        arrays = [np.asarray(a) for a in arrays]
        # torch's legacy rule: a 1-D empty tensor is skipped beside tensors of another rank
        ndim = max(a.ndim for a in arrays)
        skipped = [a.shape == (0,) and ndim > 1 for a in arrays]
        kept = [a for a, skip in zip(arrays, skipped, strict=True) if not skip]
        out = np.concatenate(kept, axis=dim) if kept else np.zeros((0,), arrays[0].dtype)
        ctx.dim, ctx.ndim, ctx.skipped = dim, out.ndim, skipped
        ctx.sizes = [0 if skip else a.shape[dim] for a, skip in zip(arrays, skipped, strict=True)]
        ctx.dtypes = [a.dtype for a in arrays]
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
        arrays = [np.asarray(a) for a in arrays]
        out = np.stack(arrays, axis=dim)
        ctx.dim, ctx.ndim, ctx.dtypes = dim, out.ndim, [a.dtype for a in arrays]
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
        return cls.forward(_Scratch(), g, *args)  # fast path: plain NumPy


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
    idx = index.data if isinstance(index, Tensor) else np.asarray(index)
    return Gather.apply(x, _norm_dim(dim, x.ndim) if x.ndim else 0, idx)
