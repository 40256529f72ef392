"""Benchmark: one 2-layer-MLP training step in minigrad vs hand-written NumPy vs torch eager.

    python -m minigrad bench                  # both sizes, 1 thread, prints the table
    python -m minigrad bench --threads 2      # let BLAS / torch use 2 threads
    python -m minigrad bench --quick          # shorter time budget per size
    python -m minigrad bench --out r.json     # also write the raw figures as JSON

The network is Linear(h, h) -> ReLU -> Linear(h, 10) -> cross-entropy on a (batch, h) input,
updated with plain SGD. A benchmark, not a test: nothing here asserts. All three variants run
in this one process, interleaved in short blocks so that load from other processes hits them
alike, and the table quotes medians of single steps and ratios from this run only. Threads
default to 1 for every library: on a shared machine a multi-threaded BLAS call waits for a
second core, and that scheduling noise (tens of ms) would swamp the per-op overhead measured.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import minigrad
import minigrad.nn.functional as F
import numpy as np
from minigrad import nn, optim
from phase01_common.cli import OutputPathError, check_out_file
from phase01_common.timing import time_interleaved

N_CLASSES = 10
LR = 0.01


def _problem(batch: int, hidden: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, hidden)).astype(np.float32)
    y = rng.integers(0, N_CLASSES, batch)
    bound1, bound2 = 1 / np.sqrt(hidden), 1 / np.sqrt(hidden)
    weights = {
        "0.weight": rng.uniform(-bound1, bound1, (hidden, hidden)).astype(np.float32),
        "0.bias": rng.uniform(-bound1, bound1, hidden).astype(np.float32),
        "2.weight": rng.uniform(-bound2, bound2, (N_CLASSES, hidden)).astype(np.float32),
        "2.bias": rng.uniform(-bound2, bound2, N_CLASSES).astype(np.float32),
    }
    return x, y, weights


def numpy_step_fn(batch: int, hidden: int) -> Callable[[], float]:
    """The same step written out by hand: what any NumPy-based engine must at least do."""
    x, y, w = _problem(batch, hidden)
    w1, b1, w2, b2 = (w[k].copy() for k in ("0.weight", "0.bias", "2.weight", "2.bias"))
    rows = np.arange(batch)

    def step() -> float:
        h = x @ w1.T
        h += b1
        a = np.maximum(h, 0)
        logits = a @ w2.T
        logits += b2
        shifted = logits - logits.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        s = e.sum(axis=1, keepdims=True)
        loss = (np.log(s[:, 0]) - shifted[rows, y]).sum() / batch
        e /= s
        e[rows, y] -= 1
        e *= 1.0 / batch  # d loss / d logits
        dw2 = e.T @ a
        db2 = e.sum(axis=0)
        da = e @ w2
        dh = da * (h > 0)
        dw1 = dh.T @ x
        db1 = dh.sum(axis=0)
        for p, g in ((w1, dw1), (b1, db1), (w2, dw2), (b2, db2)):
            p -= LR * g  # in place, as the optimizers do
        return loss

    return step


def minigrad_step_fn(batch: int, hidden: int) -> Callable[[], float]:
    x_np, y_np, w = _problem(batch, hidden)
    model = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, N_CLASSES))
    model.load_state_dict(w)
    opt = optim.SGD(model.parameters(), lr=LR)
    x, y = minigrad.Tensor(x_np), minigrad.Tensor(y_np)

    def step() -> float:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.data

    return step


def torch_step_fn(batch: int, hidden: int) -> Callable[[], float]:
    import torch

    x_np, y_np, w = _problem(batch, hidden)
    model = torch.nn.Sequential(
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, N_CLASSES)
    )
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in w.items()})
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)

    def step() -> float:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


@dataclass
class BenchRow:
    batch: int
    hidden: int
    minigrad_ms: float
    numpy_ms: float
    torch_ms: float

    @property
    def vs_numpy(self) -> float:
        return self.minigrad_ms / self.numpy_ms

    @property
    def vs_torch(self) -> float:
        return self.minigrad_ms / self.torch_ms

    def as_dict(self) -> dict[str, float]:
        return {
            "batch": self.batch,
            "hidden": self.hidden,
            "minigrad_ms": self.minigrad_ms,
            "numpy_ms": self.numpy_ms,
            "torch_ms": self.torch_ms,
            "minigrad_over_numpy": self.vs_numpy,
            "minigrad_over_torch": self.vs_torch,
        }


def interleaved_medians(
    fns: dict[str, Callable[[], Any]],
    budget_s: float,
    max_rounds: int,
    block: int,
    warmup: int = 1,
    min_rounds: int = 2,
) -> dict[str, float]:
    """Median ms per call of each function, run in alternating blocks until the budget
    (phase01_common's interleaved loop). The warm-up calls absorb allocations, BLAS thread
    start and torch's dispatch caches."""
    timings = time_interleaved(
        fns, rounds=max_rounds, warmup=warmup, block=block, budget_s=budget_s, min_rounds=min_rounds
    )
    return {name: seconds * 1e3 for name, seconds in timings.medians().items()}


def bench_size(
    batch: int, hidden: int, budget_s: float = 5.0, max_rounds: int = 500, block: int = 10
) -> BenchRow:
    """Median step time of each variant. Each round runs a block of ``block`` steps of every
    variant in turn (each step timed on its own), so slow phases of a shared machine hit all
    three alike while each variant still runs with its own data warm in cache."""
    fns = {
        "minigrad": minigrad_step_fn(batch, hidden),
        "numpy": numpy_step_fn(batch, hidden),
        "torch": torch_step_fn(batch, hidden),
    }
    med = interleaved_medians(fns, budget_s, max_rounds, block, warmup=3, min_rounds=3)
    return BenchRow(batch, hidden, med["minigrad"], med["numpy"], med["torch"])


def _print_table(rows: list[BenchRow], threads: int) -> None:
    header = (
        f"{'(batch, hidden)':>16} | {'minigrad ms':>11} | {'NumPy ms':>9} | {'torch ms':>9} | "
        f"{'mg/NumPy':>8} | {'mg/torch':>8}"
    )
    print(f"MLP training step, median, {threads} thread(s)")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{f'({r.batch}, {r.hidden})':>16} | {r.minigrad_ms:11.3f} | {r.numpy_ms:9.3f} | "
            f"{r.torch_ms:9.3f} | {r.vs_numpy:7.2f}x | {r.vs_torch:7.2f}x"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minigrad bench", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--threads", type=int, default=1, help="BLAS/torch threads (default 1)")
    parser.add_argument("--quick", action="store_true", help="1 s budget per size instead of 6")
    parser.add_argument("--out", type=Path, default=None, help="write the figures to this JSON")
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")
    if args.out is not None:
        try:
            check_out_file(args.out, "--out")  # before minutes of work
        except OutputPathError as exc:
            parser.error(str(exc))
    import torch
    from threadpoolctl import threadpool_limits

    prev_threads = torch.get_num_threads()
    torch.set_num_threads(args.threads)
    budget = 1.0 if args.quick else 6.0
    try:
        with threadpool_limits(args.threads):
            rows = [
                bench_size(64, 128, budget_s=budget, max_rounds=500, block=10),
                bench_size(1024, 1024, budget_s=budget * 2, max_rounds=20, block=2),
            ]
            _print_table(rows, args.threads)
            from minigrad_harness.bench_func import run_all

            func_figures = run_all(args.quick, args.threads)
    finally:
        torch.set_num_threads(prev_threads)
    if args.out is not None:
        result = {
            "threads": args.threads,
            "python": sys.version.split()[0],
            "numpy": np.__version__,
            "torch": torch.__version__,
            "machine": platform.machine(),
            "cpu_count": os.cpu_count(),
            "rows": [r.as_dict() for r in rows],
            "func": func_figures,
        }
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
