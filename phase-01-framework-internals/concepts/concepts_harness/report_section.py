"""The concepts section of the demo report: every figure measured in this call.

``build_section(out_dir, quick)``: minigrad as a torch.compile backend (FX graphs before and
after decomposition, the decompositions applied, outputs/gradients/loss curves against eager),
FX passes, the precision plot and tables, the memory figures.
"""

from __future__ import annotations

from pathlib import Path

import torch
import torch._decomp
from concepts import compile_backend, fx_passes, memory, precision
from phase01_common.report import Check, Image, Section, Table, step

from concepts_harness import scenarios

TOL = 1e-10


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / memory.MiB:.2f} MiB"


def _compile_part(section: Section, quick: bool) -> float:
    x, y = scenarios.digits_batch(96 if quick else 360)
    steps = 5 if quick else 20
    worst = 0.0
    runs = {}
    cases = (
        ("digits MLP + cross-entropy", scenarios.digits_mlp(), True),
        ("swish MLP (loss eager)", scenarios.swish_mlp(), False),
    )
    for name, model, compile_loss in cases:
        with step(f"torch.compile({name}, backend=minigrad_backend) vs eager, {steps} SGD steps"):
            run = scenarios.compiled_vs_eager(model, x, y, steps=steps, compile_loss=compile_loss)
        runs[name] = run
        worst = max(worst, run.max_output_diff, run.max_grad_diff, run.max_loss_diff)
        section.checks.append(
            Check(
                f"compile: {name} through minigrad_backend equals eager torch (float64)",
                max(run.max_output_diff, run.max_grad_diff, run.max_loss_diff) <= TOL,
                f"{'loss' if compile_loss else 'outputs'} {run.max_output_diff:.1e}, "
                f"gradients {run.max_grad_diff:.1e}, "
                f"loss curve ({steps} steps) {run.max_loss_diff:.1e} (limit {TOL:g})",
            )
        )
    swish = runs["swish MLP (loss eager)"]
    graphs = swish.backend.graphs[0]
    before_fw, before_bw = compile_backend.capture_aten_graphs(scenarios.swish_mlp(), x[:8])
    section.texts += [
        ("compile: the swish MLP as Dynamo hands it to the backend", graphs.dynamo_code.strip()),
        ("compile: ATen forward graph before decomposition", before_fw.code.strip()),
        (
            "compile: ATen forward graph after decomposition (run by minigrad)",
            graphs.forward.gm.code.strip(),
        ),
        ("compile: ATen backward graph before decomposition", before_bw.code.strip()),
        (
            "compile: ATen backward graph after decomposition (run by minigrad)",
            graphs.backward.gm.code.strip(),
        ),
    ]
    applied = swish.backend.applied + runs["digits MLP + cross-entropy"].backend.applied
    rows = []
    for op, count in sorted(applied.items()):
        fn = next(v for k, v in torch._decomp.decomposition_table.items() if str(k) == op)
        rows.append([op, count, f"{fn.__module__}.{fn.__name__}"])
    section.tables.append(
        Table(
            "compile: decompositions applied while tracing (both models)",
            ["ATen op", "times", "torch._decomp function"],
            rows,
        )
    )
    section.checks.append(_unmapped_check())
    return worst


def _unmapped_check() -> Check:
    torch._dynamo.reset()
    compiled = torch.compile(
        lambda t: torch.nn.functional.softplus(t), backend=compile_backend.minigrad_backend
    )
    try:
        compiled(torch.randn(4, dtype=torch.float64))
        message = "no error"
    except torch._dynamo.exc.BackendCompilerFailed as error:
        message = str(error).splitlines()[1] if "\n" in str(error) else str(error)
    torch._dynamo.reset()
    return Check(
        "compile: an unmapped ATen op is refused, naming it and its decomposition",
        "aten.softplus.default" in message and "torch._refs.nn.functional.softplus" in message,
        message,
    )


