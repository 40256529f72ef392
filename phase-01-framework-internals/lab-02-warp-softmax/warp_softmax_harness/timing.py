"""Benchmark core shared by bench.py and the demo section (report_section.py): warp_softmax
against F.softmax in the same process, interleaved call by call so both see the same machine
load, reported as medians, speedup ratios (F.softmax time / warp_softmax time) and effective
GB/s."""

from __future__ import annotations

import contextlib
import ctypes
import resource
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from phase01_common.timing import Timings, time_interleaved
from warp_softmax import softmax, softmax_backward

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
    # Minor page faults per call (process-wide, so CPU-side only): a few thousand per call means
    # the allocator handed out fresh pages and the timing is mostly the kernel zeroing them.
    ours_page_faults: float = 0.0
    torch_page_faults: float = 0.0

    def as_dict(self) -> dict:
        return asdict(self)


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def time_on_device(
    fns: dict[str, Callable[[], object]], device: str, reps: int, warmup: int
) -> tuple[Timings, dict[str, float]]:
    """Each fn timed on ``device`` by the shared interleaved loop (:mod:`phase01_common.timing`:
    rounds whose orders balance each fn's position and predecessor), each sample by
    :func:`time_call`; and each fn's minor page faults per timed call."""
    faults = dict.fromkeys(fns, 0)
    name_of = {id(fn): name for name, fn in fns.items()}

    def timer(fn: Callable[[], object]) -> float:
        before = _minor_faults()
        seconds = time_call(fn, device)
        faults[name_of[id(fn)]] += _minor_faults() - before
        return seconds

    timings = time_interleaved(fns, rounds=reps, warmup=warmup, timer=timer)
    return timings, {name: count / reps for name, count in faults.items()}


CUDA_CALLS_PER_SAMPLE = 10


def time_call(fn: Callable[[], object], device: str) -> float:
    """Seconds per call. On CUDA: CUDA events around CUDA_CALLS_PER_SAMPLE queued calls, so
    a ~0.1 ms kernel is not measured together with a host synchronization per call."""
    if device != "cuda":
        start = time.perf_counter()
        fn()
        return time.perf_counter() - start
    torch.cuda.synchronize()
    start_event = torch.cuda.Event(enable_timing=True)
    end_event = torch.cuda.Event(enable_timing=True)
    start_event.record()
    for _ in range(CUDA_CALLS_PER_SAMPLE):
        fn()
    end_event.record()
    end_event.synchronize()
    return start_event.elapsed_time(end_event) / 1e3 / CUDA_CALLS_PER_SAMPLE


# glibc's mallopt parameters (malloc.h) and their documented defaults.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
_GLIBC_DEFAULT_THRESHOLD = 128 * 1024


def _mallopt() -> Callable[[int, int], int] | None:
    try:
        libc = ctypes.CDLL(None)
        libc.gnu_get_libc_version  # noqa: B018 -- raises AttributeError where libc isn't glibc
        return libc.mallopt
    except (OSError, AttributeError):
        return None


