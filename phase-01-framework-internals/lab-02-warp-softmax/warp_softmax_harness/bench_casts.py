"""The converting paths against what torch takes for the same result: FP8 in, FP8 out and
dtype= against the composite torch calls (an extra cast pass on either side of F.softmax), and
log_softmax against F.log_softmax. Interleaved medians in one process, timed by timing.py."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F
from warp_softmax import log_softmax, softmax

from .timing import time_on_device

E4M3 = torch.float8_e4m3fn


@dataclass
class CastResult:
    device: str
    path: str  # what is computed, e.g. "float8_e4m3fn -> float8_e4m3fn"
    torch_call: str  # the composite torch takes for it
    rows: int
    row_length: int
    ours_ms: float  # median
    torch_ms: float  # median
    speedup: float  # torch_ms / ours_ms

    def as_dict(self) -> dict:
        return asdict(self)


# (path, torch's composite, input dtype, ours(x), theirs(x)) for x of the input dtype.
CASES: list[tuple[str, str, torch.dtype, Callable, Callable]] = [
    ("fp8 e4m3 in, fp8 e4m3 out", "F.softmax(x.float(), -1).to(fp8)", E4M3,
     lambda x: softmax(x, -1), lambda x: F.softmax(x.float(), -1).to(E4M3)),
    ("fp8 e4m3 in, float32 out", "F.softmax(x.float(), -1)", E4M3,
     lambda x: softmax(x, -1, torch.float32), lambda x: F.softmax(x.float(), -1)),
    ("float32 in, dtype=fp8 e4m3", "F.softmax(x, -1).to(fp8)", torch.float32,
     lambda x: softmax(x, -1, E4M3), lambda x: F.softmax(x, -1).to(E4M3)),
    ("bfloat16 in, dtype=fp8 e4m3", "F.softmax(x.float(), -1).to(fp8)", torch.bfloat16,
     lambda x: softmax(x, -1, E4M3), lambda x: F.softmax(x.float(), -1).to(E4M3)),
    ("bfloat16 in, dtype=float32", "F.softmax(x, -1, dtype=torch.float32)", torch.bfloat16,
     lambda x: softmax(x, -1, torch.float32), lambda x: F.softmax(x, -1, dtype=torch.float32)),
    ("float16 in, dtype=float32", "F.softmax(x, -1, dtype=torch.float32)", torch.float16,
     lambda x: softmax(x, -1, torch.float32), lambda x: F.softmax(x, -1, dtype=torch.float32)),
    ("log_softmax float32", "F.log_softmax(x, -1)", torch.float32,
     lambda x: log_softmax(x, -1), lambda x: F.log_softmax(x, -1)),
    ("log_softmax bfloat16 in, dtype=float32", "F.log_softmax(x, -1, dtype=torch.float32)",
     torch.bfloat16, lambda x: log_softmax(x, -1, torch.float32),
     lambda x: F.log_softmax(x, -1, dtype=torch.float32)),
]  # fmt: skip


def run_casts(
    device: str,
    row_lengths: list[int],
    elements: int,
    reps: int,
    progress: Callable[[CastResult], None] | None = None,
) -> list[CastResult]:
    results = []
    for path, torch_call, in_dtype, ours, theirs in CASES:
        for n in row_lengths:
            rows = max(1, elements // n)
            x = (torch.randn(rows, n, device=device) * 3).to(in_dtype)
            calls = {"ours": lambda f=ours, t=x: f(t), "torch": lambda f=theirs, t=x: f(t)}
            timings, _ = time_on_device(calls, device, reps=reps, warmup=max(2, reps // 5))
            ours_s, torch_s = timings.median("ours"), timings.median("torch")
            result = CastResult(
                device, path, torch_call, rows, n, ours_s * 1e3, torch_s * 1e3, torch_s / ours_s
            )
            results.append(result)
            if progress is not None:
                progress(result)
    return results


def casts_summary(results: list[CastResult]) -> dict:
    """The target: >= 1.5x at rows of >= 4096 elements for the FP8 and dtype= paths."""
    long_rows = [r for r in results if r.row_length >= 4096 and "log_softmax" not in r.path]
    lowest = min((r.speedup for r in long_rows), default=None)
    return {
        "min_speedup_fp8_and_dtype_n_ge_4096": lowest,
        "target_1_5x_met": lowest is not None and lowest >= 1.5,
    }


def print_cast_result(r: CastResult) -> None:
    print(
        f"{r.device:4} {r.path:40} {r.rows:6d} x {r.row_length:<6d} warp {r.ours_ms:8.3f} ms  "
        f"{r.torch_call:40} {r.torch_ms:8.3f} ms  speedup {r.speedup:5.2f}x",
        flush=True,
    )
