"""Lab 02's part of the demo report: ``build_section(out_dir, quick)``.

Builds nothing (``make setup``'s editable install built ``warp_softmax.so``); checks the op
against F.softmax, runs opcheck, gradcheck, a fresh-process load of the .so alone,
torch.compile (full run only), and a short benchmark whose speedup-vs-row-length plot goes
into ``out_dir``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import torch
from phase01_common.report import Check, Image, Section, Table, step
from warp_softmax import (
    LIBRARY_PATH,
    cpu_capabilities,
    cpu_capability,
    softmax,
    threads_used,
)

from .compare import check_converting_paths, compare_with_f_softmax
from .scenarios import ROW_LENGTHS
from .timing import BenchResult, plot_speedups, run_grid, steady_allocator

# The float32 check's largest difference from F.softmax, for the headline.
_WORST_FLOAT32_ERROR = float("nan")


def _check_values() -> list[Check]:
    torch.manual_seed(0)
    worst = {torch.float32: 0.0, torch.bfloat16: 0.0, torch.float16: 0.0}
    failures = []
    for n in ROW_LENGTHS:
        x = torch.randn(max(2, 8192 // n), 3, n)
        for dim, layout in [(-1, x), (1, x), (0, x.transpose(0, 2))]:
            for dtype in worst:
                tol = {"atol": 1e-6, "rtol": 0.0} if dtype == torch.float32 else {}
                try:
                    err = compare_with_f_softmax(layout.to(dtype), dim, **tol)
                    worst[dtype] = max(worst[dtype], err)
                except AssertionError as e:
                    failures.append(f"n={n} dim={dim} {dtype}: {str(e).splitlines()[0]}")
    global _WORST_FLOAT32_ERROR
    _WORST_FLOAT32_ERROR = worst[torch.float32]
    return [
        Check(
            "float32 equals F.softmax within 1e-6 (rows 1..32768, any dim, transposed)",
            not any("float32" in f for f in failures),
            f"max |diff| {worst[torch.float32]:.2e}",
            "; ".join(f for f in failures if "float32" in f)[:300],
        ),
        Check(
            "bfloat16 / float16 equal F.softmax at torch.testing's tolerances",
            not any("float32" not in f for f in failures),
            f"max |diff| bf16 {worst[torch.bfloat16]:.1e}, fp16 {worst[torch.float16]:.1e}",
            "; ".join(f for f in failures if "float32" not in f)[:300],
        ),
    ]


def _check_converting() -> Check:
    try:
        cases, failure = check_converting_paths("cpu"), ""
    except AssertionError as e:
        cases, failure = 0, str(e).splitlines()[0][:300]
    return Check(
        "log_softmax, dtype= (widening) and FP8 in/out equal torch (FP8: bit-equal or a tie)",
        not failure,
        f"{cases} cases, rows 1..4101, aligned and misaligned",
        failure,
    )


def _check_opcheck_and_grads() -> list[Check]:
    cases = [
        (torch.randn(4, 8, requires_grad=True), -1),
        (torch.randn(3, 6, 5).transpose(0, 2).detach().requires_grad_(), 1),
        (torch.randn(5, 3, dtype=torch.bfloat16, requires_grad=True), 0),
    ]
    results = {}
    for args in cases:
        for name, status in torch.library.opcheck(
            torch.ops.warp_softmax.softmax.default, args
        ).items():
            results.setdefault(name, set()).add(status)
    opcheck_ok = len(results) == 4 and all(v == {"SUCCESS"} for v in results.values())
    x = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    grad_ok = torch.autograd.gradcheck(lambda t: softmax(t, -1), (x,)) and (
        torch.autograd.gradgradcheck(lambda t: softmax(t, -1), (x,))
    )
    return [
        Check(
            "torch.library.opcheck passes every test utility (inputs require grad)",
            opcheck_ok,
            ", ".join(sorted(results)) + f" on {len(cases)} inputs",
        ),
        Check("gradcheck and gradgradcheck pass in float64", grad_ok, "3x5 float64, dim=-1"),
    ]


def _check_fresh_process() -> Check:
    code = textwrap.dedent(
        f"""
        import json, sys, torch
        torch.ops.load_library({str(LIBRARY_PATH)!r})
        x = torch.randn(4, 4096, requires_grad=True)
        y = torch.ops.warp_softmax.softmax(x, -1)
        y.sum().backward()
        print(json.dumps({{"err": (y.detach() - torch.softmax(x.detach(), -1)).abs().max().item(),
                          "package": "warp_softmax" in sys.modules}}))
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=os.environ
    )
    ok = proc.returncode == 0
    result = json.loads(proc.stdout.strip().splitlines()[-1]) if ok else {}
    ok = ok and result["err"] <= 1e-6 and not result["package"]
    return Check(
        "torch.ops.load_library(warp_softmax.so) alone works in a fresh process",
        ok,
        f"forward+backward, max |diff| {result.get('err', float('nan')):.1e}",
        "" if ok else proc.stderr[-300:],
    )


def _check_compile() -> Check:
    def model(x):
        return (softmax(x, -1) * torch.arange(x.shape[-1])).sum()

    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    ok = True
    for rows in (8, 12):
        x = torch.randn(rows, 32, requires_grad=True)
        (g_c,) = torch.autograd.grad(compiled(x), x)
        (g_e,) = torch.autograd.grad(model(x), x)
        ok = ok and torch.allclose(g_c, g_e, atol=1e-5, rtol=1e-5)
    return Check(
        "torch.compile(fullgraph=True, dynamic=True) with backward matches eager",
        ok,
        "2 shapes, no graph break (fullgraph)",
    )