def _fx_part(section: Section) -> None:
    torch.manual_seed(0)
    net, x = fx_passes.SmallNet(), torch.randn(64, 16)
    gm = fx_passes.trace(net)
    section.texts.append(("fx: symbolic_trace(SmallNet).code", gm.code.strip()))
    profile = fx_passes.profile_nodes(gm, x)
    section.tables.append(
        Table(
            "fx: ShapeProfiler (an fx.Interpreter): each node's output shape, dtype, time",
            ["node", "op", "target", "shape", "dtype", "µs"],
            [
                [p.name, p.op, p.target, str(p.shape), str(p.dtype), p.seconds * 1e6]
                for p in profile
            ],
        )
    )
    try:
        swapped, replaced = fx_passes.swap_softmax(gm)
        diff = (swapped(x) - net(x)).abs().max().item()
        measured = f"{replaced} call swapped, max |Δ| = {diff:.1e}"
    except (ImportError, AttributeError, RuntimeError) as error:  # Lab 02's library unusable
        replaced, diff = 0, float("inf")
        measured = f"warp_softmax unavailable: {type(error).__name__}: {error}".splitlines()[0]
    section.checks.append(
        Check(
            "fx: Transformer swaps F.softmax for warp_softmax.softmax, outputs equal",
            replaced == 1 and diff <= 1e-6,
            measured,
        )
    )
    error = fx_passes.symbolic_trace_error()
    breaks = fx_passes.dynamo_graph_breaks(fx_passes.data_dependent, torch.randn(8))
    section.checks.append(
        Check(
            "fx: data-dependent `if` fails symbolic_trace; Dynamo splits it with a graph break",
            error is not None and breaks.graph_break_count == 1,
            f"{error}; Dynamo: {breaks.graph_count} graphs, "
            f"{breaks.graph_break_count} break ({'; '.join(breaks.reasons)})",
        )
    )


def _precision_plot(errors: list[precision.SumError], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4), sharey=True)
    for ax, dtype in zip(axes, precision.DTYPES, strict=True):
        for method, marker in zip(precision.METHODS, "osd", strict=True):
            pts = [
                (e.n, max(e.relative_error, 1e-12))
                for e in errors
                if e.dtype == dtype and e.method == method
            ]
            ax.loglog(*zip(*pts, strict=True), marker=marker, label=method)
        ax.axhline(precision.EPSILON[dtype], color="grey", ls="--", lw=0.8, label="ε")
        ax.set_title(f"accumulating in {dtype}")
        ax.set_xlabel("n values summed")
    axes[0].set_ylabel("relative error vs math.fsum")
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _precision_part(section: Section, out_dir: Path, quick: bool) -> tuple[float, float]:
    sizes = [10**k for k in range(2, 6 if quick else 8)]
    with step(f"summing n = 1e2 … {sizes[-1]:.0e} values in FP16/BF16/FP32, three ways"):
        errors = precision.summation_errors(sizes)
    plot = out_dir / "precision_sums.png"
    _precision_plot(errors, plot)
    section.images.append(
        Image(plot, "Relative error of naive, pairwise and Kahan sums by dtype and n")
    )
    top = [e for e in errors if e.n == sizes[-1]]
    section.tables.append(
        Table(
            f"precision: relative error at n = {sizes[-1]:.0e} (accumulator in the storage dtype)",
            ["dtype", "naive", "pairwise", "kahan", "ε"],
            [
                [
                    d,
                    *[
                        next(e.relative_error for e in top if e.dtype == d and e.method == m)
                        for m in precision.METHODS
                    ],
                    precision.EPSILON[d],
                ]
                for d in precision.DTYPES
            ],
        )
    )
    var_rows = precision.variance_cancellation()
    section.tables.append(
        Table(
            "precision: variance of N(shift, 1), float64, n=2000 — one-pass E[x²]−E[x]² vs Welford",
            ["shift", "exact variance", "one-pass rel. error", "Welford rel. error"],
            [
                [r.shift, r.exact, r.one_pass_relative_error, r.welford_relative_error]
                for r in var_rows
            ],
        )
    )
    probe = precision.probe_deterministic_mode()
    section.tables.append(
        Table(
            "precision: use_deterministic_algorithms(True) on this CPU build",
            ["what", "result"],
            [
                ["ops that raise on CUDA, tried on CPU", ", ".join(probe.passed)],
                ["raised here", ", ".join(probe.raised) or "none"],
                ["torch.empty after a freed tensor of 7s, flag on", str(probe.empty_with_flag)],
                ["... flag off", str(probe.empty_without_flag)],
            ],
        )
    )
    dot = precision.dot_by_thread_count(1_000_000 if quick else 10_000_000)
    section.tables.append(
        Table(
            f"precision: torch.dot of {dot.n:.0e} float32 values by intra-op thread count "
            "(deterministic flag on)",
            ["threads", "result", "repeatable"],
            [[t, repr(v), dot.repeatable] for t, v in dot.results.items()],
        )
    )
    f32 = {e.method: e.relative_error for e in top if e.dtype == "float32"}
    section.checks.append(
        Check(
            "precision: Kahan stays within ε while the naive FP32 sum drifts",
            f32["kahan"] <= precision.EPSILON["float32"] < f32["naive"],
            f"n={sizes[-1]:.0e}: naive {f32['naive']:.1e}, pairwise {f32['pairwise']:.1e}, "
            f"kahan {f32['kahan']:.1e}",
        )
    )
    return f32["naive"], f32["kahan"]


