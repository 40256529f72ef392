"""Benchmark: one 2-layer-MLP training step in minigrad (eager and jit) vs JAX (eager and
jax.jit) vs torch eager vs hand-written NumPy, then minigrad.func's tables (bench_func).

    python -m minigrad bench                  # both sizes, 1 thread, prints the tables
    python -m minigrad bench --threads 2      # let BLAS / torch / XLA use 2 threads
    python -m minigrad bench --quick          # shorter time budget per size
    python -m minigrad bench --out r.json     # also write the raw figures as JSON

The step is Linear(h, h) -> ReLU -> Linear(h, 10) -> cross-entropy on a (batch, h) input,
updated with plain SGD (minigrad_harness/mlp_step.py). A benchmark, not a test: nothing here
asserts. All variants run in this one process, interleaved in short blocks so that load from
other processes hits them alike (minigrad_harness/timing.py), and the tables quote medians of
single steps and ratios from this run only. Threads default to 1 for every library (XLA's
included): on a shared machine a multi-threaded call waits for a second core, and that
scheduling noise (tens of ms) would swamp the per-call overhead measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from phase01_common.cli import (
    OneLineArgumentParser,
    OutputPathError,
    check_out_file,
    positive_int,
)

from minigrad_harness import bench_func
from minigrad_harness.mlp_step import (
    jax_step_fn,
    minigrad_jit_step_fn,
    minigrad_step_fn,
    numpy_step_fn,
    torch_step_fn,
)
from minigrad_harness.timing import (
    interleaved_medians,
    load_average,
    pin_xla_threads,
    print_table,
)

# the step table's columns: variant name -> what it is
VARIANTS = {
    "minigrad": "minigrad eager",
    "minigrad_jit": "minigrad.jit",
    "jax": "jax eager",
    "jax_jit": "jax.jit",
    "torch": "torch eager",
    "numpy": "NumPy by hand",
}


@dataclass
class BenchRow:
    """Median ms per step of every variant at one size, and minigrad.jit's compile time."""

    batch: int
    hidden: int
    ms: dict[str, float]
    jit_compile_s: float = 0.0

    def ratio(self, variant: str, baseline: str) -> float:
        return self.ms[variant] / self.ms[baseline]

    def as_dict(self) -> dict[str, float]:
        return {
            "batch": self.batch,
            "hidden": self.hidden,
            **{f"{k}_ms": v for k, v in self.ms.items()},
            "minigrad_over_numpy": self.ratio("minigrad", "numpy"),
            "minigrad_over_torch": self.ratio("minigrad", "torch"),
            "jit_over_jax_jit": self.ratio("minigrad_jit", "jax_jit"),
            "jit_over_numpy": self.ratio("minigrad_jit", "numpy"),
            "jit_compile_s": self.jit_compile_s,
        }


# calls per interleaved block at the small size: every variant of a fraction of a millisecond
# runs 50 in a row (right after a slow variant the first few calls find cold caches, 2-3x
# slower, which a training loop would not; they are all timed alike), JAX eager (each
# primitive dispatched on its own: ~15 ms a step) 2
SMALL_STEP_BLOCKS = {
    "minigrad": 50,
    "minigrad_jit": 50,
    "jax": 2,
    "jax_jit": 50,
    "torch": 50,
    "numpy": 50,
}


def bench_size(
    batch: int,
    hidden: int,
    budget_s: float = 5.0,
    max_rounds: int = 500,
    block: int | dict[str, int] = SMALL_STEP_BLOCKS,
    warmup: int = 3,
) -> BenchRow:
    """Median step time of each variant (see timing.interleaved_medians); ``block``: calls
    per block, for all or per variant. The first of the ``warmup`` calls of each variant
    compiles the jitted ones (minigrad.jit, jax.jit) outside the timing."""
    jit_step, jitted = minigrad_jit_step_fn(batch, hidden)
    fns = {
        "minigrad": minigrad_step_fn(batch, hidden),
        "minigrad_jit": jit_step,
        "jax": jax_step_fn(batch, hidden, jit=False),
        "jax_jit": jax_step_fn(batch, hidden, jit=True),
        "torch": torch_step_fn(batch, hidden),
        "numpy": numpy_step_fn(batch, hidden),
    }
    med = interleaved_medians(fns, budget_s, max_rounds, block, warmup=warmup, min_rounds=3)
    compile_s = next(iter(jitted.cache.values())).compile_seconds
    return BenchRow(batch, hidden, med, compile_s)


def step_table(rows: list[BenchRow]) -> tuple[list[str], list[list[object]]]:
    """The step table's header and rows (printed here, shown in the report section)."""
    header = ["(batch, hidden)", *(f"{v} ms" for v in VARIANTS.values())]
    header += ["jit / jax.jit", "jit / NumPy", "eager / NumPy", "eager / torch"]
    body = [
        [
            f"({r.batch}, {r.hidden})",
            *(r.ms[k] for k in VARIANTS),
            r.ratio("minigrad_jit", "jax_jit"),
            r.ratio("minigrad_jit", "numpy"),
            r.ratio("minigrad", "numpy"),
            r.ratio("minigrad", "torch"),
        ]
        for r in rows
    ]
    return header, body


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="python -m minigrad bench", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument(
        "--threads", type=positive_int, default=1, help="BLAS/torch/XLA threads (default 1)"
    )
    parser.add_argument("--quick", action="store_true", help="1 s budget per size instead of 6")
    parser.add_argument("--out", type=Path, default=None, help="write the figures to this JSON")
    args = parser.parse_args(argv)
    if args.out is not None:
        try:
            check_out_file(args.out, "--out")  # before minutes of work
        except OutputPathError as exc:
            parser.error(str(exc))
    pin_xla_threads(args.threads)
    import torch
    from threadpoolctl import threadpool_limits

    prev_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    budget = 1.0 if args.quick else 6.0
    load_before = load_average()
    try:
        with threadpool_limits(args.threads):
            rows = [
                bench_size(64, 128, budget_s=budget, max_rounds=500),
                bench_size(1024, 1024, budget_s=budget * 2, max_rounds=20, block=2),
            ]
            print_table(
                f"MLP training step, median ms per step, {args.threads} thread(s)",
                *step_table(rows),
            )
            func_figures = bench_func.run_all(args.quick)
    finally:
        torch.set_num_threads(prev_threads)
    print(f"\nload average before / after: {load_before} / {load_average()}")
    if args.out is not None:
        import jax

        result = {
            "threads": args.threads,
            "python": sys.version.split()[0],
            "numpy": np.__version__,
            "torch": torch.__version__,
            "jax": jax.__version__,
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "load_average": [load_before, load_average()],
            "rows": [r.as_dict() for r in rows],
            "func": func_figures,
        }
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
