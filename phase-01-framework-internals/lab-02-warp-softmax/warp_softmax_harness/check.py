"""``python -m warp_softmax check [--device cpu|cuda|all]``: the accuracy sweep over every
kernel path (row lengths around each kernel boundary, aligned and misaligned rows, -inf and
NaN) and torch.library.opcheck on every op, with a line per part and exit code 1 on a failure.
gpu_check.sh runs the sweep under compute-sanitizer."""

from __future__ import annotations

import argparse
import time

import torch

from .compare import check_converting_paths, check_kernel_paths
from .scenarios import opcheck_cases

ALL = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
NO_SCHEMA = ALL[1:]


def opcheck_all(device: str) -> int:
    """opcheck on softmax and log_softmax for every case of scenarios.opcheck_cases, with
    dtype= and FP8 overloads, and on both backward ops; raises AssertionError naming the
    failing case; returns the number of calls checked."""
    ops = torch.ops.warp_softmax
    calls = []
    for forward in (ops.softmax.default, ops.log_softmax.default):
        calls += [(forward, args) for args in opcheck_cases(device)]
        x = torch.randn(4, 8, device=device, requires_grad=True)
        # An FP8 output from an input that requires grad: torch's test_schema multiplies the
        # FP8 result, which has no CPU kernel; with a plain input every utility runs.
        calls += [
            (forward, (x, -1, torch.float64)),
            (forward, (x.detach(), 0, torch.float8_e4m3fn)),
        ]
        # torch's test_schema cannot handle FP8 inputs (it multiplies them); the others can.
        calls.append((forward, (x.detach().to(torch.float8_e5m2), -1, torch.float32), NO_SCHEMA))
    backwards = (
        (ops.softmax_backward, torch.softmax),
        (ops.log_softmax_backward, torch.log_softmax),
    )
    for backward, reference in backwards:
        y = reference(torch.randn(4, 9, device=device), -1).requires_grad_()
        g = torch.randn(4, 9, device=device, requires_grad=True)
        calls.append((backward.default, (g, y, -1)))
    for op, args, *utilities in calls:
        shapes = [tuple(a.shape) if isinstance(a, torch.Tensor) else a for a in args]
        try:
            result = torch.library.opcheck(op, args, test_utils=utilities[0] if utilities else ALL)
        except Exception as e:  # opcheck raises OpCheckError on a failing utility
            raise AssertionError(f"opcheck {op} {shapes}: {str(e).splitlines()[0]}") from None
        if set(result.values()) != {"SUCCESS"}:
            raise AssertionError(f"opcheck {op} {shapes}: {result}")
    return len(calls)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m warp_softmax check", description=__doc__)
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this torch sees no CUDA device (torch.cuda.is_available())")
    devices = ["cpu", "cuda"] if args.device == "all" else [args.device]
    devices = [d for d in devices if d == "cpu" or torch.cuda.is_available()]
    failed = False
    for device in devices:
        parts = (
            ("kernel paths", check_kernel_paths),
            ("dtype=, FP8 and log_softmax paths", check_converting_paths),
            ("opcheck", opcheck_all),
        )
        for name, part in parts:
            start = time.perf_counter()
            try:
                count = part(device)
                print(f"ok    {device} {name}: {count} cases ({time.perf_counter() - start:.1f} s)")
            except AssertionError as e:
                failed = True
                print(f"FAIL  {device} {name}: {str(e).splitlines()[0][:300]}")
    return 1 if failed else 0