def _machine_checks() -> list[Check]:
    widest = cpu_capabilities()[0]
    threads = torch.get_num_threads()
    used = threads_used(4096, 4096)
    return [
        Check(
            "CPU kernel: widest SIMD variant chosen at run time",
            cpu_capability() == widest,
            f"{cpu_capability()} (runnable here: {', '.join(cpu_capabilities())})",
        ),
        Check(
            "at::parallel_for uses every torch thread (OpenMP compiled in)",
            used == threads and (threads >= 2 or (os.cpu_count() or 1) < 2),
            f"{used} of {threads} threads",
        ),
    ]


def _benchmark(quick: bool) -> tuple[list[BenchResult], str]:
    """Forward and forward+backward, float32 and bfloat16, medians of interleaved calls."""
    with step("warp_softmax: benchmark vs F.softmax"), steady_allocator() as allocator:
        results = run_grid(
            "cpu",
            [4096, 32768] if quick else [128, 1024, 4096, 8192, 32768],
            [torch.float32, torch.bfloat16],
            ["forward", "forward+backward"],
            elements=1 << 20,
            reps=20 if quick else 30,
        )
    return results, allocator


def _benchmark_checks(results: list[BenchResult]) -> tuple[list[Check], dict[str, float]]:
    """The 1.2x target per mode and the 0.95x floor; also the lowest speedup per mode."""
    checks, lowest = [], {}
    for mode in ("forward", "forward+backward"):
        f32_long = [
            r for r in results if r.dtype == "float32" and r.mode == mode and r.row_length >= 4096
        ]
        lowest[mode] = min(r.speedup for r in f32_long)
        checks.append(
            Check(
                f"CPU {mode} float32 >= 1.2x F.softmax at row length >= 4096",
                lowest[mode] >= 1.2,
                f"lowest {lowest[mode]:.2f}x over {len(f32_long)} shapes (medians)",
                "benchmark on a shared machine: load varies" if lowest[mode] < 1.2 else "",
                benchmark=True,
            )
        )
    worst_all = min(results, key=lambda r: r.speedup)
    checks.append(
        Check(
            "never below 0.95x F.softmax (CPU grid)",
            worst_all.speedup >= 0.95,
            f"lowest {worst_all.speedup:.2f}x ({worst_all.dtype} {worst_all.mode} "
            f"n={worst_all.row_length})",
            benchmark=True,
        )
    )
    return checks, lowest


def _results_table(results: list[BenchResult], allocator: str) -> Table:
    return Table(
        title=(
            f"CPU, {torch.get_num_threads()} threads, kernel {cpu_capability()}: median latency "
            f"({allocator})"
        ),
        columns=["dtype", "mode", "rows x n", "warp_softmax ms", "F.softmax ms", "speedup"],
        rows=[
            [r.dtype, r.mode, f"{r.rows} x {r.row_length}", r.ours_ms, r.torch_ms, r.speedup]
            for r in results
        ],
    )


def build_section(out_dir: Path, quick: bool) -> Section:
    """Run Lab 02's checks and a short benchmark; plots go into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    section = Section(title="Lab 02 — warp_softmax: a custom C++/CUDA operator")
    section.checks += _machine_checks()
    with step("warp_softmax: values vs F.softmax"):
        section.checks += _check_values()
    with step("warp_softmax: log_softmax, dtype=, FP8 vs torch"):
        section.checks.append(_check_converting())
    with step("warp_softmax: opcheck, gradcheck"):
        section.checks += _check_opcheck_and_grads()
    with step("warp_softmax: load_library in a fresh process"):
        section.checks.append(_check_fresh_process())
    if not quick:
        with step("warp_softmax: torch.compile (about 20 s)"):
            section.checks.append(_check_compile())
    results, allocator = _benchmark(quick)
    bench_checks, lowest = _benchmark_checks(results)
    section.checks += bench_checks
    section.headline = [
        ("CPU forward vs F.softmax, float32, n >= 4096", f"{lowest['forward']:.2f}x (lowest)"),
        ("CPU forward+backward", f"{lowest['forward+backward']:.2f}x (lowest)"),
        ("max |error| vs F.softmax, float32", f"{_WORST_FLOAT32_ERROR:.1e} (limit 1e-6)"),
    ]
    section.tables.append(_results_table(results, allocator))
    threads = torch.get_num_threads()
    png = plot_speedups(
        results,
        out_dir / "warp_softmax_speedup.png",
        f"warp_softmax vs F.softmax, CPU ({threads} threads, {cpu_capability()})",
    )
    section.images.append(
        Image(png, "Speedup over F.softmax against row length, float32 and bfloat16 (CPU).")
    )
    section.texts.append(
        (
            "How to reproduce",
            ".venv/bin/python -m pytest phase-01-framework-internals/lab-02-warp-softmax\n"
            ".venv/bin/python -m warp_softmax demo            # these checks, printed\n"
            ".venv/bin/python -m warp_softmax bench --quick   # the benchmark (temp folder)",
        )
    )
    return section
