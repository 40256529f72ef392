"""Lab 01's part of the demo report: everything is measured inside :func:`build_section`."""

from __future__ import annotations

import time
from pathlib import Path

import minigrad
import numpy as np
from phase01_common.report import Check, Image, Section, Table, step

from minigrad_harness.digits_mlp import (
    curve_relative_difference,
    initial_weights,
    load_digits_split,
    train_minigrad,
    train_torch,
)
from minigrad_harness.scenarios import GRAD_CASES, GRADGRAD_CASES, SECOND_ORDER_CASES, TOL
from minigrad_harness.testing import compare_with_torch, second_order_with_torch
from minigrad_harness.timing import pin_xla_threads


def _gradient_checks(quick: bool) -> tuple[list[Check], Table]:
    rows: list[list[object]] = []
    worst_by_primitive: dict[str, float] = {}
    all_gradcheck = True
    for name, expr, specs, positive in GRAD_CASES:
        # Finite differences are the slow part; quick mode keeps the torch comparison only.
        r = compare_with_torch(expr, *specs, positive=positive, gradcheck=not quick)
        prims = ", ".join(sorted(r.primitives))
        gc = "skipped (quick)" if r.gradcheck_passed is None else str(r.gradcheck_passed)
        all_gradcheck &= r.gradcheck_passed is not False
        rows.append([name, prims, r.output_error, max(r.grad_errors), gc])
        for p in r.primitives:
            worst_by_primitive[p] = max(worst_by_primitive.get(p, 0.0), r.max_error)
    checks = [
        Check(
            f"{p}: gradients equal torch's (rel. err < {TOL:g})",
            err < TOL,
            f"max rel. err {err:.2e}",
        )
        for p, err in sorted(worst_by_primitive.items())
    ]
    checks.append(
        Check(
            f"{len(GRAD_CASES)} expressions (broadcasting included) match torch",
            all(row[2] < TOL and row[3] < TOL for row in rows),
            f"worst rel. err {max(max(row[2], row[3]) for row in rows):.2e}",
        )
    )
    if not quick:
        checks.append(
            Check("minigrad.gradcheck (finite differences) passes on every case", all_gradcheck, "")
        )
    table = Table(
        "Gradient checks vs PyTorch (float64, random upstream gradient)",
        ["case", "primitives", "output rel. err", "grad rel. err", "gradcheck"],
        rows,
    )
    return checks, table


def _mlp(out_dir: Path) -> tuple[list[Check], Table, Image, float]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data, weights = load_digits_split(), initial_weights()
    t0 = time.perf_counter()
    ours = train_minigrad(data, weights)
    t_ours = time.perf_counter() - t0
    t0 = time.perf_counter()
    theirs = train_torch(data, weights)
    t_theirs = time.perf_counter() - t0
    rel = curve_relative_difference(ours.losses, theirs.losses)
    ups = [i for i in range(1, len(ours.losses)) if not ours.losses[i] < ours.losses[i - 1]]

    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = np.arange(1, len(ours.losses) + 1)
    ax.plot(steps, theirs.losses, lw=4, alpha=0.4, label="PyTorch")
    ax.plot(steps, ours.losses, lw=1.2, ls="--", label="minigrad")
    ax.set_xlabel("full-batch SGD step")
    ax.set_ylabel("cross-entropy loss")
    ax.set_title(f"2-layer MLP on load_digits (max rel. difference {rel:.1e})")
    ax.legend()
    fig.tight_layout()
    path = out_dir / "lab01_mlp_loss.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)

    checks = [
        Check(
            "MLP loss decreases at every one of 100 steps",
            not ups,
            f"{ours.losses[0]:.4f} -> {ours.losses[-1]:.4f}",
            f"increases at steps {ups}" if ups else "",
        ),
        Check(
            "held-out accuracy >= 0.90",
            ours.test_accuracy >= 0.90,
            f"{ours.test_accuracy:.4f} (torch {theirs.test_accuracy:.4f})",
        ),
        Check("loss curve equals torch's within 1e-5 relative", rel < 1e-5, f"{rel:.2e}"),
    ]
    table = Table(
        "MLP training (64-64-10, SGD lr 0.5, 100 full-batch steps, float32)",
        ["library", "first loss", "last loss", "held-out acc.", "time s (incl. set-up)"],
        [
            ["minigrad", ours.losses[0], ours.losses[-1], ours.test_accuracy, t_ours],
            ["PyTorch", theirs.losses[0], theirs.losses[-1], theirs.test_accuracy, t_theirs],
        ],
    )
    image = Image(path, "Loss curves of the same network from the same initial weights.")
    return checks, table, image, rel


def _transformer(out_dir: Path) -> tuple[list[Check], Table, Image]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from minigrad_harness.transformer import CONFIG, compare

    ours, theirs, rel = compare()
    fig, ax = plt.subplots(figsize=(6, 3.5))
    steps = np.arange(1, len(ours.losses) + 1)
    ax.plot(steps, theirs.losses, lw=4, alpha=0.4, label="PyTorch")
    ax.plot(steps, ours.losses, lw=1.2, ls="--", label="minigrad")
    ax.set_xlabel("Adam step")
    ax.set_ylabel("cross-entropy loss (next character)")
    ax.set_title(f"Char Transformer, 2 layers x 4 heads (max rel. diff. {rel:.1e})", fontsize=10)
    ax.legend()
    fig.tight_layout()
    path = out_dir / "lab01_transformer_loss.png"
    fig.savefig(path, dpi=110)
    plt.close(fig)
    checks = [
        Check(
            "Transformer (2 layers, 4 heads) loss curve equals torch's within 1e-5 relative",
            rel < 1e-5,
            f"{rel:.2e} over {len(ours.losses)} Adam steps",
        )
    ]
    cfg = CONFIG
    table = Table(
        f"Char-level Transformer: d_model {cfg['d_model']}, {cfg['n_head']} heads, "
        f"{cfg['n_layer']} layers, context {cfg['block']}, batch {cfg['batch']}, Adam lr "
        f"{cfg['lr']}, float64, text: data/autodiff_notes.txt ({ours.n_params:,} parameters)",
        ["library", "first loss", "last loss", "time s (50 steps)"],
        [
            ["minigrad", ours.losses[0], ours.losses[-1], ours.seconds],
            ["PyTorch", theirs.losses[0], theirs.losses[-1], theirs.seconds],
        ],
    )
    image = Image(path, "The same Transformer from the same weights on the same batches.")
    return checks, table, image


