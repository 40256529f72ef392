"""``minigrad.nn.functional``: the op set under torch.nn.functional's names."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minigrad import ops, rules
from minigrad.creation import default_generator
from minigrad.nn.losses import cross_entropy_general
from minigrad.ops.array_or_tensor import index_arg
from minigrad.tensor import Tensor
from minigrad.tracer_base import is_tracer


def _t(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def tanh(x: Tensor) -> Tensor:
    return ops.Tanh.apply(x)


def sigmoid(x: Tensor) -> Tensor:
    return ops.Sigmoid.apply(x)


def relu(input: Tensor, inplace: bool = False) -> Tensor:  # noqa: A002  (torch's names)
    _refuse("relu", inplace=inplace)
    return ops.ReLU.apply(input)


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    return ops.Linear.apply(x, weight, bias)


def _softmax_dim(dim: int | None, ndim: int) -> int:
    """torch's implicit dim when none is given (deprecated there): 0 for 0-, 1- and 3-dim
    inputs, else 1."""
    if dim is not None:
        return dim
    return 0 if ndim in (0, 1, 3) else 1


def softmax(
    input: Tensor,  # noqa: A002  (torch's names, and torch's argument order)
    dim: int | None = None,
    _stacklevel: int = 3,
    dtype: Any = None,
) -> Tensor:
    """As torch: ``dtype`` casts the input first (e.g. softmax of float32 in float64);
    ``_stacklevel`` (torch's warning depth) changes nothing."""
    x = _t(input)
    return x.softmax(_softmax_dim(dim, x.ndim), dtype)


def log_softmax(
    input: Tensor,  # noqa: A002
    dim: int | None = None,
    _stacklevel: int = 3,
    dtype: Any = None,
) -> Tensor:
    x = _t(input)
    return x.log_softmax(_softmax_dim(dim, x.ndim), dtype)


def _reduction(size_average: Any, reduce: Any, reduction: str) -> str:
    """torch's legacy size_average / reduce arguments, mapped as torch maps them."""
    if size_average is None and reduce is None:
        return reduction
    size_average = True if size_average is None else size_average
    reduce = True if reduce is None else reduce
    return "none" if not reduce else "mean" if size_average else "sum"


def _refuse(where: str, **options: Any) -> None:
    """A TypeError for a torch option minigrad does not support, given a non-default value."""
    for name, value in options.items():
        if value:
            raise TypeError(f"{where}: {name}={value!r} is not supported by minigrad")


def cross_entropy(
    input: Tensor,  # noqa: A002  (torch's name)
    target: Any,
    weight: Any = None,
    size_average: bool | None = None,
    ignore_index: int = -100,
    reduce: bool | None = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """torch.nn.functional.cross_entropy, with torch's argument order: class-index or
    class-probability targets, inputs (C,), (N, C) or (N, C, d1, ...), class weights,
    ignore_index, label smoothing; the legacy size_average / reduce as torch maps them.

    The common case, (N, C) logits with class ids and no options, is one fused primitive;
    everything else is composed of recorded ops (see minigrad.nn.losses)."""
    reduction = _reduction(size_average, reduce, reduction)
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


def mse_loss(
    input: Tensor,  # noqa: A002
    target: Any,
    size_average: bool | None = None,
    reduce: bool | None = None,
    reduction: str = "mean",
    weight: Any = None,
) -> Tensor:
    """Mean (or summed, or per-element with "none") squared difference, as torch (torch's
    argument order; the legacy size_average / reduce as torch maps them; no weight)."""
    _refuse("mse_loss", weight=weight is not None)
    reduction = _reduction(size_average, reduce, reduction)
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


def embedding(
    input: Any,  # noqa: A002
    weight: Tensor,
    padding_idx: int | None = None,
    max_norm: float | None = None,
    norm_type: float = 2.0,
    scale_grad_by_freq: bool = False,
    sparse: bool = False,
) -> Tensor:
    """Rows of ``weight`` (torch's signature; max_norm, scale_grad_by_freq and sparse are
    refused, norm_type only matters with max_norm)."""
    _refuse(
        "embedding",
        max_norm=max_norm is not None,
        scale_grad_by_freq=scale_grad_by_freq,
        sparse=sparse,
    )
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


def gelu(input: Tensor, approximate: str = "none") -> Tensor:  # noqa: A002
    return ops.GELU.apply(input, approximate)


def dropout(x: Tensor, p: float = 0.5, training: bool = True, inplace: bool = False) -> Tensor:
    """Zero each element with probability p, scale the rest by 1 / (1 - p); the mask comes
    from minigrad's generator (minigrad.manual_seed). Identity when p = 0 or not training.
    ``inplace`` is refused."""
    _refuse("dropout", inplace=inplace)
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
