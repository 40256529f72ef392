"""Interleaved timing: every variant and its baseline in one process, call after call.

A shared machine has slow phases. Timing variant A for a second and then variant B for a second
charges whichever one ran during a spike; :func:`time_interleaved` instead runs a round that
calls every variant (``block`` calls each, one timed sample per call) and repeats the round.
What runs just before a call matters too: a fast call right after a slow variant finds its
caches cold. So the rounds take their orders from a balanced design (:func:`balanced_orders`,
a Williams square): over a cycle of rounds every variant runs in every position equally often
and right after every other variant equally often. Two variants alternate a b, b a, a b, ...;
with four or more, no variant runs twice in a row across a round's boundary either (merely
reversing every other round would give the first and the last variant a warm double turn each
cycle, and the ones between never). The figures to quote are the medians per variant and the
ratios between them, all from the same run; :meth:`Timings.drift` says how far the baseline's
own median moved between the first and the second half of the run (a large drift: the load
changed while it ran).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass


def wall_clock_seconds(fn: Callable[[], object]) -> float:
    """Seconds one call of ``fn`` takes, by ``time.perf_counter`` (the default timer)."""
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


@dataclass(frozen=True)
class Timings:
    """Seconds per call of each variant, in the order they were taken (round by round)."""

    samples: dict[str, list[float]]
    rounds: int

    def median(self, name: str) -> float:
        return statistics.median(self.samples[name])

    def medians(self) -> dict[str, float]:
        return {name: self.median(name) for name in self.samples}

    def ratio(self, name: str, baseline: str) -> float:
        """How many times faster ``name`` ran than ``baseline``: median(baseline) / median(name)."""
        return self.median(baseline) / self.median(name)

    def drift(self, name: str) -> tuple[float, float]:
        """The median of ``name`` over the first and over the second half of its samples."""
        values = self.samples[name]
        if len(values) < 2:
            return values[0], values[0]
        half = len(values) // 2
        return statistics.median(values[:half]), statistics.median(values[half:])


def balanced_orders(n: int) -> list[list[int]]:
    """The orders of one cycle of rounds for ``n`` variants (indices): a Williams square.

    The first order is 0, 1, n-1, 2, n-2, ...; order i adds i to each index (mod n). Within
    the cycle each index is in each position once and follows each other index once (for an
    odd ``n`` that takes the n orders and their reverses, 2n in all)."""
    first, low, high = [0], 1, n - 1
    while low <= high:
        first.append(low)
        if low != high:
            first.append(high)
        low, high = low + 1, high - 1
    orders = [[(v + i) % n for v in first[:n]] for i in range(n)]
    if n % 2 == 1 and n > 1:
        orders += [order[::-1] for order in orders]
    return orders


def time_interleaved(
    fns: Mapping[str, Callable[[], object]],
    *,
    rounds: int,
    warmup: int = 1,
    block: int | Mapping[str, int] = 1,
    budget_s: float | None = None,
    min_rounds: int = 1,
    timer: Callable[[Callable[[], object]], float] = wall_clock_seconds,
    progress: Callable[[int, int], None] | None = None,
) -> Timings:
    """Time every function of ``fns`` in interleaved rounds; see the module's docstring.

    ``block``: calls per turn, for all or per function (a fast compiled call right after a
    slow variant runs with cold caches; a longer block times it as a loop runs it).
    ``warmup`` untimed calls of each first (allocations, thread pools, caches). Then up to
    ``rounds`` rounds; with ``budget_s`` the rounds stop once that many seconds have passed and
    at least ``min_rounds`` ran. ``timer(fn)`` returns the seconds of one sample (a CUDA-event
    timer, say; the default is the wall clock). ``progress(done, rounds)`` after each round.
    """
    if not fns:
        raise ValueError("time_interleaved needs at least one function")
    blocks = dict(block) if isinstance(block, Mapping) else dict.fromkeys(fns, block)
    if rounds < 1 or min(blocks.values()) < 1 or warmup < 0 or min_rounds < 1:
        raise ValueError(
            f"rounds, block and min_rounds must be at least 1 and warmup at least 0, got "
            f"rounds={rounds}, block={block}, min_rounds={min_rounds}, warmup={warmup}"
        )
    names = list(fns)
    orders = [[names[i] for i in order] for order in balanced_orders(len(names))]
    for name in names:
        for _ in range(warmup):
            fns[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    start = time.perf_counter()
    done = 0
    while done < rounds:
        if budget_s is not None and done >= min_rounds and time.perf_counter() - start > budget_s:
            break
        for name in orders[done % len(orders)]:
            for _ in range(blocks[name]):
                samples[name].append(timer(fns[name]))
        done += 1
        if progress is not None:
            progress(done, rounds)
    return Timings(samples, done)
