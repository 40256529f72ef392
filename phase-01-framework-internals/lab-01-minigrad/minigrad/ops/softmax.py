"""The softmax family: softmax, log_softmax and the fused cross-entropy loss."""

from __future__ import annotations

import numpy as np

from minigrad.function import Primitive
from minigrad.ops.array_or_tensor import (
    exp,
    np_softmax,
    reduce_sum,
    softmax,
)
from minigrad.ops.rulekit import P, rules_for, to_batched
from minigrad.tensor import Tensor


class Softmax(Primitive):
    @staticmethod
    def forward(ctx, a, axis):
        ctx.axis = axis
        out = np_softmax(a, axis)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return y * (g - reduce_sum(g * y, ctx.axis, True)), None


class LogSoftmax(Primitive):
    @staticmethod
    def forward(ctx, a, axis):
        ctx.axis = axis
        if a.size == 0:  # nothing to normalise (NumPy's max would have no identity)
            out = a.copy()
        else:
            shifted = a - a.max(axis=axis, keepdims=True)
            out = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g - exp(out) * reduce_sum(g, ctx.axis, True), None


def _target_out_of_bounds(target: np.ndarray, n_classes: int) -> IndexError:
    """torch's message, naming the first bad target and where it sits."""
    bad = np.flatnonzero((target < 0) | (target >= n_classes))[0]
    return IndexError(
        f"cross_entropy: Target {target.flat[bad]} is out of bounds (target[{bad}]; "
        f"class ids must lie in [0, {n_classes - 1}])"
    )


class CrossEntropy(Primitive):
    """Fused log_softmax + negative log-likelihood over class logits of shape (N, C)."""

    @staticmethod
    def forward(ctx, logits, target, reduction):
        if logits.ndim != 2:
            raise ValueError(f"cross_entropy expects logits of shape (N, C), got {logits.shape}")
        target = np.asarray(target)
        n, c = logits.shape
        if target.shape != (n,):
            raise ValueError(
                f"cross_entropy: target shape {target.shape} does not match logits "
                f"{logits.shape} (expected ({n},))"
            )
        if target.dtype.kind not in "iu":
            raise TypeError(f"cross_entropy: targets must be integer class ids, got {target.dtype}")
        if reduction not in ("mean", "sum"):
            raise ValueError(f"cross_entropy: reduction must be 'mean' or 'sum', not {reduction!r}")
        rows = np.arange(n)
        shifted = logits - logits.max(axis=1, keepdims=True)
        # F.cross_entropy sends negative ids (ignored or wrong) to the general path; an id
        # >= C makes NumPy raise here, at no extra pass over the targets
        try:
            picked = shifted[rows, target]
        except IndexError:
            raise _target_out_of_bounds(target, c) from None
        e = np.exp(shifted)
        s = e.sum(axis=1, keepdims=True)
        losses = np.log(s[:, 0]) - picked
        e /= s  # now the softmax probabilities, kept for the fast backward
        ctx.probs, ctx.target, ctx.rows = e, target, rows
        # the mean of no losses is nan, as in torch (the sum is 0)
        ctx.scale = (1.0 / n if n else np.nan) if reduction == "mean" else 1.0
        ctx.save_for_backward(logits)
        return losses.sum() * ctx.scale

    @staticmethod
    def backward(ctx, g):
        (logits,) = ctx.saved_tensors
        if isinstance(g, Tensor):  # create_graph: recompute softmax as a recorded op
            onehot = np.zeros(logits.shape, dtype=logits.dtype)
            onehot[ctx.rows, ctx.target] = 1
            return (softmax(logits, 1) - onehot) * (g * ctx.scale), None, None
        d = ctx.probs.copy()
        d[ctx.rows, ctx.target] -= 1
        d *= g * ctx.scale
        return d, None, None


# ----------------------------------------------------------------------------- rules
def _softmax_vmap(prim):
    def rule(size, args, batched):
        a, axis = args
        if a.ndim == 1:  # 0-dim examples: softmax over a dim of one
            return P["Reshape"].apply(prim.apply(P["Reshape"].apply(a, (size, 1)), 1), (size,))
        return prim.apply(a, axis % (a.ndim - 1) + 1)

    return rule


def _softmax_jvp(args, tans):
    a, axis = args
    y = Softmax.apply(a, axis)
    t = tans[0]
    return y, y * (t - P["Sum"].apply(t * y, axis, True))


def _log_softmax_jvp(args, tans):
    a, axis = args
    out = LogSoftmax.apply(a, axis)
    t = tans[0]
    return out, t - P["Sum"].apply(exp(out) * t, axis, True)


def _picked(values, target):
    """values[i, target[i]] for each row, as a (traceable) Gather."""
    index = P["Reshape"].apply(target, (-1, 1)) if isinstance(target, Tensor) else None
    if index is None:
        index = np.asarray(target).reshape(-1, 1)
    return P["Gather"].apply(values, values.ndim - 1, index)


def _cross_entropy_vmap(size, args, batched):
    """Per example: -sum_i log_softmax(logits)[i, target[i]] * scale."""
    logits, target, reduction = args
    logits = to_batched(logits, batched[0], size)
    target = to_batched(target, batched[1], size)
    n = logits.shape[1]
    lsm = LogSoftmax.apply(logits, 2)
    idx = P["Reshape"].apply(target, (size, n, 1)) if isinstance(target, Tensor) else None
    if idx is None:
        idx = np.asarray(target).reshape(size, n, 1)
    picked = P["Gather"].apply(lsm, 2, idx)
    scale = (1.0 / n if n else float("nan")) if reduction == "mean" else 1.0
    return P["Sum"].apply(picked, (1, 2), False) * -scale


def _cross_entropy_jvp(args, tans):
    logits, target, reduction = args
    out = CrossEntropy.apply(*args)
    t = tans[0]
    n = logits.shape[0]
    scale = (1.0 / n if n else float("nan")) if reduction == "mean" else 1.0
    expected = P["Sum"].apply(softmax(logits, 1) * t, None, False)
    return out, (expected - P["Sum"].apply(_picked(t, target), None, False)) * scale


# Written apart from the backwards: softmax and cross-entropy couple a whole row, so their
# Jacobians are no diagonal that one formula could serve both directions with.
rules_for(Softmax, vmap=_softmax_vmap(Softmax), jvp=_softmax_jvp)
rules_for(LogSoftmax, vmap=_softmax_vmap(LogSoftmax), jvp=_log_softmax_jvp)
rules_for(CrossEntropy, vmap=_cross_entropy_vmap, jvp=_cross_entropy_jvp)
