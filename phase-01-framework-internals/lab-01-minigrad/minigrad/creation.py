"""Creation functions under torch's names (zeros, ones, full, arange, randn, rand, *_like) and
minigrad's random generator (``manual_seed``), which dropout and ``nn`` initialisation draw from.

Defaults as torch: float32 unless a dtype is given; ``arange`` of integers is int64.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minigrad import rules
from minigrad.tensor import Tensor, check_torch_options

_generator = np.random.default_rng()


def manual_seed(seed: int) -> np.random.Generator:
    """Reseed minigrad's generator (randn, rand, dropout masks, nn init); returns it."""
    global _generator
    if not isinstance(seed, (int, np.integer)) or seed < 0:
        raise ValueError(f"manual_seed: seed must be a non-negative integer, got {seed!r}")
    _generator = np.random.default_rng(int(seed))
    return _generator


def default_generator() -> np.random.Generator:
    return _generator


def _size(size: tuple) -> tuple[int, ...]:
    """``zeros(2, 3)`` and ``zeros((2, 3))`` alike, as torch; sizes must be non-negative ints."""
    if len(size) == 1 and isinstance(size[0], Sequence):
        size = tuple(size[0])
    for s in size:
        if not isinstance(s, (int, np.integer)) or s < 0:
            raise ValueError(f"sizes must be non-negative integers, got {tuple(size)}")
    return tuple(int(s) for s in size)


def _make(arr: np.ndarray, dtype: Any, requires_grad: bool) -> Tensor:
    if dtype is not None:
        arr = arr.astype(dtype, copy=False)
    return Tensor(arr, requires_grad=requires_grad)


def zeros(*size: Any, dtype: Any = None, requires_grad: bool = False, **options: Any) -> Tensor:
    check_torch_options("zeros", **options)
    return _make(np.zeros(_size(size), np.float32), dtype, requires_grad)


def ones(*size: Any, dtype: Any = None, requires_grad: bool = False, **options: Any) -> Tensor:
    check_torch_options("ones", **options)
    return _make(np.ones(_size(size), np.float32), dtype, requires_grad)


def full(
    size: Sequence[int],
    fill_value: float,
    *,
    dtype: Any = None,
    requires_grad: bool = False,
    **options: Any,
) -> Tensor:
    """As torch: the dtype follows ``fill_value`` (bool, int64, float32) unless given."""
    check_torch_options("full", **options)
    default = (
        np.bool_
        if isinstance(fill_value, bool)
        else np.int64
        if isinstance(fill_value, (int, np.integer))
        else np.float32
    )
    return _make(np.full(_size((size,)), fill_value, default), dtype, requires_grad)


def arange(
    start: float, end: float | None = None, step: float = 1, *, dtype: Any = None,
    requires_grad: bool = False, **options: Any,
) -> Tensor:  # fmt: skip
    check_torch_options("arange", **options)
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    ints = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
    # torch computes the length as ceil((end - start) / step) in double precision
    n = max(int(np.ceil((end - start) / step)), 0)
    arr = start + step * np.arange(n, dtype=np.int64 if ints else np.float64)
    return _make(arr.astype(np.int64 if ints else np.float32), dtype, requires_grad)


def randn(*size: Any, dtype: Any = None, requires_grad: bool = False, **options: Any) -> Tensor:
    check_torch_options("randn", **options)
    rules.check_randomness("randn")
    return _make(_generator.standard_normal(_size(size), np.float32), dtype, requires_grad)


def rand(*size: Any, dtype: Any = None, requires_grad: bool = False, **options: Any) -> Tensor:
    check_torch_options("rand", **options)
    rules.check_randomness("rand")
    return _make(_generator.random(_size(size), np.float32), dtype, requires_grad)


def _like(t: Tensor, dtype: Any) -> tuple[tuple[int, ...], Any]:
    return t.shape, t.dtype if dtype is None else dtype


def zeros_like(
    t: Tensor, *, dtype: Any = None, requires_grad: bool = False, **options: Any
) -> Tensor:
    check_torch_options("zeros_like", **options)
    shape, dt = _like(t, dtype)
    return Tensor(np.zeros(shape, dt), requires_grad=requires_grad)


def ones_like(
    t: Tensor, *, dtype: Any = None, requires_grad: bool = False, **options: Any
) -> Tensor:
    check_torch_options("ones_like", **options)
    shape, dt = _like(t, dtype)
    return Tensor(np.ones(shape, dt), requires_grad=requires_grad)


def full_like(
    t: Tensor, fill_value: float, *, dtype: Any = None, requires_grad: bool = False, **options: Any
) -> Tensor:
    check_torch_options("full_like", **options)
    shape, dt = _like(t, dtype)
    return Tensor(np.full(shape, fill_value, dt), requires_grad=requires_grad)


def randn_like(
    t: Tensor, *, dtype: Any = None, requires_grad: bool = False, **options: Any
) -> Tensor:
    check_torch_options("randn_like", **options)
    rules.check_randomness("randn_like")
    shape, dt = _like(t, dtype)
    return Tensor(_generator.standard_normal(shape).astype(dt), requires_grad=requires_grad)


def rand_like(
    t: Tensor, *, dtype: Any = None, requires_grad: bool = False, **options: Any
) -> Tensor:
    check_torch_options("rand_like", **options)
    rules.check_randomness("rand_like")
    shape, dt = _like(t, dtype)
    return Tensor(_generator.random(shape).astype(dt), requires_grad=requires_grad)


__all__ = [
    "arange", "full", "full_like", "manual_seed", "ones", "ones_like", "rand", "rand_like",
    "randn", "randn_like", "zeros", "zeros_like",
]  # fmt: skip
