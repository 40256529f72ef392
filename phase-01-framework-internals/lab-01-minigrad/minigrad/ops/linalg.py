"""Matrix products: matmul with NumPy's 1-D and batch rules, and the fused Linear."""

from __future__ import annotations

import numpy as np

from minigrad.function import Primitive
from minigrad.ops.array_or_tensor import (
    reduce_sum,
    sum_to,
)
from minigrad.ops.rulekit import (
    P,
    align,
    ex_ndim,
    rules_for,
    tangent_sum,
    transpose_from_backward,
)


class MatMul(Primitive):
    """``a @ b`` with NumPy semantics: 1-D operands and broadcast batch dims."""

    @staticmethod
    def forward(ctx, a, b):
        if np.ndim(a) == 0 or np.ndim(b) == 0:
            raise ValueError("matmul needs operands with at least 1 dim (use * for scalars)")
        # torch refuses mixed dtypes too, rather than promoting a float32 model to float64
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype != b.dtype:
            raise RuntimeError(
                f"expected m1 and m2 to have the same dtype, but got: {a.dtype} != {b.dtype}"
            )
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        na, nb = ctx.needs_input_grad
        if a.ndim == 2 and b.ndim == 2:  # the common case, without reshapes
            return (g @ b.mT if na else None, a.mT @ g if nb else None)
        if a.ndim == 1 and b.ndim == 1:
            return (g * b if na else None, g * a if nb else None)
        # Promote 1-D operands to matrices as NumPy does, then undo the promotion.
        a2 = a.reshape((1, a.shape[0])) if a.ndim == 1 else a
        b2 = b.reshape((b.shape[0], 1)) if b.ndim == 1 else b
        g2 = g
        if a.ndim == 1:
            g2 = g2.reshape(g2.shape[:-1] + (1, g2.shape[-1]))
        if b.ndim == 1:
            g2 = g2.reshape(g2.shape + (1,))
        ga = sum_to(g2 @ b2.mT, a2.shape).reshape(a.shape) if na else None
        gb = sum_to(a2.mT @ g2, b2.shape).reshape(b.shape) if nb else None
        return ga, gb


class Linear(Primitive):
    """``x @ weight.T + bias`` fused (torch's layout: weight is (out, in))."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        if weight.ndim != 2 or x.shape[-1] != weight.shape[1]:
            raise ValueError(
                f"linear: input of shape {x.shape} does not fit weight of shape "
                f"{weight.shape} (expects (..., {weight.shape[-1]}))"
            )
        if isinstance(x, np.ndarray) and x.dtype != weight.dtype:  # as torch: no promotion
            raise RuntimeError(
                f"linear: input and weight must have the same dtype, got {x.dtype} and "
                f"{weight.dtype}"
            )
        ctx.save_for_backward(x, weight)
        out = x @ weight.T
        if bias is not None:
            out += bias  # in place: out is a fresh array, saves one allocation
        return out

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        nx, nw, nb = ctx.needs_input_grad
        if x.ndim != 2:
            g2 = g.reshape((-1, g.shape[-1]))
            x2 = x.reshape((-1, x.shape[-1]))
        else:
            g2, x2 = g, x
        gx = g @ w if nx else None
        gw = g2.mT @ x2 if nw else None
        gb = reduce_sum(g2, 0, False) if nb else None
        return gx, gw, gb


# ----------------------------------------------------------------------------- rules
def _matmul_vmap(size, args, batched):
    """Promote 1-D examples to matrices, give both the same example rank (unit batch dims
    after the vmap dim), multiply, and drop the promoted dims again."""
    a, b = args
    ba, bb = batched
    ra, rb = ex_ndim(a, ba), ex_ndim(b, bb)
    if ra == 1:
        a = P["Reshape"].apply(a, a.shape[:-1] + (1, a.shape[-1]))
    if rb == 1:
        b = P["Reshape"].apply(b, b.shape + (1,))
    rank = max(ex_ndim(a, ba), ex_ndim(b, bb))
    a, b = align(a, ba, rank), align(b, bb, rank)
    out = MatMul.apply(a, b)
    if ra == 1:
        out = P["Reshape"].apply(out, out.shape[:-2] + out.shape[-1:])
    if rb == 1:
        out = P["Reshape"].apply(out, out.shape[:-1])
    return out


def _matmul_jvp(args, tans):
    a, b = args
    out = MatMul.apply(a, b)
    ta, tb = tans
    terms = [None if ta is None else MatMul.apply(ta, b), None if tb is None else a @ tb]
    return out, tangent_sum(terms, out.shape)


def _linear_vmap(size, args, batched):
    x, w, bias = args
    bx, bw, bb = batched
    if not bw and not bb:
        return Linear.apply(x, w, bias)
    wt = P["Permute"].apply(w, (0, 2, 1)) if bw else P["Permute"].apply(w, (1, 0))
    if bx or bw:
        y = _matmul_vmap(size, (x, wt), (bx, bw))
        rank = ex_ndim(y, True)
    else:  # only the bias is batched: x @ w.T is shared, with a unit batch dim
        y = MatMul.apply(x, wt)
        rank = y.ndim
        y = P["Reshape"].apply(y, (1,) + y.shape)
    if bias is None:
        return y
    return y + align(bias, bb, rank)


def _linear_jvp(args, tans):
    x, w, b = args
    out = Linear.apply(x, w, b)
    tx, tw, tb = tans
    terms = [
        None if tx is None else Linear.apply(tx, w, None),
        None if tw is None else Linear.apply(x, tw, None),
        tb,
    ]
    return out, tangent_sum(terms, out.shape)


# Bilinear: jvp is the product rule (the op applied to one tangent at a time); in each
# operand, the other held constant, the op is linear and its transpose is its backward.
rules_for(MatMul, vmap=_matmul_vmap, jvp=_matmul_jvp, transpose=transpose_from_backward(MatMul))
rules_for(Linear, vmap=_linear_vmap, jvp=_linear_jvp, transpose=transpose_from_backward(Linear))
