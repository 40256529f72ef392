"""Benchmark: warp_softmax vs F.softmax, CPU (all of torch's threads) and CUDA when present.

    python -m warp_softmax bench                # full grid -> a new temp folder (printed)
    python -m warp_softmax bench --quick        # a few shapes, for a smoke run
    python -m warp_softmax bench --out results  # replace the figures the README quotes

Results go to a fresh temporary folder unless --out names one, so a run never overwrites the
committed results/ files by accident.

Medians of interleaved calls in one process; speedup = F.softmax time / warp_softmax time;
GB/s counts each tensor read or written once (forward: x, y; backward adds g, y, dx).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import sys
import tempfile
from pathlib import Path

import torch
import warp_softmax
from phase01_common.cli import OneLineArgumentParser, OutputPathError, positive_int, prepare_out_dir

from .bench_casts import casts_summary, print_cast_result, run_casts
from .timing import (
    BenchResult,
    bench_backward_op,
    copy_bandwidth_gbps,
    plot_speedups,
    run_grid,
    steady_allocator,
)

FULL_ROW_LENGTHS = [7, 128, 512, 1024, 2048, 4096, 8192, 16384, 32768]
QUICK_ROW_LENGTHS = [128, 1024, 4096, 32768]


def print_result(r: BenchResult) -> None:
    print(
        f"{r.device:4} {r.dtype:8} {r.mode:16} {r.rows:6d} x {r.row_length:<6d} "
        f"warp {r.ours_ms:8.3f} ms  F.softmax {r.torch_ms:8.3f} ms  "
        f"speedup {r.speedup:5.2f}x  {r.ours_gbps:6.1f} vs {r.torch_gbps:6.1f} GB/s  "
        f"page faults/call {r.ours_page_faults:.0f} vs {r.torch_page_faults:.0f}",
        flush=True,
    )


def cpu_summary(results: list[BenchResult]) -> dict:
    """The targets: >= 1.2x at n >= 4096 in float32, never below 0.95x anywhere."""

    def lowest(mode: str) -> float | None:
        rs = [
            r.speedup
            for r in results
            if r.dtype == "float32" and r.row_length >= 4096 and r.mode == mode
        ]
        return min(rs) if rs else None

    forward, both = lowest("forward"), lowest("forward+backward")
    overall = min(r.speedup for r in results)
    return {
        "min_speedup_float32_forward_n_ge_4096": forward,
        "min_speedup_float32_forward_backward_n_ge_4096": both,
        "min_speedup_overall": overall,
        "target_1_2x_forward_met": forward is not None and forward >= 1.2,
        "target_1_2x_forward_backward_met": both is not None and both >= 1.2,
        "floor_0_95x_met": overall >= 0.95,
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    allocator = (
        contextlib.nullcontext("glibc malloc as is") if args.malloc_as_is else steady_allocator()
    )
    with allocator as allocator_description:
        run(args, allocator_description)
    return 0


def output_folder(out: Path | None) -> Path:
    """--out as a folder that exists and can be written (a fresh temp folder when not given);
    anything else raises ``OutputPathError`` with one line, before any timing."""
    if out is None:
        return Path(tempfile.mkdtemp(prefix="warp-softmax-bench-"))
    return prepare_out_dir(out)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = OneLineArgumentParser(
        prog="python -m warp_softmax bench", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--quick", action="store_true", help="a few shapes, fewer repetitions")
    parser.add_argument(
        "--out", type=Path, default=None, help="output folder (default: a new temp folder)"
    )
    parser.add_argument("--device", choices=["cpu", "cuda", "all"], default="all")
    parser.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="CPU threads (default: torch's, i.e. every core); 1 isolates the kernels from "
        "thread scheduling on a busy machine",
    )
    parser.add_argument(
        "--backward-op",
        action="store_true",
        help="instead of the grid: softmax_backward alone vs ATen's _softmax_backward_data, "
        "inputs in cache (1 pair) and from memory (8 pairs) -> results/bench-backward-op.json",
    )
    parser.add_argument(
        "--casts",
        action="store_true",
        help="instead of the grid: only the FP8 in/out, dtype= and log_softmax paths against "
        "torch's composite calls -> bench-casts.json",
    )
    parser.add_argument(
        "--malloc-as-is",
        action="store_true",
        help="leave glibc malloc's moving thresholds alone (default: fix them, see "
        "warp_softmax.benchmark.steady_allocator; as is, some points time page faults)",
    )
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: this torch sees no CUDA device (torch.cuda.is_available())")
    try:
        args.out = output_folder(args.out)
    except OutputPathError as exc:
        parser.exit(2, f"{parser.prog}: error: {exc}\n")
    given = sys.argv[1:] if argv is None else argv
    args.command_line = " ".join(["python -m warp_softmax bench", *given])
    return args


def report_header(command_line: str, allocator: str) -> dict:
    """What every JSON report records about how it was measured."""
    return {
        "command": command_line,
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "cpu_threads": torch.get_num_threads(),
        "cpu_kernel": warp_softmax.cpu_capability(),
        "allocator": allocator,
        # The machine may be shared: the load average says how quiet it was.
        "load_average_1_5_15_min": list(os.getloadavg()),
    }


def run(args: argparse.Namespace, allocator: str) -> None:
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.backward_op:
        run_backward_op(args, allocator)
        return
    if args.casts:
        report = report_header(args.command_line, allocator)
        report["casts"], report["casts_summary"] = run_cast_paths(args)
        path = args.out / f"bench-casts{'-quick' if args.quick else ''}.json"
        path.write_text(json.dumps(report, indent=2))
        print("casts_summary", json.dumps(report["casts_summary"], indent=1))
        print(f"wrote {path}")
        return

    row_lengths = QUICK_ROW_LENGTHS if args.quick else FULL_ROW_LENGTHS
    modes = ["forward", "forward+backward"]
    dtypes = [torch.float32, torch.bfloat16]
    report = report_header(args.command_line, allocator)
    report["threads_used_by_kernel"] = warp_softmax.threads_used(1024, 4096)
    report["results"] = []
    print(
        f"torch {torch.__version__}, {torch.get_num_threads()} CPU threads, kernel "
        f"{warp_softmax.cpu_capability()}, parallel_for uses "
        f"{report['threads_used_by_kernel']} threads"
    )
    all_results: list[BenchResult] = []
    if args.device in ("cpu", "all"):
        cpu = run_grid(
            "cpu",
            row_lengths,
            dtypes,
            modes,
            elements=1 << 20,
            reps=15 if args.quick else 40,
            progress=print_result,
        )
        report["cpu_summary"] = cpu_summary(cpu)
        # Softmax over a non-last dimension (strided columns), forward only.
        cpu += run_grid(
            "cpu",
            row_lengths[1::2],
            dtypes,
            ["forward"],
            elements=1 << 20,
            reps=15 if args.quick else 40,
            progress=print_result,
            last_dim=False,
        )
        report["cpu_summary"]["min_speedup_overall_incl_non_last_dim"] = min(r.speedup for r in cpu)
        all_results += cpu
    if args.device in ("cuda", "all") and torch.cuda.is_available():
        copy_gbps = copy_bandwidth_gbps("cuda")
        print(f"CUDA {torch.cuda.get_device_name()}: copy bandwidth {copy_gbps:.0f} GB/s")
        gpu = run_grid(
            "cuda",
            row_lengths,
            dtypes + [torch.float16],
            modes,
            elements=1 << 26,
            reps=10 if args.quick else 30,  # each sample is CUDA_CALLS_PER_SAMPLE calls
            progress=print_result,
        )
        f32_long = [r for r in gpu if r.row_length >= 4096 and r.mode == "forward"]
        report["cuda_summary"] = {
            "device": torch.cuda.get_device_name(),
            "copy_bandwidth_gbps": copy_gbps,
            "min_speedup_forward_n_ge_4096": min(r.speedup for r in f32_long),
            "min_fraction_of_copy_bandwidth_forward_n_ge_4096": min(
                r.ours_gbps / copy_gbps for r in f32_long
            ),
        }
        all_results += gpu
    report["results"] = [r.as_dict() for r in all_results]
    report["casts"], report["casts_summary"] = run_cast_paths(args)
    suffix = (
        ("-quick" if args.quick else "")
        + (f"-{args.threads}t" if args.threads else "")
        + ("-malloc-as-is" if args.malloc_as_is else "")
    )
    json_path = args.out / f"bench{suffix}.json"
    json_path.write_text(json.dumps(report, indent=2))
    png_path = plot_speedups(
        all_results,
        args.out / f"bench{suffix}.png",
        f"warp_softmax vs F.softmax ({report['cpu_threads']} CPU threads, {report['cpu_kernel']})",
    )
    for key in ("cpu_summary", "cuda_summary", "casts_summary"):
        if key in report:
            print(key, json.dumps(report[key], indent=1))
    print(f"wrote {json_path} and {png_path}")


def run_cast_paths(args: argparse.Namespace) -> tuple[list[dict], dict]:
    """FP8 in / out, dtype= and log_softmax against torch's composite calls (bench_casts)."""
    devices = [d for d in ("cpu", "cuda") if args.device in (d, "all")]
    devices = [d for d in devices if d == "cpu" or torch.cuda.is_available()]
    results = []
    for device in devices:
        results += run_casts(
            device,
            [1024, 4096, 32768] if args.quick else [128, 1024, 4096, 8192, 32768],
            elements=1 << 20 if device == "cpu" else 1 << 26,
            reps=15 if args.quick else 40,
            progress=print_cast_result,
        )
    summary = {d: casts_summary([r for r in results if r.device == d]) for d in devices}
    return [r.as_dict() for r in results], summary


def run_backward_op(args: argparse.Namespace, allocator: str) -> None:
    results = []
    for dtype in (torch.float32, torch.bfloat16):
        for n in (4096, 32768):
            for pairs in (1, 8):
                r = bench_backward_op(dtype, n, pairs, reps=10 if args.quick else 30)
                results.append(r.as_dict())
                where = "in cache   " if pairs == 1 else "from memory"
                print(
                    f"softmax_backward {r.dtype:8} {r.rows:5d} x {r.row_length:<6d} inputs "
                    f"{where}: warp {r.ours_ms:.3f} ms  ATen {r.aten_ms:.3f} ms  "
                    f"speedup {r.speedup:.2f}x",
                    flush=True,
                )
    suffix = f"-{args.threads}t" if args.threads else ""
    path = args.out / f"bench-backward-op{suffix}.json"
    report = report_header(args.command_line, allocator)
    report["streaming_stores"] = os.environ.get("WARP_SOFTMAX_STREAMING_STORES", "1") != "0"
    report["results"] = results
    path.write_text(json.dumps(report, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