def _second_order() -> list[Check]:
    checks = []
    for name, expr, specs in SECOND_ORDER_CASES:
        err = second_order_with_torch(expr, *specs)
        checks.append(
            Check(
                f"second order ({name}): grad and HVP equal torch's (create_graph=True)",
                err < TOL,
                f"max rel. err {err:.2e}",
            )
        )
    rng = np.random.default_rng(1)
    for name, fn, shapes in GRADGRAD_CASES:
        xs = [minigrad.Tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]
        passed = minigrad.gradgradcheck(fn, xs, raise_exception=False)
        checks.append(Check(f"gradgradcheck ({name})", passed, "passed" if passed else "failed"))
    return checks


def _benchmark() -> list[Table]:
    """The bench command's step and per-sample tables (short budgets), 1 thread everywhere:
    XLA's pool is pinned before the section's first jit compile (build_section)."""
    import torch
    from threadpoolctl import threadpool_limits

    from minigrad_harness.bench import bench_size, step_table
    from minigrad_harness.bench_func import PER_SAMPLE_BLOCKS, per_sample_fns, per_sample_table
    from minigrad_harness.timing import interleaved_medians, load_average

    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1):  # see minigrad_harness/bench.py: one thread, less noise
            # The short run: every variant of both sizes in one interleaved run, medians of
            # at least 3 rounds; at 1024 (~0.1 s a step) one warm-up call absorbs the compiles
            # and 3 rounds of 2 calls give the median.
            rows = [
                bench_size(64, 128, budget_s=1.0),
                bench_size(1024, 1024, budget_s=3.0, max_rounds=3, block=2, warmup=1),
            ]
            ps = interleaved_medians(per_sample_fns(), 1.0, max_rounds=100, block=PER_SAMPLE_BLOCKS)
    finally:
        torch.set_num_threads(prev)
    note = f"1 thread, load average {load_average()} (short run; `make bench` for the full one)"
    return [
        Table(f"MLP training step, median ms, {note}", *step_table(rows)),
        Table(
            f"Per-sample gradients, digits MLP 64-64-10, batch 64, float32, median ms, {note}",
            *per_sample_table(ps),
        ),
    ]


def _func_part(section: Section, quick: bool) -> None:
    from minigrad_harness import func_demo

    check, _ = func_demo.per_sample_check()
    section.checks.append(check)
    section.checks += func_demo.rule_checks()
    ir_text, hlo_text = func_demo.small_example()
    section.texts.append(("IR of grad(lambda w: (w.tanh() * w).sum()) (make_ir)", ir_text))
    section.texts.append(("StableHLO of lambda w: (w.tanh() * w).sum() (to_stablehlo)", hlo_text))
    if not quick:
        check, summary = func_demo.jit_step_check()
        section.checks.append(check)
        section.texts.append(("What XLA made of the jitted MLP training step", summary))


def _headline(grad_table: Table, mlp_table: Table, curve_rel: float) -> list[tuple[str, str]]:
    """The three figures that open the report: gradients, loss curve, accuracy."""
    worst = max(max(row[2], row[3]) for row in grad_table.rows)
    accuracy = mlp_table.rows[0][3]
    return [
        ("worst gradient error vs torch", f"{worst:.1e} (limit {TOL:g})"),
        ("MLP loss curve vs torch", f"{curve_rel:.1e} relative (limit 1e-5)"),
        ("held-out accuracy (digits MLP)", f"{accuracy:.3f} (limit 0.90)"),
    ]


def build_section(out_dir: Path, quick: bool) -> Section:
    """Run Lab 01's main job: gradient checks, the digits MLP vs torch, second order, (bench)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pin_xla_threads(1)  # before any jit compile of this process, as NumPy and torch are
    section = Section("Lab 01 — minigrad: reverse-mode autodiff on NumPy")
    with step("gradient checks vs PyTorch"):
        checks, grad_table = _gradient_checks(quick)
        section.checks += checks
        section.tables.append(grad_table)
    with step("2-layer MLP on load_digits, minigrad and PyTorch"):
        checks, mlp_table, image, curve_rel = _mlp(out_dir)
        section.checks += checks
        section.tables.append(mlp_table)
        section.images.append(image)
    section.headline = _headline(grad_table, mlp_table, curve_rel)
    with step("2-layer 4-head character Transformer, minigrad and PyTorch"):
        checks, table, image = _transformer(out_dir)
        section.checks += checks
        section.tables.append(table)
        section.images.append(image)
    with step("second-order gradients"):
        section.checks += _second_order()
    with step("minigrad.func: vmap, grad, IR, StableHLO (jit without --quick)"):
        _func_part(section, quick)
    if not quick:
        with step("benchmark (short)"):
            section.tables += _benchmark()
    return section
