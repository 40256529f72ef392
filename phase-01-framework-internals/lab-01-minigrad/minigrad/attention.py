"""A fused attention op with a hand-written backward: the interview question, answered in code.

``FusedAttention`` is one graph node for softmax(Q Kᵀ · scale) V instead of the six a composed
version records. Forward keeps only Q, K, V (not the (L, L) probability matrix, the
memory-saving idea behind FlashAttention) and backward recomputes P from them:

    S  = Q Kᵀ · scale          P = softmax(S)         O = P V
    dV = Pᵀ dO                 dP = dO Vᵀ
    dS = P ⊙ (dP − rowsum(dP ⊙ P))                    (the softmax Jacobian-vector product)
    dQ = dS K · scale          dK = dSᵀ Q · scale

The backward is written with minigrad ops, so with ``create_graph=True`` it is itself
recorded and double backward works (gradgradcheck in test_lab.py).
"""

from __future__ import annotations

import math

import numpy as np

from minigrad.function import Context, Function
from minigrad.ops import sum_to
from minigrad.tensor import Tensor


def _check_shapes(q: Tensor, k: Tensor, v: Tensor) -> None:
    if q.ndim < 2 or q.ndim != k.ndim or k.ndim != v.ndim:
        raise ValueError(
            f"attention needs q, k, v with the same rank >= 2, got {q.shape}, {k.shape}, {v.shape}"
        )
    try:
        np.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    except ValueError:
        raise ValueError(
            f"attention: the batch dims of q {q.shape}, k {k.shape}, v {v.shape} do not broadcast"
        ) from None
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"attention: q {q.shape} and k {k.shape} must share the last dim, and k and "
            f"v {v.shape} the sequence dim"
        )


def _future(q_len: int, k_len: int) -> np.ndarray:
    """torch's is_causal mask: query i may not see key j > i (True = masked)."""
    return np.triu(np.ones((q_len, k_len), dtype=bool), k=1)


class FusedAttention(Function):
    @staticmethod
    def forward(
        ctx: Context, q: Tensor, k: Tensor, v: Tensor, is_causal: bool = False
    ) -> np.ndarray:
        _check_shapes(q, k, v)
        scale = 1.0 / math.sqrt(q.shape[-1])
        ctx.scale = scale
        ctx.mask = _future(q.shape[-2], k.shape[-2]) if is_causal else None
        ctx.save_for_backward(q, k, v)
        s = (q.data @ np.swapaxes(k.data, -1, -2)) * scale
        if ctx.mask is not None:
            s[..., ctx.mask] = -np.inf
        s -= s.max(axis=-1, keepdims=True, initial=-np.inf)  # -inf: S = 0 gives zeros, as torch
        p = np.exp(s)
        p /= p.sum(axis=-1, keepdims=True)
        return p @ v.data

    @staticmethod
    def backward(ctx: Context, grad_out: Tensor) -> tuple[Tensor, Tensor, Tensor, None]:
        q, k, v = ctx.saved_tensors
        s = (q @ k.mT) * ctx.scale
        if ctx.mask is not None:
            s = s.masked_fill(ctx.mask, -np.inf)
        p = s.softmax(dim=-1)  # recomputed, not stored
        dv = p.mT @ grad_out
        dp = grad_out @ v.mT
        ds = p * (dp - (dp * p).sum(dim=-1, keepdim=True))
        dq = (ds @ k) * ctx.scale
        dk = (ds.mT @ q) * ctx.scale
        # Batch and head dims broadcast (k, v of shape (1, S, d) serve every batch entry):
        # sum each gradient back to its input's shape.
        return sum_to(dq, q.shape), sum_to(dk, k.shape), sum_to(dv, v.shape), None


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, is_causal: bool = False
) -> Tensor:
    """softmax(q kᵀ / √d) v as one node; ``is_causal`` masks the future as torch does (no
    other mask, no dropout)."""
    return FusedAttention.apply(q, k, v, is_causal)
