"""Numerical precision: accumulation in FP16/BF16/FP32, compensated sums, variance, determinism.

Every sum here keeps its accumulator in the storage dtype (as a naive kernel would), so the
error is the accumulation's, not the input's: the reference is ``math.fsum`` of the very values
that were summed (converted exactly to float64).

- naive: one running sum, rounded after every addition (``np.add.accumulate``, sequential).
  Its error grows like n·ε, and once the sum is 2/ε times larger than an addend, adding it
  does nothing at all (stagnation).
- pairwise: a balanced tree of additions, error ~ log2(n)·ε (what ``np.sum`` and most GPU
  reductions do).
- Kahan: a running sum plus a compensation term that catches the low bits each addition
  drops; error ~ 2ε independent of n. Vectorised as 1024 independent Kahan lanes over the
  rows of an (n/1024, 1024) view, combined with one more Kahan pass — the layout a SIMD
  kernel uses.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import ml_dtypes
import numpy as np
import torch

DTYPES: dict[str, type] = {
    "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16,
    "float32": np.float32,
}
EPSILON = {name: float(ml_dtypes.finfo(dt).eps) for name, dt in DTYPES.items()}


def sample(n: int, dtype: str, seed: int = 0, total: float = 1000.0) -> np.ndarray:
    """n positive values in ``dtype`` whose sum is about ``total`` (so FP16 cannot overflow)."""
    rng = np.random.default_rng(seed)
    return (rng.random(n) * (2.0 * total / n)).astype(DTYPES[dtype])


def naive_sum(x: np.ndarray) -> float:
    """Left-to-right, rounding to x.dtype after each addition."""
    return float(np.add.accumulate(x, dtype=x.dtype)[-1]) if x.size else 0.0


def pairwise_sum(x: np.ndarray) -> float:
    """A balanced binary tree of additions, each rounded to x.dtype."""
    if x.size == 0:
        return 0.0
    size = 1 << (x.size - 1).bit_length()
    level = np.zeros(size, dtype=x.dtype)
    level[: x.size] = x
    while level.size > 1:
        level = level[0::2] + level[1::2]
    return float(level[0])


def _kahan_scalar(values: np.ndarray) -> float:
    zero = values.dtype.type(0)
    total, compensation = zero, zero
    for v in values:
        y = v - compensation
        t = total + y
        compensation = (t - total) - y  # what the addition just dropped
        total = t
    return float(total)


def kahan_sum(x: np.ndarray, lanes: int = 1024) -> float:
    """Compensated summation in x.dtype: ``lanes`` Kahan accumulators, then one Kahan pass."""
    if x.size <= lanes:
        return _kahan_scalar(x)
    rows = -(-x.size // lanes)
    padded = np.zeros(rows * lanes, dtype=x.dtype)
    padded[: x.size] = x
    grid = padded.reshape(rows, lanes)
    total = np.zeros(lanes, dtype=x.dtype)
    compensation = np.zeros(lanes, dtype=x.dtype)
    for row in grid:
        y = row - compensation
        t = total + y
        compensation = (t - total) - y
        total = t
    # fold the lanes' compensations in too: they are part of the sum
    return _kahan_scalar(np.concatenate([total, -compensation]))


METHODS: dict[str, Callable[[np.ndarray], float]] = {
    "naive": naive_sum,
    "pairwise": pairwise_sum,
    "kahan": kahan_sum,
}


def exact_sum(x: np.ndarray) -> float:
    """The correctly rounded float64 sum of the values as stored (``math.fsum``)."""
    return math.fsum(x.astype(np.float64).tolist())


@dataclass
class SumError:
    n: int
    dtype: str
    method: str
    relative_error: float


def summation_errors(
    sizes: Sequence[int],
    dtypes: Sequence[str] = tuple(DTYPES),
    methods: Sequence[str] = tuple(METHODS),
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> list[SumError]:
    """Relative error of each (dtype, method) against math.fsum, for each n."""
    rows = []
    for n in sizes:
        for dtype in dtypes:
            x = sample(n, dtype, seed)
            exact = exact_sum(x)
            for method in methods:
                err = abs(METHODS[method](x) - exact) / abs(exact)
                rows.append(SumError(n, dtype, method, err))
        if progress:
            progress(f"summed n={n:.0e} in {', '.join(dtypes)}")
    return rows


# ----------------------------------------------------------------------------- variance
def one_pass_variance(x: np.ndarray) -> float:
    """E[x²] − E[x]² from one pass of sums: cancels catastrophically when mean² ≫ variance."""
    n = x.size
    s, sq = np.sum(x), np.sum(x * x)
    return float((sq - s * s / n) / n)


def welford_variance(x: np.ndarray) -> float:
    """Welford's one-pass update: running mean and sum of squared deviations from it."""
    mean = 0.0
    m2 = 0.0
    for count, value in enumerate(x.tolist(), start=1):
        delta = value - mean
        mean += delta / count
        m2 += delta * (value - mean)
    return m2 / x.size


@dataclass
class VarianceRow:
    shift: float
    exact: float
    one_pass_relative_error: float
    welford_relative_error: float


