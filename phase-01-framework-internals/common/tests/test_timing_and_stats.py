"""time_interleaved (the order of the calls, medians, ratio, drift) and percentiles (against
numpy's definition and a hand-computed case)."""

from __future__ import annotations

import statistics

import numpy as np
import pytest
from phase01_common.stats import percentiles
from phase01_common.timing import Timings, time_interleaved


def _recorder():
    calls: list[str] = []

    def make(name: str):
        return lambda: calls.append(name)

    return calls, make


def test_rounds_alternate_and_reverse_order():
    calls, make = _recorder()
    fake = {"a": 1.0, "b": 3.0}

    def timer(fn):
        fn()
        return fake[calls[-1]]

    timings = time_interleaved(
        {"a": make("a"), "b": make("b")}, rounds=4, warmup=2, block=2, timer=timer
    )
    warm, timed = calls[:4], calls[4:]
    assert warm == ["a", "a", "b", "b"]
    # round 0: a a b b; round 1 reversed: b b a a; ...
    assert timed == ["a", "a", "b", "b", "b", "b", "a", "a"] * 2
    assert timings.rounds == 4 and {k: len(v) for k, v in timings.samples.items()} == {
        "a": 8,
        "b": 8,
    }
    assert timings.medians() == {"a": 1.0, "b": 3.0}
    assert timings.ratio("a", baseline="b") == 3.0


def test_budget_stops_after_min_rounds():
    calls, make = _recorder()
    timings = time_interleaved({"x": make("x")}, rounds=1000, warmup=0, budget_s=0.0, min_rounds=3)
    assert timings.rounds == 3 and len(calls) == 3


def test_drift_is_the_median_of_each_half():
    timings = Timings({"base": [1.0, 2.0, 3.0, 10.0, 11.0, 12.0]}, rounds=6)
    assert timings.drift("base") == (2.0, 11.0)
    assert timings.median("base") == statistics.median([1.0, 2.0, 3.0, 10.0, 11.0, 12.0])


def test_wall_clock_default_measures_positive_seconds():
    timings = time_interleaved({"sum": lambda: sum(range(1000))}, rounds=3)
    assert all(s > 0 for s in timings.samples["sum"])


@pytest.mark.parametrize(
    "bad", [{"rounds": 0}, {"rounds": 2, "block": 0}, {"rounds": 2, "warmup": -1}]
)
def test_refuses_empty_or_nonsense(bad):
    with pytest.raises(ValueError):
        time_interleaved({"f": lambda: None}, **bad)
    with pytest.raises(ValueError):
        time_interleaved({}, rounds=1)


def test_percentiles_match_numpy_and_a_hand_case():
    rng = np.random.default_rng(0)
    values = rng.exponential(size=501)
    got = percentiles(values, (50, 90, 95, 99))
    assert list(got) == ["p50", "p90", "p95", "p99"]
    for point in (50, 90, 95, 99):
        assert got[f"p{point}"] == pytest.approx(float(np.percentile(values, point)), rel=1e-12)
    # 1..5: linear interpolation puts p50 on 3 and p90 at 4.6
    assert percentiles([0.001, 0.002, 0.003, 0.004, 0.005], (50, 90), scale=1e3) == pytest.approx(
        {"p50": 3.0, "p90": 4.6}
    )


def test_percentiles_of_nothing_and_of_nan():
    assert percentiles([]) == {}
    with pytest.raises(ValueError):
        percentiles([1.0, float("nan")])


@pytest.mark.parametrize("n", [3, 4, 5, 6])
def test_round_orders_are_balanced_for_position_and_predecessor(n):
    """Over one cycle of rounds each variant is in each position and right after each other
    variant equally often (a Williams square), counted from the calls actually made."""
    from collections import Counter

    calls, make = _recorder()
    names = [f"v{i}" for i in range(n)]
    cycle = n if n % 2 == 0 else 2 * n
    time_interleaved({k: make(k) for k in names}, rounds=cycle, warmup=0)
    rounds = [calls[i : i + n] for i in range(0, len(calls), n)]
    assert len(rounds) == cycle and all(sorted(r) == names for r in rounds)
    positions = Counter((name, i) for r in rounds for i, name in enumerate(r))
    assert len(positions) == n * n and len(set(positions.values())) == 1
    follows = Counter((r[i - 1], r[i]) for r in rounds for i in range(1, n))
    assert len(follows) == n * (n - 1) and len(set(follows.values())) == 1
    if n >= 4:  # nobody gets a double turn across a boundary
        assert all(calls[i] != calls[i + 1] for i in range(len(calls) - 1))
