"""The functions of torch's top-level namespace (``torch.add``, ``torch.sum``, ``torch.cat``).

torch gives most ops two spellings, ``torch.add(x, y, alpha=2)`` and ``x.add(y, alpha=2)``,
with one signature (``native_functions.yaml`` declares each op once, ``variants: function,
method``). So here: each function below is the ``Tensor`` method of the same name called on
its first argument, and the argument parsing lives once, in the method. The few that are no
method (``cat``, ``stack``, ``where``'s argument order, ``rsub``) are written out.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from minigrad import ops
from minigrad.ops.array_or_tensor import index_arg
from minigrad.tensor import Tensor, dims_to_axis

# torch.<name>(input, *args, **kwargs) == input.<name>(*args, **kwargs)
METHOD_FUNCTIONS = (
    "abs",
    "add",
    "amax",
    "amin",
    "argmax",
    "argmin",
    "chunk",
    "clamp",
    "clip",
    "clone",
    "div",
    "erf",
    "exp",
    "flatten",
    "gather",
    "index_select",
    "log",
    "log_softmax",
    "logsumexp",
    "masked_fill",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "mul",
    "neg",
    "permute",
    "pow",
    "relu",
    "reshape",
    "rsqrt",
    "sigmoid",
    "softmax",
    "split",
    "split_with_sizes",
    "sqrt",
    "square",
    "squeeze",
    "std",
    "sub",
    "sum",
    "t",
    "tanh",
    "transpose",
    "true_divide",
    "unsqueeze",
    "var",
    "zero_",
)


def as_tensor(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor(x)


def _function_of_method(name: str) -> Callable[..., Any]:
    method = getattr(Tensor, name)

    def function(input: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: A002  (torch's name)
        if isinstance(input, Tensor):
            return method(input, *args, **kwargs)
        if name == "pow":  # torch.pow(2, x): a number base
            return ops.Pow.apply(input, *args)
        return method(as_tensor(input), *args, **kwargs)

    function.__name__ = function.__qualname__ = name
    function.__doc__ = f"``torch.{name}(input, ...)``: ``input.{name}(...)``."
    return function


for _name in METHOD_FUNCTIONS:
    globals()[_name] = _function_of_method(_name)


def rsub(input: Any, other: Any, alpha: float = 1) -> Tensor:  # noqa: A002
    """``other - alpha * input``, as torch.rsub."""
    return ops.Sub.apply(other, input if alpha == 1 else input * alpha)


def where(condition: Any, input: Any, other: Any) -> Tensor:  # noqa: A002
    """``torch.where(condition, input, other)`` (the three-argument form)."""
    return ops.Where.apply(index_arg(condition), input, other)


def cat(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = [as_tensor(x) for x in tensors]
    if not tensors:
        raise ValueError("cat: expected a non-empty list of tensors")
    ref = next((x for x in tensors if x.shape != (0,)), tensors[0])  # (0,): skipped, as torch
    return ops.Cat.apply(dims_to_axis(dim, ref.ndim), *tensors)


def stack(tensors: Sequence[Tensor], dim: int = 0) -> Tensor:
    tensors = [as_tensor(x) for x in tensors]
    if not tensors:
        raise ValueError("stack: expected a non-empty list of tensors")
    return ops.Stack.apply(dims_to_axis(dim, tensors[0].ndim + 1), *tensors)


__all__ = [*METHOD_FUNCTIONS, "cat", "rsub", "stack", "where"]