@contextlib.contextmanager
def steady_allocator(threshold_bytes: int = 32 << 20) -> Iterator[str]:
    """Keep freed tensor memory in glibc's heap while benchmarking, so both ops reuse mapped
    pages instead of faulting in fresh ones.

    torch's CPU allocator is plain malloc. glibc serves a 4 MiB block from its heap or from a
    fresh mmap depending on a threshold it moves at run time, and gives heap memory back to the
    kernel when more than twice that threshold is free at the top. Which regime a benchmark
    point lands in depends on what ran before it: in the fresh-page regime every call takes
    about 1,000 page faults per 4 MiB tensor and the kernel zeroes each page, ~4 ms per
    forward+backward for *both* ops, and the kernels' difference vanishes in it (measured:
    README "Speed (CPU)"). Fixed thresholds make every point steady; jemalloc or tcmalloc
    (PyTorch's CPU tuning guide) do the same for a real workload. On exit both thresholds go
    back to glibc's initial 128 KiB (its run-time adjustment of them stays off). Yields a
    description for the report."""
    mallopt = _mallopt()
    if mallopt is None:
        yield "allocator as is (not glibc)"
        return
    mallopt(_M_MMAP_THRESHOLD, threshold_bytes)
    mallopt(_M_TRIM_THRESHOLD, 8 * threshold_bytes)
    try:
        yield (
            f"glibc malloc with fixed thresholds: mmap >= {threshold_bytes >> 20} MiB, "
            f"trim > {8 * threshold_bytes >> 20} MiB (steady_allocator)"
        )
    finally:
        mallopt(_M_MMAP_THRESHOLD, _GLIBC_DEFAULT_THRESHOLD)
        mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULT_THRESHOLD)


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
    timings, faults = time_on_device(
        {
            "ours": _workload(softmax, x, grad, mode, dim),
            "torch": _workload(F.softmax, x, grad, mode, dim),
        },
        device,
        reps=reps,
        warmup=max(2, reps // 5),
    )
    ours, theirs = timings.median("ours"), timings.median("torch")
    ours_faults, torch_faults = faults["ours"], faults["torch"]
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
        ours_page_faults=ours_faults,
        torch_page_faults=torch_faults,
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


@dataclass
class BackwardOpResult:
    """softmax_backward alone against ATen's _softmax_backward_data (what F.softmax's autograd
    calls), on `pairs` distinct (grad_output, output) pairs used in turn: 1 pair stays in cache
    between calls, 8 pairs of 4 MiB (64 MiB) make every call read its inputs from memory."""

    dtype: str
    rows: int
    row_length: int
    pairs: int
    ours_ms: float  # median
    aten_ms: float  # median
    speedup: float  # aten_ms / ours_ms

    def as_dict(self) -> dict:
        return asdict(self)


def bench_backward_op(
    dtype: torch.dtype, row_length: int, pairs: int, reps: int, elements: int = 1 << 20
) -> BackwardOpResult:
    rows = max(1, elements // row_length)
    inputs = [
        (
            torch.randn(rows, row_length).to(dtype),
            torch.softmax(torch.randn(rows, row_length), -1).to(dtype),
        )
        for _ in range(pairs)
    ]

    def over_pairs(fn: Callable[[torch.Tensor, torch.Tensor], object]) -> Callable[[], object]:
        # One timed call runs every pair once; the per-call time is that divided by `pairs`.
        return lambda: [fn(g, y) for g, y in inputs]

    timings, _ = time_on_device(
        {
            "ours": over_pairs(lambda g, y: softmax_backward(g, y, -1)),
            "aten": over_pairs(lambda g, y: torch._softmax_backward_data(g, y, -1, dtype)),
        },
        "cpu",
        reps=reps,
        warmup=3,
    )
    ours, aten = timings.median("ours"), timings.median("aten")
    return BackwardOpResult(
        dtype=str(dtype).removeprefix("torch."),
        rows=rows,
        row_length=row_length,
        pairs=pairs,
        ours_ms=ours / pairs * 1e3,
        aten_ms=aten / pairs * 1e3,
        speedup=aten / ours,
    )


def copy_bandwidth_gbps(device: str, elements: int = 1 << 27, reps: int = 20) -> float:
    """The device's measured copy bandwidth (bytes read + written per second), the ceiling a
    memory-bound kernel such as softmax can approach."""
    src = torch.empty(elements, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    timings, _ = time_on_device({"copy": lambda: dst.copy_(src)}, device, reps=reps, warmup=3)
    seconds = timings.median("copy")
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
        series = sorted({(r.device, r.mode) for r in results if r.dtype == dtype})
        for k, (device, mode) in enumerate(series):
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
                        xytext=(4, -12 - 9 * k),  # one row of labels per series
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
        ax.legend(fontsize=7, loc="lower left")  # the top edge holds the off-scale labels
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
