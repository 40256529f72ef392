"""The array-or-Tensor helpers every backward is written with.

A primitive's backward receives ndarrays on the fast path and Tensors under
``create_graph=True``. Written with Python operators, ``.reshape``/``.mT`` and these helpers,
which run NumPy on an ndarray and the recorded primitive on a Tensor, one backward rule serves
both orders. The primitives are looked up by name in :data:`minigrad.rules.PRIMITIVES` (filled
as each class is defined), so this module imports no op family and every family can import it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from minigrad.rules import PRIMITIVES as _P
from minigrad.tensor import Tensor
from minigrad.tracer_base import is_tracer


def np_sum_to(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        i + lead for i, s in enumerate(shape) if s == 1 and x.shape[i + lead] != 1
    )
    if axes:
        x = x.sum(axis=axes, keepdims=True)
    return x.reshape(shape)


def sum_to(x: Any, shape: tuple[int, ...]) -> Any:
    """Undo broadcasting: sum ``x`` down to ``shape``."""
    if x.shape == shape:
        return x
    if isinstance(x, Tensor):
        return _P["SumTo"].apply(x, shape)
    return np_sum_to(x, shape)


def expand(x: Any, shape: tuple[int, ...]) -> Any:
    if x.shape == shape:
        return x
    if isinstance(x, Tensor):
        return _P["BroadcastTo"].apply(x, shape)
    return np.broadcast_to(x, shape)


def reduce_sum(x: Any, axis: Any, keepdims: bool) -> Any:
    if isinstance(x, Tensor):
        return _P["Sum"].apply(x, axis, keepdims)
    return x.sum(axis=axis, keepdims=keepdims)


def exp(x: Any) -> Any:
    return _P["Exp"].apply(x) if isinstance(x, Tensor) else np.exp(x)


def log(x: Any) -> Any:
    return _P["Log"].apply(x) if isinstance(x, Tensor) else np.log(x)


def softmax(x: Any, axis: int) -> Any:
    if isinstance(x, Tensor):
        return _P["Softmax"].apply(x, axis)
    return np_softmax(x, axis)


def permute(x: Any, axes: tuple[int, ...]) -> Any:
    return _P["Permute"].apply(x, axes) if isinstance(x, Tensor) else x.transpose(axes)


def cast(x: Any, dtype: Any) -> Any:
    """``x`` in ``dtype`` (recorded for a Tensor, so create_graph sees through it)."""
    if x.dtype == dtype:
        return x
    return _P["Cast"].apply(x, dtype) if isinstance(x, Tensor) else x.astype(dtype)


def value(x: Any) -> Any:
    """The raw array (for non-differentiable uses such as masks)."""
    return x.data if isinstance(x, Tensor) else x


def index_arg(x: Any) -> Any:
    """An index or mask argument as an op takes it: a plain one as its array, a traced one
    kept as the Tracer, so that vmap over indices/masks batches them (its ``.data`` is only
    the first example's value)."""
    if is_tracer(x):
        return x
    return x.data if isinstance(x, Tensor) else np.asarray(x)


def shape_of(x: Any) -> tuple[int, ...]:
    if isinstance(x, (np.ndarray, Tensor)):
        return x.shape
    return () if isinstance(x, (int, float)) else np.shape(x)  # np.shape is slow on scalars


def np_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    # initial=-inf: a size-0 dim has no max, and softmax over it is just empty (as torch)
    e = np.exp(x - x.max(axis=axis, keepdims=True, initial=-np.inf))
    e /= e.sum(axis=axis, keepdims=True)
    return e


def tanh(x: Any) -> Any:
    return _P["Tanh"].apply(x) if isinstance(x, Tensor) else np.tanh(x)


def erf(x: Any) -> Any:
    return _P["Erf"].apply(x) if isinstance(x, Tensor) else np_erf(x)


def where(cond: Any, a: Any, b: Any) -> Any:
    """``cond ? a : b`` (recorded when any of the three is a Tensor)."""
    if isinstance(a, Tensor) or isinstance(b, Tensor) or isinstance(cond, Tensor):
        return _P["Where"].apply(cond, a, b)
    return np.where(cond, a, b)


def _compare(op: str, ufunc: Any) -> Any:
    def compare(a: Any, b: Any) -> Any:
        if isinstance(a, Tensor) or isinstance(b, Tensor):
            return _P["Compare"].apply(a, b, op)
        return ufunc(a, b)

    compare.__name__ = op
    compare.__doc__ = f"The boolean mask ``a {op} b`` (a recorded Compare for a Tensor)."
    return compare


eq = _compare("eq", np.equal)
gt = _compare("gt", np.greater)
lt = _compare("lt", np.less)
ge = _compare("ge", np.greater_equal)
le = _compare("le", np.less_equal)


def sign(x: Any) -> Any:
    """-1, 0 or 1 in ``x``'s dtype (0 at 0: torch's subgradient of abs)."""
    if isinstance(x, Tensor):
        cast_ = _P["Cast"]
        return cast_.apply(gt(x, 0), x.dtype) - cast_.apply(lt(x, 0), x.dtype)
    return np.sign(x)


_erf_ufunc = np.frompyfunc(math.erf, 1, 1)


def np_erf(x: np.ndarray) -> np.ndarray:
    """The error function elementwise (NumPy has none; libm's, one element at a time)."""
    x = np.asarray(x)
    return _erf_ufunc(x).astype(x.dtype if x.dtype.kind == "f" else np.float64)
