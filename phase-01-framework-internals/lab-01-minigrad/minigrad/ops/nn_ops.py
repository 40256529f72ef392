"""Layers as primitives: layer_norm, gelu (exact and tanh), dropout (a given mask)."""

from __future__ import annotations

import math

import numpy as np

from minigrad.function import Primitive
from minigrad.ops.array_or_tensor import erf, exp, np_erf, reduce_sum, sum_to, tanh
from minigrad.ops.elementwise import UnaryMap
from minigrad.ops.rulekit import P, align, rules_for, tangent_sum, to_batched, vmap_elementwise

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)


class LayerNorm(Primitive):
    """(x - mean) / sqrt(var + eps) over the last ``n_dims`` dims, then * weight + bias."""

    @staticmethod
    def forward(ctx, x, weight, bias, n_dims, eps):
        axes = tuple(range(x.ndim - n_dims, x.ndim))
        mu = x.mean(axis=axes, keepdims=True)
        xc = x - mu
        var = (xc * xc).mean(axis=axes, keepdims=True)
        out = xc / np.sqrt(var + eps)
        ctx.axes, ctx.eps = axes, eps
        ctx.bias_shape = None if bias is None else bias.shape
        ctx.save_for_backward(x, weight)
        if weight is not None:
            out = out * weight
        if bias is not None:
            out = out + bias
        return out

    @staticmethod
    def backward(ctx, g):
        # Recomputed from x with array-or-Tensor ops: create_graph differentiates through it.
        x, w = ctx.saved_tensors
        nx, nw, nb = ctx.needs_input_grad[:3]
        n = math.prod(x.shape[d] for d in ctx.axes)
        xc = x - reduce_sum(x, ctx.axes, True) / n
        rstd = (reduce_sum(xc * xc, ctx.axes, True) / n + ctx.eps) ** -0.5
        xhat = xc * rstd
        gxhat = g * w if w is not None else g
        gx = None
        if nx:
            mean_g = reduce_sum(gxhat, ctx.axes, True) / n
            mean_gx = reduce_sum(gxhat * xhat, ctx.axes, True) / n
            gx = rstd * (gxhat - mean_g - xhat * mean_gx)
        gw = sum_to(g * xhat, w.shape) if nw else None
        gb = sum_to(g, ctx.bias_shape) if nb else None
        return gx, gw, gb, None, None


class GELU(UnaryMap):
    """x * Φ(x) ("none", with erf) or its tanh approximation ("tanh"), as torch.nn.GELU."""

    float_only = False

    @staticmethod
    def compute(x, approximate):
        if approximate not in ("none", "tanh"):
            raise ValueError(f"gelu: approximate must be 'none' or 'tanh', not {approximate!r}")
        if approximate == "tanh":
            return 0.5 * x * (1 + np.tanh(_SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))
        return 0.5 * x * (1 + np_erf(x / math.sqrt(2.0)))

    @staticmethod
    def chain(g, x, out, approximate):
        if approximate == "tanh":
            inner = (x + x * x * x * 0.044715) * _SQRT_2_OVER_PI
            th = tanh(inner)
            d_inner = (x * x * (3 * 0.044715) + 1.0) * _SQRT_2_OVER_PI
            return g * ((th + 1.0) * 0.5 + x * (1.0 - th * th) * d_inner * 0.5)
        cdf = (erf(x * (1 / math.sqrt(2.0))) + 1.0) * 0.5
        pdf = exp(x * x * -0.5) * _INV_SQRT_2PI
        return g * (cdf + x * pdf)


class Dropout(Primitive):
    """x * mask, where ``mask`` (0 or 1 / (1 - p)) was drawn by the caller from minigrad's
    generator, so the same mask serves forward and backward."""

    @staticmethod
    def forward(ctx, x, mask):
        ctx.save_for_backward(mask)
        return x * mask

    @staticmethod
    def backward(ctx, g):
        (mask,) = ctx.saved_tensors
        return g * mask, None


# ----------------------------------------------------------------------------- rules
def _layer_norm_vmap(size, args, batched):
    x, w, b, n_dims, eps = args
    x = to_batched(x, batched[0], size)
    if not batched[1] and not batched[2]:
        return LayerNorm.apply(x, w, b, n_dims, eps)
    out = LayerNorm.apply(x, None, None, n_dims, eps)
    rank = out.ndim - 1
    if w is not None:
        out = out * align(w, batched[1], rank)
    if b is not None:
        out = out + align(b, batched[2], rank)
    return out


def _layer_norm_jvp(args, tans):
    x, w, b, n_dims, eps = args
    out = LayerNorm.apply(*args)
    tx, tw, tb = tans[:3]
    axes = tuple(range(x.ndim - n_dims, x.ndim))
    xhat = LayerNorm.apply(x, None, None, n_dims, eps)
    terms = []
    if tx is not None:
        mean = P["Mean"]
        tc = tx - mean.apply(tx, axes, True)
        xc = x - mean.apply(x, axes, True)
        rstd = P["Rsqrt"].apply(mean.apply(xc * xc, axes, True) + eps)
        t_hat = (tc - xhat * mean.apply(xhat * tc, axes, True)) * rstd
        terms.append(t_hat * w if w is not None else t_hat)
    if tw is not None:
        terms.append(xhat * tw)
    terms.append(tb)
    return out, tangent_sum(terms, out.shape)


# LayerNorm's jvp is written apart from its backward: not elementwise, its Jacobian is no
# diagonal that one formula could serve both directions with.
rules_for(LayerNorm, vmap=_layer_norm_vmap, jvp=_layer_norm_jvp)
rules_for(Dropout, linear=(0,), vmap=vmap_elementwise(Dropout, (0, 1)))
