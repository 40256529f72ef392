"""The softmax family: softmax, log_softmax and the fused cross-entropy loss."""

from __future__ import annotations

import numpy as np

from minigrad.function import Primitive
from minigrad.ops.dual import (
    _np_softmax,
    exp,
    reduce_sum,
    softmax,
)
from minigrad.tensor import Tensor


class Softmax(Primitive):
    @staticmethod
    def forward(ctx, a, axis):
        ctx.axis = axis
        out = _np_softmax(a, axis)
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