def _memory_part(section: Section, quick: bool) -> memory.CheckpointComparison:
    width, batch = (128, 256) if quick else (512, 1024)
    with step(f"minigrad step, 8 blocks of {width}x{width}, batch {batch}: plain vs checkpointed"):
        cmp = memory.compare_checkpointing(
            depth=8, width=width, batch=batch, segment=2, repeats=3 if quick else 7
        )
    mib = memory.MiB
    section.tables.append(
        Table(
            f"memory: one minigrad training step (tracemalloc), 8 × Linear({width},{width})+ReLU, "
            f"batch {batch}, float32",
            ["variant", "graph after forward (MiB)", "peak (MiB)", "step (ms, median)"],
            [
                [
                    "plain",
                    cmp.plain.graph_bytes / mib,
                    cmp.plain.peak_bytes / mib,
                    cmp.plain.step_seconds * 1e3,
                ],
                [
                    "checkpoint every 2 blocks",
                    cmp.checkpointed.graph_bytes / mib,
                    cmp.checkpointed.peak_bytes / mib,
                    cmp.checkpointed.step_seconds * 1e3,
                ],
            ],
        )
    )
    section.checks.append(
        Check(
            "memory: checkpointing lowers saved and peak memory, gradients bit-identical",
            cmp.bit_identical and cmp.checkpointed.peak_bytes < cmp.plain.peak_bytes,
            f"saved {_mib(cmp.plain.graph_bytes)} → {_mib(cmp.checkpointed.graph_bytes)}, "
            f"peak {_mib(cmp.plain.peak_bytes)} → {_mib(cmp.checkpointed.peak_bytes)}, "
            f"step time ×{cmp.recompute_ratio:.2f} (shared 2-core machine), "
            f"bit-identical={cmp.bit_identical}",
        )
    )
    life = memory.tensor_lifetimes()
    section.tables.append(
        Table(
            "memory: torch tensor lifetimes seen through weakref",
            ["fact", "observed"],
            [[k, v] for k, v in vars(life).items()],
        )
    )
    section.tables.append(
        Table(
            "memory: which ops share storage (views) and which copy",
            ["op", "shares storage", "contiguous"],
            [list(r) for r in memory.storage_sharing()],
        )
    )
    if torch.cuda.is_available():
        stats = memory.cuda_allocator_tour()
        section.tables.append(
            Table(
                "memory: CUDA caching allocator (MiB)",
                ["stat", "MiB"],
                [[k, v] for k, v in stats.items()],
            )
        )
    else:
        section.texts.append(
            (
                "memory: CUDA caching allocator",
                f"skipped: {memory.NEEDS_CUDA} (this machine has none)",
            )
        )
    return cmp


def build_section(out_dir: Path, quick: bool) -> Section:
    out_dir.mkdir(parents=True, exist_ok=True)
    section = Section("The spec's PyTorch concepts: torch.compile backend, FX, precision, memory")
    worst = _compile_part(section, quick)
    with step("FX: trace, profile, softmax swap, tracing limits"):
        _fx_part(section)
    naive, kahan = _precision_part(section, out_dir, quick)
    cmp = _memory_part(section, quick)
    section.headline = [
        (
            "minigrad as torch.compile backend: worst |Δ| vs eager (outputs, grads, losses)",
            f"{worst:.1e} (limit {TOL:g})",
        ),
        ("FP32 sum error, naive vs Kahan (largest n)", f"{naive:.1e} vs {kahan:.1e}"),
        (
            "checkpointing: saved activations / peak",
            f"{_mib(cmp.plain.graph_bytes)} → {_mib(cmp.checkpointed.graph_bytes)} / "
            f"{_mib(cmp.plain.peak_bytes)} → {_mib(cmp.checkpointed.peak_bytes)}, "
            "bit-identical grads",
        ),
    ]
    return section