def variance_cancellation(
    shifts: Sequence[float] = (0.0, 1e4, 1e6, 1e8, 1e9), n: int = 2000, seed: int = 0
) -> list[VarianceRow]:
    """float64 samples N(shift, 1): the one-pass formula's error grows like shift²·ε."""
    rng = np.random.default_rng(seed)
    base = rng.standard_normal(n)
    rows = []
    for shift in shifts:
        x = base + shift
        exact = float(statistics.pvariance(x.tolist()))  # exact rational arithmetic
        rows.append(
            VarianceRow(
                shift,
                exact,
                abs(one_pass_variance(x) - exact) / exact,
                abs(welford_variance(x) - exact) / exact,
            )
        )
    return rows


# ----------------------------------------------------------------------------- determinism
# Ops that torch documents as raising under use_deterministic_algorithms(True) on CUDA.
NONDETERMINISTIC_ON_CUDA: dict[str, Callable[[], object]] = {
    "scatter_add_": lambda: torch.zeros(8).scatter_add_(0, torch.tensor([1, 1, 2]), torch.ones(3)),
    "index_add_": lambda: torch.zeros(4, 2).index_add_(0, torch.tensor([1, 1]), torch.ones(2, 2)),
    "histc": lambda: torch.histc(torch.rand(100), bins=10),
    "bincount(weights)": lambda: torch.bincount(torch.tensor([0, 1, 1]), torch.ones(3)),
    "kthvalue": lambda: torch.kthvalue(torch.rand(10), 3),
    "median(dim)": lambda: torch.median(torch.rand(4, 5), 0),
    "cumsum": lambda: torch.cumsum(torch.rand(100), 0),
    "avg_pool3d backward": lambda: (
        torch.nn.AvgPool3d(1)(torch.randn(3, 4, 5, 6, requires_grad=True)).sum().backward()
    ),
    "interpolate(bilinear) backward": lambda: (
        torch.nn.functional.interpolate(
            torch.randn(1, 1, 4, 4, requires_grad=True), scale_factor=2, mode="bilinear"
        )
        .sum()
        .backward()
    ),
    "embedding_bag(max) backward": lambda: (
        torch.nn.functional.embedding_bag(
            torch.tensor([[0, 1], [1, 2]]), torch.randn(3, 4, requires_grad=True), mode="max"
        )
        .sum()
        .backward()
    ),
}


@dataclass
class DeterminismProbe:
    raised: dict[str, str]  # op -> first line of the error
    passed: list[str]
    # torch.empty right after a freed tensor of 7s: with the flag it is NaN-filled
    # (torch.utils.deterministic.fill_uninitialized_memory), without it shows old memory
    empty_with_flag: list[float]
    empty_without_flag: list[float]


def _empty_after_sentinel(n: int = 1 << 12) -> list[float]:
    sentinel = torch.full((n,), 7.0)
    del sentinel
    return torch.empty(n)[:4].tolist()


def probe_deterministic_mode() -> DeterminismProbe:
    """Run the CUDA-nondeterministic ops with the flag on, on this (CPU) build; restore it."""
    previous = torch.are_deterministic_algorithms_enabled()
    raised, passed = {}, []
    try:
        torch.use_deterministic_algorithms(True)
        for name, run in NONDETERMINISTIC_ON_CUDA.items():
            try:
                run()
                passed.append(name)
            except RuntimeError as error:
                raised[name] = str(error).splitlines()[0]
        with_flag = _empty_after_sentinel()
        torch.use_deterministic_algorithms(False)
        without_flag = _empty_after_sentinel()
    finally:
        torch.use_deterministic_algorithms(previous)
    return DeterminismProbe(raised, passed, with_flag, without_flag)


@dataclass
class ThreadReduction:
    n: int
    results: dict[int, float]  # threads -> torch.dot result
    repeatable: bool  # the same thread count gave the same bits twice
    seconds: dict[int, float]

    @property
    def distinct(self) -> int:
        return len(set(self.results.values()))


def dot_by_thread_count(
    n: int = 1_000_000, threads: Sequence[int] = (1, 2, 4), deterministic: bool = True
) -> ThreadReduction:
    """``torch.dot`` of n float32 values with 1, 2, 4 intra-op threads: each thread sums its
    own chunk, then the partial sums are added, so the rounding depends on the split. Run
    with use_deterministic_algorithms(``deterministic``): the flag promises run-to-run
    repeatability for a fixed configuration, not the same bits for another thread count."""
    x = torch.from_numpy(np.random.default_rng(0).random(n).astype(np.float32))
    previous = torch.get_num_threads()
    previous_flag = torch.are_deterministic_algorithms_enabled()
    results, seconds, repeatable = {}, {}, True
    try:
        torch.use_deterministic_algorithms(deterministic)
        for count in threads:
            torch.set_num_threads(count)
            start = time.perf_counter()
            first = torch.dot(x, x).item()
            seconds[count] = time.perf_counter() - start
            repeatable &= torch.dot(x, x).item() == first
            results[count] = first
    finally:
        torch.set_num_threads(previous)
        torch.use_deterministic_algorithms(previous_flag)
    return ThreadReduction(n, results, repeatable, seconds)
