"""Benchmark core shared by bench.py and the demo section: warp_softmax against F.softmax in
the same process, interleaved call by call so both see the same machine load, reported as
medians, speedup ratios (F.softmax time / warp_softmax time) and effective GB/s."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from . import softmax

# Bytes moved per element, counting each tensor read or written once.
BYTES_PER_ELEMENT_FACTOR = {"forward": 2, "forward+backward": 5}  # fwd: x,y; bwd: +g,y,dx


@dataclass
class BenchResult:
    device: str
    dtype: str
    mode: str  # "forward" or "forward+backward"; " (dim=1 of [rows, n, 16])" when not last
    rows: int
    row_length: int
    ours_ms: float  # median
    torch_ms: float  # median
    speedup: float  # torch_ms / ours_ms
    ours_gbps: float
    torch_gbps: float

    def as_dict(self) -> dict:
        return asdict(self)


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _time_interleaved(
    fns: list[Callable[[], object]], device: str, reps: int, warmup: int
) -> list[float]:
    """Median seconds per call of each fn; calls alternate (and their order flips every
    repetition) so slow phases of a shared machine hit every fn alike."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    _synchronize(device)
    samples: list[list[float]] = [[] for _ in fns]
    for rep in range(reps):
        order = range(len(fns)) if rep % 2 == 0 else reversed(range(len(fns)))
        for i in order:
            _synchronize(device)
            start = time.perf_counter()
            fns[i]()
            _synchronize(device)
            samples[i].append(time.perf_counter() - start)
    return [statistics.median(s) for s in samples]


def _workload(fn, x: torch.Tensor, grad: torch.Tensor, mode: str, dim: int) -> Callable[[], object]:
    if mode == "forward":
        return lambda: fn(x, dim)

    def forward_backward() -> None:
        leaf = x.detach().requires_grad_()
        fn(leaf, dim).backward(grad)

    return forward_backward


INNER = 16  # trailing size for the non-last-dimension case


def bench_one(
    device: str,
    dtype: torch.dtype,
    mode: str,
    rows: int,
    row_length: int,
    reps: int,
    last_dim: bool = True,
) -> BenchResult:
    """Softmax over rows of `row_length` (`last_dim`), or over dim 1 of a contiguous
    [rows // 16, row_length, 16] tensor (the strided, non-last-dimension case)."""
    if mode not in BYTES_PER_ELEMENT_FACTOR:
        raise ValueError(f"mode must be one of {list(BYTES_PER_ELEMENT_FACTOR)}, got {mode!r}")
    if last_dim:
        x = torch.randn(rows, row_length, device=device).to(dtype)
    else:
        x = torch.randn(max(1, rows // INNER), row_length, INNER, device=device).to(dtype)
    dim = -1 if last_dim else 1
    grad = torch.randn_like(x)
    ours, theirs = _time_interleaved(
        [_workload(softmax, x, grad, mode, dim), _workload(F.softmax, x, grad, mode, dim)],
        device,
        reps=reps,
        warmup=max(2, reps // 5),
    )
    nbytes = BYTES_PER_ELEMENT_FACTOR[mode] * x.numel() * x.element_size()
    return BenchResult(
        device=device,
        dtype=str(dtype).removeprefix("torch."),
        mode=mode if last_dim else f"{mode} (dim=1 of [rows, n, {INNER}])",
        rows=x.numel() // row_length,
        row_length=row_length,
        ours_ms=ours * 1e3,
        torch_ms=theirs * 1e3,
        speedup=theirs / ours,
        ours_gbps=nbytes / ours / 1e9,
        torch_gbps=nbytes / theirs / 1e9,
    )


def run_grid(
    device: str,
    row_lengths: list[int],
    dtypes: list[torch.dtype],
    modes: list[str],
    elements: int,
    reps: int,
    progress: Callable[[BenchResult], None] | None = None,
    last_dim: bool = True,
) -> list[BenchResult]:
    """Every (dtype, mode, row_length) with rows = elements // row_length (at least 1)."""
    results = []
    for dtype in dtypes:
        for mode in modes:
            for n in row_lengths:
                rows = max(1, elements // n)
                result = bench_one(device, dtype, mode, rows, n, reps, last_dim)
                results.append(result)
                if progress is not None:
                    progress(result)
    return results


def copy_bandwidth_gbps(device: str, elements: int = 1 << 27, reps: int = 20) -> float:
    """The device's measured copy bandwidth (bytes read + written per second), the ceiling a
    memory-bound kernel such as softmax can approach."""
    src = torch.empty(elements, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    (seconds,) = _time_interleaved([lambda: dst.copy_(src)], device, reps=reps, warmup=3)
    return 2 * src.numel() * src.element_size() / seconds / 1e9


def plot_speedups(results: list[BenchResult], path: Path, title: str) -> Path:
    """Speedup over F.softmax against row length: one panel per dtype, one line per
    (device, mode). Points above the axis are drawn at its top edge with their value."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dtypes = sorted({r.dtype for r in results}, key=lambda d: (d != "float32", d))
    fig, axes = plt.subplots(1, len(dtypes), figsize=(6 * len(dtypes), 4.4), squeeze=False)
    top = 2.5
    for ax, dtype in zip(axes[0], dtypes, strict=True):
        for device, mode in sorted({(r.device, r.mode) for r in results if r.dtype == dtype}):
            points = sorted(
                (r.row_length, r.speedup)
                for r in results
                if (r.device, r.dtype, r.mode) == (device, dtype, mode)
            )
            xs, ys = zip(*points, strict=True)
            line = ax.plot(xs, [min(y, top) for y in ys], marker="o", label=f"{device} {mode}")
            for x, y in points:
                if y > top:
                    ax.annotate(
                        f"{y:.1f}x",
                        (x, top),
                        textcoords="offset points",
                        xytext=(4, -12),
                        fontsize=7,
                        color=line[0].get_color(),
                    )
        ax.axhline(1.0, color="gray", lw=1)
        ax.axhline(1.2, color="green", lw=1, ls="--", label="target 1.2x (float32, n >= 4096)")
        ax.axhline(0.95, color="red", lw=1, ls=":", label="floor 0.95x")
        ax.set_xscale("log", base=2)
        ax.set_ylim(0.5, top + 0.05)
        ax.set_xlabel("row length n (softmax dim)")
        ax.set_ylabel("speedup vs F.softmax (higher is better)")
        ax.set_title(f"{dtype}")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
