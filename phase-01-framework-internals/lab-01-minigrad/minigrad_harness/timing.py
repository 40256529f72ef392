"""How every benchmark of this lab times and prints: variants interleaved in one process,
medians, plain tables.

Each round runs a block of calls of every variant in turn (each call timed on its own), so
slow phases of a shared machine hit all variants alike while each still runs with its own
data warm in cache. The figures are medians of single calls from this run only.
"""

from __future__ import annotations

import os
import resource
import time
from collections.abc import Callable
from typing import Any

from phase01_common.timing import time_interleaved


def interleaved_medians(
    fns: dict[str, Callable[[], Any]],
    budget_s: float,
    max_rounds: int,
    block: int | dict[str, int],
    warmup: int = 1,
    min_rounds: int = 2,
    faults_per_call: dict[str, float] | None = None,
) -> dict[str, float]:
    """Median ms per call of each function, run in interleaved blocks until the budget
    (phase01_common's interleaved loop). ``block`` is the calls per block, for all or per
    function. The warm-up calls absorb allocations, BLAS thread start, torch's dispatch
    caches and JAX's per-primitive compiles. ``faults_per_call``, when given, is filled with
    each function's minor page faults per timed call (memory the OS had to map in: a freed
    buffer that went back to the OS and is touched again), counted around the same calls."""
    faults = dict.fromkeys(fns, 0)
    name_of = {id(fn): name for name, fn in fns.items()}

    def timer(fn: Callable[[], Any]) -> float:
        before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        start = time.perf_counter()
        fn()
        seconds = time.perf_counter() - start
        faults[name_of[id(fn)]] += resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
        return seconds

    timings = time_interleaved(
        fns,
        rounds=max_rounds,
        warmup=warmup,
        block=block,
        budget_s=budget_s,
        min_rounds=min_rounds,
        timer=timer,
    )
    if faults_per_call is not None:
        for name, samples in timings.samples.items():
            faults_per_call[name] = faults[name] / len(samples)
    return {name: seconds * 1e3 for name, seconds in timings.medians().items()}


def pin_xla_threads(threads: int) -> None:
    """XLA's CPU thread pool size for every PJRT client made after this call (minigrad.jit's
    and JAX's): XLA reads ``PJRT_NPROC`` when a client starts, so call it before the first
    compile of the process, as the NumPy and torch baselines are pinned."""
    os.environ["PJRT_NPROC"] = str(threads)


def load_average() -> str:
    """The 1/5/15-minute load averages, as `uptime` prints them, for the figures' context."""
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def print_table(title: str, header: list[str], rows: list[list[object]]) -> None:
    """A plain-text table: floats as ms (3 decimals), or as ratios (``1.25x``) in the columns
    whose header names one (starts with "/" or holds " / ")."""

    def cell(value: object, head: str) -> str:
        if not isinstance(value, float):
            return str(value)
        return f"{value:.2f}x" if head.startswith("/") or " / " in head else f"{value:.3f}"

    cells = [[cell(v, h) for v, h in zip(row, header, strict=True)] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(header)]
    print(title)
    print(" | ".join(h.rjust(w) for h, w in zip(header, widths, strict=True)))
    print("-+-".join("-" * w for w in widths))
    for row in cells:
        print(" | ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)))
