"""Benchmark: one 2-layer-MLP training step in minigrad vs hand-written NumPy vs torch eager.

    python bench.py                 # both sizes, 1 thread, writes bench_results.json
    python bench.py --threads 2     # let BLAS / torch use 2 threads
    python bench.py --quick         # shorter time budget per size

A benchmark, not a test: nothing here asserts. All three variants run in this one process,
interleaved in short blocks, and the table quotes medians and ratios from this run only.
Threads default to 1 for every library: on a shared machine a multi-threaded BLAS call waits
for a second core, and that scheduling noise (tens of ms) would swamp the per-op overhead we
want to measure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1, help="BLAS/torch threads (default 1)")
    parser.add_argument("--quick", action="store_true", help="1 s budget per size instead of 6")
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("bench_results.json"))
    args = parser.parse_args(argv)
    if args.threads < 1:
        parser.error(f"--threads must be at least 1, got {args.threads}")

    # Must be set before NumPy / torch load their thread pools.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = str(args.threads)
    import numpy as np
    import torch

    torch.set_num_threads(args.threads)
    from minigrad.bench_mlp import bench_size

    budget = 1.0 if args.quick else 6.0
    rows = [
        bench_size(64, 128, budget_s=budget, max_rounds=500, block=10),
        bench_size(1024, 1024, budget_s=budget * 2, max_rounds=20, block=2),
    ]
    header = (
        f"{'(batch, hidden)':>16} | {'minigrad ms':>11} | {'NumPy ms':>9} | {'torch ms':>9} | "
        f"{'mg/NumPy':>8} | {'mg/torch':>8}"
    )
    print(f"MLP training step, median, {args.threads} thread(s)")
    print(header)
    print("-" * len(header))
    for r in rows:
        print(
            f"{f'({r.batch}, {r.hidden})':>16} | {r.minigrad_ms:11.3f} | {r.numpy_ms:9.3f} | "
            f"{r.torch_ms:9.3f} | {r.vs_numpy:7.2f}x | {r.vs_torch:7.2f}x"
        )
    result = {
        "threads": args.threads,
        "python": sys.version.split()[0],
        "numpy": np.__version__,
        "torch": torch.__version__,
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "rows": [r.as_dict() for r in rows],
    }
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
