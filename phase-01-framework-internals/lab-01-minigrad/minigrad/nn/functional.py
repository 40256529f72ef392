"""``minigrad.nn.functional``: the op set under torch.nn.functional's names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minigrad import ops, rules
from minigrad.creation import default_generator
from minigrad.nn.losses import cross_entropy_general
from minigrad.ops.array_or_tensor import index_arg
from minigrad.tensor import Tensor, dims_to_axis
from minigrad.tracer_base import is_tracer


def _t(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def tanh(x: Tensor) -> Tensor:
    return ops.Tanh.apply(x)


def sigmoid(x: Tensor) -> Tensor:
    return ops.Sigmoid.apply(x)


def relu(x: Tensor) -> Tensor:
    return ops.ReLU.apply(x)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    return ops.Linear.apply(x, weight, bias)


def softmax(x: Tensor, dim: int, dtype: Any = None) -> Tensor:
    """As torch: ``dtype`` casts the input first (e.g. softmax of float32 in float64)."""
    x = x if dtype is None else _t(x).to(dtype)
    return ops.Softmax.apply(x, dims_to_axis(dim, x.ndim))


def log_softmax(x: Tensor, dim: int, dtype: Any = None) -> Tensor:
    x = x if dtype is None else _t(x).to(dtype)
    return ops.LogSoftmax.apply(x, dims_to_axis(dim, x.ndim))


def cross_entropy(
    input: Tensor,  # noqa: A002  (torch's name)
    target: Any,
    weight: Any = None,
    ignore_index: int = -100,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """torch.nn.functional.cross_entropy: class-index or class-probability targets, inputs
    (C,), (N, C) or (N, C, d1, ...), class weights, ignore_index, label smoothing.

    The common case, (N, C) logits with class ids and no options, is one fused primitive;
    everything else is composed of recorded ops (see minigrad.nn.losses)."""
    t = target.data if isinstance(target, Tensor) else np.asarray(target)
    if (
        not is_tracer(target)  # its values (is an id ignored?) are known per call only
        and weight is None
        and not label_smoothing
        and reduction != "none"
        and t.dtype.kind in "iu"
        and getattr(input, "ndim", 0) == 2
        and (t.size == 0 or t.min() >= 0)  # so no id is negative (ignore_index -100 absent)
        and (ignore_index < 0 or not (t == ignore_index).any())
    ):
        return ops.CrossEntropy.apply(input, t, reduction)
    if reduction not in ("mean", "sum", "none"):
        raise ValueError(
            f"cross_entropy: reduction must be 'mean', 'sum' or 'none', not {reduction!r}"
        )
    return cross_entropy_general(input, t, weight, ignore_index, reduction, label_smoothing, target)


def mse_loss(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:  # noqa: A002
    """Mean (or summed, or per-element with "none") squared difference, as torch."""
    target_shape = target.shape if hasattr(target, "shape") else ()
    if tuple(target_shape) != tuple(input.shape):
        raise ValueError(
            f"mse_loss: input shape {input.shape} and target shape {tuple(target_shape)} differ"
        )
    d = input - target
    sq = d * d
    if reduction == "mean":
        return sq.mean()
    if reduction == "sum":
        return sq.sum()
    if reduction == "none":
        return sq
    raise ValueError(f"mse_loss: reduction must be 'mean', 'sum' or 'none', not {reduction!r}")


def embedding(input: Any, weight: Tensor, padding_idx: int | None = None) -> Tensor:  # noqa: A002
    if padding_idx is not None and padding_idx < 0:
        padding_idx += weight.shape[0]
    return ops.Embedding.apply(index_arg(input), weight, padding_idx)


def layer_norm(
    x: Tensor,
    normalized_shape: Sequence[int],
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    eps: float = 1e-5,
) -> Tensor:
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if tuple(x.shape[x.ndim - len(shape) :]) != shape or len(shape) > x.ndim:
        raise ValueError(
            f"layer_norm: input of shape {x.shape} does not end in normalized_shape {shape}"
        )
    return ops.LayerNorm.apply(x, weight, bias, len(shape), eps)


def gelu(x: Tensor, approximate: str = "none") -> Tensor:
    return ops.GELU.apply(x, approximate)


def dropout(x: Tensor, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability p, scale the rest by 1 / (1 - p); the mask comes
    from minigrad's generator (minigrad.manual_seed). Identity when p = 0 or not training."""
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        mask = np.zeros(x.shape, x.dtype)
    else:
        rules.check_randomness("dropout")
        keep = default_generator().random(x.shape) >= p
        mask = keep.astype(x.dtype) / np.asarray(1.0 - p, x.dtype)
    return ops.Dropout.apply(x, mask)


def scaled_dot_product_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    attn_mask: Any = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """softmax(q kᵀ · scale) v as one node (minigrad.ops.attention.FusedAttention); scale
    None is 1/√d, ``is_causal`` masks the future as torch does. torch's signature; an
    explicit mask, dropout and grouped-query attention are refused."""
    for name, given in (
        ("attn_mask", attn_mask is not None),
        ("dropout_p", dropout_p != 0.0),
        ("enable_gqa", bool(enable_gqa)),
    ):
        if given:
            raise TypeError(
                f"scaled_dot_product_attention: {name} is not supported by minigrad "
                "(is_causal and scale are)"
            )
    return ops.FusedAttention.apply(query, key, value, bool(is_causal), scale)
