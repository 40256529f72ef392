"""``minigrad.nn.functional``: the op set under torch.nn.functional's names."""

from __future__ import annotations

from typing import Any

from minigrad import ops
from minigrad.tensor import Tensor, _norm_dim


def _t(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def add(a: Any, b: Any) -> Tensor:
    return ops.Add.apply(a, b)


def sub(a: Any, b: Any) -> Tensor:
    return ops.Sub.apply(a, b)


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


def softmax(x: Tensor, dim: int) -> Tensor:
    return ops.Softmax.apply(x, _norm_dim(dim, x.ndim))


def log_softmax(x: Tensor, dim: int) -> Tensor:
    return ops.LogSoftmax.apply(x, _norm_dim(dim, x.ndim))


def cross_entropy(logits: Tensor, target: Any, reduction: str = "mean") -> Tensor:
    """Mean (or summed) negative log-likelihood of integer ``target`` under softmax(logits)."""
    return ops.CrossEntropy.apply(logits, target, reduction)


def mse_loss(input: Tensor, target: Any, reduction: str = "mean") -> Tensor:  # noqa: A002
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
    raise ValueError(f"mse_loss: reduction must be 'mean' or 'sum', not {reduction!r}")
