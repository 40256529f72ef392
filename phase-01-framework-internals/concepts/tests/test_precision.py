"""Accumulation error by dtype and algorithm, variance cancellation, determinism on this build."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from concepts.precision import (
    EPSILON,
    dot_by_thread_count,
    exact_sum,
    kahan_sum,
    naive_sum,
    pairwise_sum,
    probe_deterministic_mode,
    sample,
    summation_errors,
    variance_cancellation,
)


def test_sums_are_exact_on_representable_integers():
    # small integers add exactly in every dtype: all three algorithms must agree with fsum
    for dtype in ("float16", "bfloat16", "float32"):
        x = sample(1, dtype)[:0]
        assert naive_sum(x) == pairwise_sum(x) == 0.0
        ones = np.ones(200, dtype=sample(1, dtype).dtype)
        for fn in (naive_sum, pairwise_sum, kahan_sum):
            assert fn(ones) == 200.0


def test_naive_low_precision_stagnates_and_compensated_does_not():
    errors = {(e.dtype, e.method, e.n): e.relative_error for e in summation_errors([10_000])}
    for dtype in ("float16", "bfloat16"):
        assert errors[(dtype, "naive", 10_000)] > 0.1  # the running sum stopped growing
        for method in ("pairwise", "kahan"):
            assert errors[(dtype, method, 10_000)] < 4 * EPSILON[dtype]
    assert errors[("float32", "kahan", 10_000)] < EPSILON["float32"]
    assert errors[("float32", "naive", 10_000)] > errors[("float32", "kahan", 10_000)]


def test_naive_error_grows_with_n_and_kahan_stays_at_epsilon():
    sizes = [100, 100_000]
    errors = {(e.method, e.n): e.relative_error for e in summation_errors(sizes, ["float32"])}
    assert errors[("naive", 100_000)] > 10 * errors[("naive", 100)]
    for n in sizes:
        assert errors[("kahan", n)] <= EPSILON["float32"]


def test_kahan_lanes_match_a_scalar_kahan_reference():
    x = sample(5000, "float32", seed=3)
    exact = exact_sum(x)
    lanes = kahan_sum(x, lanes=64)
    assert abs(lanes - exact) / exact <= EPSILON["float32"]
    assert math.isclose(kahan_sum(x, lanes=1), kahan_sum(x, lanes=5000), rel_tol=EPSILON["float32"])


def test_one_pass_variance_cancels_and_welford_does_not():
    rows = {r.shift: r for r in variance_cancellation((0.0, 1e8), n=1000)}
    assert rows[0.0].one_pass_relative_error < 1e-12
    assert rows[1e8].one_pass_relative_error > 0.1  # catastrophic: not one digit right
    assert rows[1e8].welford_relative_error < 1e-8


def test_deterministic_flag_on_this_cpu_build():
    probe = probe_deterministic_mode()
    # The ops that raise on CUDA all have deterministic CPU kernels: none raises here.
    assert probe.raised == {}, probe.raised
    assert len(probe.passed) >= 8
    assert all(math.isnan(v) for v in probe.empty_with_flag)
    assert not torch.are_deterministic_algorithms_enabled()  # restored


@pytest.mark.parametrize("deterministic", [False, True])
def test_dot_result_depends_on_thread_count(deterministic):
    before = torch.get_num_threads()
    run = dot_by_thread_count(1_000_000, (1, 2, 4), deterministic=deterministic)
    assert run.repeatable  # same thread count, same bits
    assert run.distinct >= 2  # the split changes the rounding, flag or not
    exact = math.fsum(
        (
            np.random.default_rng(0).random(1_000_000).astype(np.float32).astype(np.float64) ** 2
        ).tolist()
    )
    assert all(abs(v - exact) / exact < 1e-5 for v in run.results.values())
    assert torch.get_num_threads() == before
