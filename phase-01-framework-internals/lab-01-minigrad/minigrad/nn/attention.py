"""``nn.MultiheadAttention`` with torch's parameters, layout and call, on the fused attention.

Without attention weights (``need_weights=False``) the heads run through the one fused node
(:class:`minigrad.ops.attention.FusedAttention`, causal if asked). When the caller wants the
weights, or passes an ``attn_mask``, the same computation is composed of recorded ops, as
torch's own math fallback does.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from minigrad.creation import default_generator
from minigrad.nn import functional as F
from minigrad.nn.modules import Linear, Module, Parameter
from minigrad.tensor import Tensor


class NonDynamicallyQuantizableLinear(Linear):
    """torch's name for the output projection (a plain Linear)."""


class MultiheadAttention(Module):
    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        bias: bool = True,
        batch_first: bool = False,
        dtype: Any = np.float32,
        rng: np.random.Generator | None = None,
    ) -> None:
        super().__init__()
        if embed_dim % num_heads:
            raise ValueError(f"embed_dim {embed_dim} must be divisible by num_heads {num_heads}")
        rng = rng if rng is not None else default_generator()
        self.embed_dim, self.num_heads, self.batch_first = embed_dim, num_heads, batch_first
        bound = math.sqrt(6.0 / (embed_dim + 3 * embed_dim))  # torch's xavier_uniform_
        self.in_proj_weight = Parameter(
            rng.uniform(-bound, bound, (3 * embed_dim, embed_dim)).astype(dtype)
        )
        self.in_proj_bias = Parameter(np.zeros(3 * embed_dim, dtype)) if bias else None
        self.out_proj = NonDynamicallyQuantizableLinear(
            embed_dim, embed_dim, bias=bias, dtype=dtype, rng=rng
        )
        if bias:
            self.out_proj.bias.data[...] = 0

    def forward(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        key_padding_mask: Any = None,
        need_weights: bool = True,
        attn_mask: Any = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        if key_padding_mask is not None:
            raise NotImplementedError("MultiheadAttention: key_padding_mask is not supported")
        if not self.batch_first:  # (L, N, E) -> (N, L, E)
            query, key, value = (x.transpose(0, 1) for x in (query, key, value))
        q, k, v = self._project(query, key, value)
        if need_weights or attn_mask is not None:
            out, weights = self._composed(q, k, v, attn_mask, is_causal)
        else:
            out, weights = F.scaled_dot_product_attention(q, k, v, is_causal=is_causal), None
        n, h, length, d = out.shape
        out = self.out_proj(out.transpose(1, 2).reshape(n, length, h * d))
        if not self.batch_first:
            out = out.transpose(0, 1)
        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)
        return out, weights if need_weights else None

    def _project(self, query: Tensor, key: Tensor, value: Tensor) -> list[Tensor]:
        """The packed in-projection, split into heads: each (N, heads, length, head_dim)."""
        e, h = self.embed_dim, self.num_heads
        ws = self.in_proj_weight.split(e, dim=0)
        bs = self.in_proj_bias.split(e, dim=0) if self.in_proj_bias is not None else (None,) * 3
        heads = []
        for x, w, b in zip((query, key, value), ws, bs, strict=True):
            y = F.linear(x, w, b)
            heads.append(y.reshape(y.shape[0], y.shape[1], h, e // h).transpose(1, 2))
        return heads

    @staticmethod
    def _composed(q: Tensor, k: Tensor, v: Tensor, attn_mask: Any, is_causal: bool):
        scores = (q @ k.mT) * (1.0 / math.sqrt(q.shape[-1]))
        if attn_mask is not None:
            mask = attn_mask.data if isinstance(attn_mask, Tensor) else np.asarray(attn_mask)
            if mask.dtype == bool:  # True = not allowed to attend, as torch
                scores = scores.masked_fill(mask, -np.inf)
            else:  # an additive float mask
                scores = scores + mask.astype(scores.dtype)
        elif is_causal:
            future = np.triu(np.ones((q.shape[-2], k.shape[-2]), dtype=bool), k=1)
            scores = scores.masked_fill(future, -np.inf)
        weights = F.softmax(scores, dim=-1)
        return weights @ v, weights

    def extra_repr(self) -> str:
        return ""
