"""``minigrad.nn.functional``: the op set under torch.nn.functional's names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minigrad import attention, ops, rules
from minigrad.creation import default_generator
from minigrad.nn.losses import cross_entropy_general
from minigrad.ops.array_or_tensor import index_arg
from minigrad.tensor import Tensor, dims_to_axis
from minigrad.tracer_base import is_tracer


def _t(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def add(a: Any, b: Any, alpha: float = 1) -> Tensor:
    """a + alpha * b, as torch.add."""
    return ops.Add.apply(a, b if alpha == 1 else b * alpha)


def sub(a: Any, b: Any, alpha: float = 1) -> Tensor:
    """a - alpha * b, as torch.sub."""
    return ops.Sub.apply(a, b if alpha == 1 else b * alpha)


def mul(a: Any, b: Any) -> Tensor:
    return ops.Mul.apply(a, b)


def div(a: Any, b: Any) -> Tensor:
    return ops.Div.apply(a, b)


def neg(a: Tensor) -> Tensor:
    return ops.Neg.apply(a)


def pow(a: Any, exponent: Any) -> Tensor:  # noqa: A001  (torch's name)
    return ops.Pow.apply(a, exponent)


def matmul(a: Any, b: Any) -> Tensor:
    return ops.MatMul.apply(a, b)


def exp(x: Tensor) -> Tensor:
    return ops.Exp.apply(x)


def log(x: Tensor) -> Tensor:
    return ops.Log.apply(x)


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


# ----------------------------------------------------------------------------- new ops
def abs(x: Tensor) -> Tensor:  # noqa: A001
    return ops.Abs.apply(x)


def sqrt(x: Tensor) -> Tensor:
    return ops.Sqrt.apply(x)


def rsqrt(x: Tensor) -> Tensor:
    return ops.Rsqrt.apply(x)


def clamp(x: Tensor, min: Any = None, max: Any = None) -> Tensor:  # noqa: A002
    return ops.Clamp.apply(x, min, max)


def maximum(a: Any, b: Any) -> Tensor:
    return ops.Maximum.apply(a, b)


def minimum(a: Any, b: Any) -> Tensor:
    return ops.Minimum.apply(a, b)


def where(condition: Any, a: Any, b: Any) -> Tensor:
    return ops.Where.apply(index_arg(condition), a, b)


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = [_t(x) for x in tensors]
    if not tensors:
        raise ValueError("cat: expected a non-empty list of tensors")
    ref = next((x for x in tensors if x.shape != (0,)), tensors[0])  # (0,): skipped, as torch
    return ops.Cat.apply(dims_to_axis(dim, ref.ndim), *tensors)


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = [_t(x) for x in tensors]
    if not tensors:
        raise ValueError("stack: expected a non-empty list of tensors")
    return ops.Stack.apply(dims_to_axis(dim, tensors[0].ndim + 1), *tensors)


def split(x: Tensor, split_size_or_sections: Any, dim: int = 0) -> tuple[Tensor, ...]:
    return ops.split(x, split_size_or_sections, dim)


def chunk(x: Tensor, chunks: int, dim: int = 0) -> tuple[Tensor, ...]:
    return ops.chunk(x, chunks, dim)


def gather(x: Tensor, dim: int, index: Any) -> Tensor:
    return ops.gather(x, dim, index)


def index_select(x: Tensor, dim: int, index: Any) -> Tensor:
    return ops.index_select(x, dim, index)


def masked_fill(x: Tensor, mask: Any, value: Any) -> Tensor:
    return ops.MaskedFill.apply(x, index_arg(mask), value)


def var(x: Tensor, dim: Any = None, correction: float = 1, keepdim: bool = False) -> Tensor:
    return ops.Var.apply(x, dims_to_axis(dim, x.ndim), correction, keepdim)


def std(x: Tensor, dim: Any = None, correction: float = 1, keepdim: bool = False) -> Tensor:
    return ops.std_from_var(var(x, dim, correction, keepdim))


def logsumexp(x: Tensor, dim: Any, keepdim: bool = False) -> Tensor:
    return ops.LogSumExp.apply(x, dims_to_axis(dim, x.ndim), keepdim)


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


def scaled_dot_product_attention(q: Tensor, k: Tensor, v: Tensor, is_causal: bool = False):
    """softmax(q kᵀ / √d) v as one fused node (minigrad.attention.FusedAttention)."""
    return attention.scaled_dot_product_attention(q, k, v, is_causal)
