"""Fused attention as a primitive: the interview question, answered in code.

``FusedAttention`` is one graph node for softmax(Q Kᵀ · scale) V instead of the six a composed
version records. Forward keeps only Q, K, V (not the (L, L) probability matrix, the
memory-saving idea behind FlashAttention) and backward recomputes P from them:

    S  = Q Kᵀ · scale          P = softmax(S)         O = P V
    dV = Pᵀ dO                 dP = dO Vᵀ
    dS = P ⊙ (dP − rowsum(dP ⊙ P))                    (the softmax Jacobian-vector product)
    dQ = dS K · scale          dK = dSᵀ Q · scale

The backward is written with array-or-Tensor ops, so with ``create_graph=True`` it is itself
recorded and double backward works (gradgradcheck in test_lab.py). Its rules sit below: a
batching rule (the batch is one more broadcast dim), a jvp (forward mode of the same three
lines) and a lowering by decomposition, so grad, vmap and jit see one primitive.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from minigrad.function import Primitive
from minigrad.ops.array_or_tensor import reduce_sum, softmax, sum_to, where
from minigrad.ops.rulekit import Decomposition, P, align, ex_ndim, rules_for


def check_shapes(q: Any, k: Any, v: Any) -> None:
    if min(q.ndim, k.ndim, v.ndim) < 2:
        raise ValueError(
            f"attention needs q, k, v of rank >= 2, got {q.shape}, {k.shape}, {v.shape}"
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


def future_mask(q_len: int, k_len: int) -> np.ndarray:
    """torch's is_causal mask: query i may not see key j > i (True = masked)."""
    return np.triu(np.ones((q_len, k_len), dtype=bool), k=1)


def _probabilities(q: Any, k: Any, is_causal: bool, scale: float) -> Any:
    """P = softmax(q kᵀ · scale), the future masked when causal (arrays or Tensors)."""
    s = (q @ k.mT) * scale
    if is_causal:
        s = where(future_mask(q.shape[-2], k.shape[-2]), -np.inf, s)
    return softmax(s, s.ndim - 1)


class FusedAttention(Primitive):
    """``softmax(q kᵀ · scale) v``, batch and head dims broadcast; ``scale`` None is 1/√d."""

    @staticmethod
    def forward(ctx, q, k, v, is_causal, scale):
        check_shapes(q, k, v)
        ctx.is_causal = is_causal
        ctx.scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        ctx.save_for_backward(q, k, v)
        s = (q @ np.swapaxes(k, -1, -2)) * ctx.scale
        if is_causal:
            s[..., future_mask(q.shape[-2], k.shape[-2])] = -np.inf
        s -= s.max(axis=-1, keepdims=True, initial=-np.inf)  # -inf: S = 0 gives zeros, as torch
        p = np.exp(s)
        p /= p.sum(axis=-1, keepdims=True)
        return p @ v

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v = ctx.saved_tensors
        nq, nk, nv = ctx.needs_input_grad[:3]
        p = _probabilities(q, k, ctx.is_causal, ctx.scale)  # recomputed, not stored
        dp = grad_out @ v.mT
        ds = p * (dp - reduce_sum(dp * p, dp.ndim - 1, True))
        # Batch and head dims broadcast (k, v of shape (1, S, d) serve every batch entry):
        # sum each gradient back to its input's shape.
        dq = sum_to((ds @ k) * ctx.scale, q.shape) if nq else None
        dk = sum_to((ds.mT @ q) * ctx.scale, k.shape) if nk else None
        dv = sum_to(p.mT @ grad_out, v.shape) if nv else None
        return dq, dk, dv, None, None


# ----------------------------------------------------------------------------- rules
def _attention_vmap(size, args, batched):
    """The batch is one more broadcast dim in front: every input is brought to the same
    example rank (unit dims after the batch dim), an unbatched one gets a unit batch dim."""
    q, k, v, is_causal, scale = args
    xs, flags = (q, k, v), batched[:3]
    rank = max(ex_ndim(x, b) for x, b in zip(xs, flags, strict=True))
    q, k, v = (
        align(x, True, rank) if b else P["Reshape"].apply(x, (1,) * (rank + 1 - x.ndim) + x.shape)
        for x, b in zip(xs, flags, strict=True)
    )
    return FusedAttention.apply(q, k, v, is_causal, scale)


def _attention_jvp(args, tans):
    # Forward mode of S -> P -> O, written apart from the backward: the Jacobian is no
    # diagonal, so the reverse-mode formula above cannot serve as the tangent map.
    q, k, v, is_causal, scale = args
    out = FusedAttention.apply(*args)
    tq, tk, tv = tans[:3]
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    p = _probabilities(q, k, is_causal, scale)
    terms = []
    if tq is not None or tk is not None:
        ts = None if tq is None else tq @ k.mT
        if tk is not None:
            ts = q @ tk.mT if ts is None else ts + q @ tk.mT
        ts = ts * scale
        tp = p * (ts - P["Sum"].apply(p * ts, ts.ndim - 1, True))
        terms.append(tp @ v)
    if tv is not None:
        terms.append(p @ tv)
    if not terms:
        return out, None
    total = terms[0] if len(terms) == 1 else terms[0] + terms[1]
    return out, total if total.shape == out.shape else P["BroadcastTo"].apply(total, out.shape)


def _attention_composite(q, k, v, is_causal, scale):
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    return _probabilities(q, k, is_causal, scale) @ v


rules_for(
    FusedAttention,
    vmap=_attention_vmap,
    jvp=_attention_jvp,
    lower=Decomposition(_attention_composite),
)
