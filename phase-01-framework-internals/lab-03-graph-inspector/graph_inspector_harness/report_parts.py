"""More parts of Lab 03's report section: TF1 and SavedModel concepts, every TFLite mode and the
quantization debugger, the XLA / MLIR views and the MLIR bridge on and off."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from phase01_common.report import Check, Image, Section, Table

NUM_LABELS = 5  # BBC News topics


# --- TF1 and SavedModel concepts -------------------------------------------------------------


def concepts_part(section: Section, out_dir: Path) -> None:
    import shutil

    from graph_inspector.savedmodel import describe_savedmodel

    from graph_inspector_harness.tf1_concepts import (
        VOCAB,
        lookup_ids,
        save_vocab_model,
        session_vs_function,
    )

    two = session_vs_function()
    ops = sorted(set(two.tf1_ops) | set(two.tf2_ops))
    section.tables.append(
        Table(
            "The same MLP as a TF1 graph (Session.run) and a tf.function FuncGraph: ops by type",
            ["op type", "TF1 graph", "FuncGraph"],
            [[op, two.tf1_ops.get(op, 0), two.tf2_ops.get(op, 0)] for op in ops],
        )
    )
    section.checks.append(
        Check(
            "TF1 Session.run and tf.function give the same outputs",
            two.max_abs_diff <= 1e-6,
            f"max |diff| {two.max_abs_diff:.1e}; TF1 graph {sum(two.tf1_ops.values())} ops "
            f"(variables as VarHandleOp + initializers), FuncGraph "
            f"{sum(two.tf2_ops.values())} ops + {two.tf2_captures} captured handles",
        )
    )
    folder = save_vocab_model(out_dir / "vocab_savedmodel")
    moved = out_dir / "vocab_savedmodel_moved"
    shutil.rmtree(moved, ignore_errors=True)
    shutil.move(str(folder), str(moved))
    ids = lookup_ids(moved, ["graph", "asset", "unknown-word"])
    section.checks.append(
        Check(
            "a moved SavedModel still reads its vocabulary asset",
            ids == [VOCAB.index("graph"), VOCAB.index("asset"), 0],
            f"lookup(graph, asset, unknown-word) = {ids}",
        )
    )
    section.texts.append(
        (
            "python -m graph_inspector signatures (a moved SavedModel)",
            describe_savedmodel(moved).text(),
        )
    )


# --- TFLite modes and the quantization debugger ------------------------------------------------


def quantization_part(section: Section, out_dir: Path) -> None:
    from graph_inspector.quant_modes import MODES
    from phase01_common.units import format_bytes

    from graph_inspector_harness.quant_scenarios import (
        compare_modes,
        make_outlier_model,
        plot_modes,
    )

    section.tables.append(
        Table(
            "The TFLite modes (graph_inspector/quant_modes.py): converter settings, calibration, "
            "and the gate each converted model must pass against TensorFlow",
            [
                "mode",
                "stores",
                "convert default",
                "calibrates",
                "max rel err",
                "argmax ≥",
                "size ≥",
            ],
            [
                [
                    m.name,
                    m.stores,
                    "yes" if m.written_by_default else "no",
                    "yes" if m.needs_representative else "no",
                    m.max_rel_error,
                    f"{m.min_argmax_agreement:.0%}",
                    f"{m.min_size_fraction:.0%} of float32 weights",
                ]
                for m in MODES.values()
            ],
        )
    )
    from graph_inspector_harness.tflite_cache import cached_mode_conversions

    model = make_outlier_model(out_dir / "outlier_savedmodel")
    results = compare_modes(model, conversions=cached_mode_conversions(model))
    section.tables.append(
        Table(
            "TFLite modes on a classifier with one outlier unit (the float function is unchanged; "
            "int8 activations are not): agreement with float32 on 1,000 inputs",
            ["mode", "size", "batch-1 µs", "agreement %", "max |logit err|", "rel err", "gate"],
            [
                [
                    r.mode,
                    format_bytes(r.size_bytes, binary=True),
                    round(1e3 * r.latency_ms, 1),
                    100 * r.agreement,
                    r.max_logit_error,
                    r.rel_error,
                    r.gate,
                ]
                for r in results
            ],
        )
    )
    section.images.append(
        Image(
            plot_modes(results, out_dir / "tflite_modes.png"),
            "Every TFLite mode on the outlier classifier; red = refused by the validation gate",
        )
    )
    by_mode = {r.mode: r for r in results}
    fixed = next(r for r in results if r.mode.startswith("int8, "))
    section.checks.append(
        Check(
            "quantization debugger: int8 garbage refused, planted layer kept float fixes it",
            by_mode["int8"].gate != "pass" and fixed.gate == "pass" and model.planted in fixed.mode,
            f"int8 agreement {100 * by_mode['int8'].agreement:.1f}% (refused); "
            f"{fixed.mode}: {100 * fixed.agreement:.1f}% (passes); 16x8 "
            f"{100 * by_mode['int16x8'].agreement:.1f}%",
        )
    )


# --- 4. XLA and MLIR -----------------------------------------------------------------------


def xla_mlir_part(section: Section, classify: Any, report: Any) -> None:
    """XLA's and MLIR's view of ``classify`` (BERT-tiny's forward) at [1, 128]; ``report`` is its
    :class:`~graph_inspector.graph_model.GraphReport` at that shape (its concrete function)."""
    import tensorflow as tf
    from graph_inspector.compiler_stats import mlir_stages
    from graph_inspector.inspect_graph import xla_stats

    ids = tf.zeros([1, 128], tf.int32)
    rows: list[list[Any]] = []
    try:
        stats = xla_stats(classify, ids, tf.ones_like(ids), tf.zeros_like(ids))
        rows.append(["XLA HLO instructions", stats.hlo_op_total])
        rows.append(["XLA compile time (s)", round(stats.compile_seconds, 3)])
        rows.append(["XLA run time (ms)", round(stats.run_seconds * 1e3, 3)])
        rows += [[f"  HLO {op}", n] for op, n in list(stats.hlo_op_counts.items())[:8]]
    except Exception as exc:  # noqa: BLE001 - optional analysis: say why it is missing
        rows.append(["XLA", f"not compiled: {type(exc).__name__}"])
    try:
        for stage in mlir_stages(report.concrete_function):
            dialects = ", ".join(f"{d} {n}" for d, n in stage.by_dialect().items())
            rows.append([f"MLIR ops, {stage.stage}", stage.error or dialects])
    except Exception as exc:  # noqa: BLE001
        rows.append(["MLIR", f"not converted: {type(exc).__name__}"])
    section.tables.append(Table("XLA / MLIR view of BERT-tiny [1, 128]", ["what", "value"], rows))
    bridge_part(section, classify, (ids, tf.ones_like(ids), tf.zeros_like(ids)))


def bridge_part(section: Section, classify: Any, args: tuple) -> None:
    import numpy as np
    from graph_inspector.compiler_stats import bridge_comparison

    try:
        runs = bridge_comparison(classify, *args, repeats=2)
    except Exception as exc:  # noqa: BLE001 - optional analysis: say why it is missing
        section.checks.append(Check("MLIR bridge on and off", False, f"{type(exc).__name__}"))
        return
    section.tables.append(
        Table(
            "BERT-tiny [1, 128] through XLA with TF's MLIR bridge on and off (compile: median "
            "of 2 fresh compiles each, interleaved)",
            ["bridge", "compile s", "HLO instructions", "dot", "distinct HLO ops"],
            [
                [
                    r.bridge,
                    round(r.compile_seconds, 2),
                    r.hlo_op_total,
                    r.hlo_op_counts.get("dot", 0),
                    len(r.hlo_op_counts),
                ]
                for r in runs
            ],
        )
    )
    diff = float(np.abs(np.asarray(runs[0].outputs) - np.asarray(runs[1].outputs)).max())
    section.checks.append(
        Check(
            "MLIR bridge on and off: equal outputs",
            diff <= 1e-5,
            f"max |diff| {diff:.1e}; HLO instructions {runs[0].hlo_op_total} vs "
            f"{runs[1].hlo_op_total}",
        )
    )


# --- the profiler joined with the cost model, on a roofline ---------------------------------------


def profile_part(section: Section, out_dir: Path, seq_len: int = 64, steps: int = 10) -> None:
    """BERT-tiny at [1, seq_len] profiled for ``steps`` calls, on this CPU's roofline."""
    import tensorflow as tf
    from graph_inspector.bert import BertConfig, BertForSequenceClassification
    from graph_inspector.inspect_graph import trace_and_inspect
    from graph_inspector.profile import join_with_costs, profile_function, roofline_probe

    model = BertForSequenceClassification(BertConfig(), num_labels=NUM_LABELS)
    classify = tf.function(lambda i, m, t: model(i, m, t, training=False))
    ids = tf.zeros([1, seq_len], tf.int32)
    args = (ids, tf.ones_like(ids), tf.zeros_like(ids))
    profile = profile_function(classify, args, steps, out_dir / "profile")
    rows = join_with_costs(profile, trace_and_inspect(classify, *args), steps)
    roof = roofline_probe()
    shown = [r for r in rows if r.share >= 0.005]
    section.tables.append(
        Table(
            f"TF Profiler joined with the cost model: BERT-tiny [1, {seq_len}], {steps} calls; "
            f"roofline: {roof.peak_flops / 1e9:.0f} GFLOP/s, {roof.bandwidth / 1e9:.0f} GB/s",
            ["op type", "µs/call", "share %", "GFLOP/s", "GB/s", "FLOP/byte"],
            [
                [
                    r.op_type,
                    round(r.seconds_per_step * 1e6, 1),
                    round(100 * r.share, 1),
                    "not costed" if r.gflops is None else round(r.gflops, 2),
                    "-" if r.gbytes is None else round(r.gbytes, 2),
                    "-" if r.intensity is None else round(r.intensity, 2),
                ]
                for r in shown
            ],
        )
    )
    section.images.append(
        Image(
            _plot_roofline(rows, roof, out_dir / "roofline.png"),
            "Each op type's achieved FLOP/s against its arithmetic intensity, under this CPU's "
            "roofline measured in the same run (above the memory line: the data stayed in cache)",
        )
    )
    section.checks.append(
        Check(
            "profiler table has the graph's main ops, the roofline probe is plausible",
            {"MatMul", "Softmax"} <= {r.op_type for r in rows}
            and 1e8 < roof.peak_flops < 1e13
            and 1e8 < roof.bandwidth < 1e12,
            f"{len(rows)} op types; peak {roof.peak_flops / 1e9:.1f} GFLOP/s, "
            f"{roof.bandwidth / 1e9:.1f} GB/s",
        )
    )


def _plot_roofline(rows: list[Any], roof: Any, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    points = [r for r in rows if r.intensity and r.gflops]
    fig, ax = plt.subplots(figsize=(7.5, 4.5))
    x = np.logspace(-2, 3, 200)
    ax.plot(x, [roof.attainable(v) / 1e9 for v in x], color="#333333", label="roofline")
    for r in points:
        ax.scatter(r.intensity, r.gflops, s=20 + 400 * r.share)
        ax.annotate(
            r.op_type,
            (r.intensity, r.gflops),
            fontsize=8,
            xytext=(4, 2),
            textcoords="offset points",
        )
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte, cost model)")
    ax.set_ylabel("achieved GFLOP/s (profiler time)")
    ax.set_title("BERT-tiny op types on this CPU's roofline (marker size = share of time)")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
