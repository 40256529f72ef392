"""``python -m warp_softmax check [--device cpu|cuda|all]``: the accuracy sweep over every
kernel path (row lengths around each kernel boundary, aligned and misaligned rows, -inf and
NaN) and torch.library.opcheck on every op, with a line per part and exit code 1 on a failure.
gpu_check.sh runs the sweep under compute-sanitizer."""

from __future__ import annotations

import argparse
import time

import torch

from .compare import check_kernel_paths
from .scenarios import opcheck_cases


def opcheck_all(device: str) -> int:
    """opcheck on softmax for every case of scenarios.opcheck_cases and on softmax_backward;
    raises AssertionError naming the failing case; returns the number of calls checked."""
    checked = 0
    for args in opcheck_cases(device):
        result = torch.library.opcheck(torch.ops.warp_softmax.softmax.default, args)
        if set(result.values()) != {"SUCCESS"}:
            raise AssertionError(f"opcheck softmax {tuple(args[0].shape)} dim={args[1]}: {result}")
        checked += 1
    y = torch.softmax(torch.randn(4, 9, device=device), -1).requires_grad_()
    g = torch.randn(4, 9, device=device, requires_grad=True)
    result = torch.library.opcheck(torch.ops.warp_softmax.softmax_backward.default, (g, y, -1))
    if set(result.values()) != {"SUCCESS"}:
        raise AssertionError(f"opcheck softmax_backward: {result}")
    return checked + 1


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
        for name, part in (("kernel paths", check_kernel_paths), ("opcheck", opcheck_all)):
            start = time.perf_counter()
            try:
                count = part(device)
                print(f"ok    {device} {name}: {count} cases ({time.perf_counter() - start:.1f} s)")
            except AssertionError as e:
                failed = True
                print(f"FAIL  {device} {name}: {str(e).splitlines()[0][:300]}")
    return 1 if failed else 0
