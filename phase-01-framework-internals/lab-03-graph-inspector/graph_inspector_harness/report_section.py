"""Lab 03's section of the demo report: everything here is measured in the call.

1. The FuncGraph of the BERT-tiny classifier: drawing (SVG via Graphviz where ``dot`` exists,
   else a matplotlib PNG), op-type histogram, cost summary, and the cost model checked against
   the analytic FLOP count of BERT.
2. Every retracing trigger run under the monitor, with its explanation text and a check that
   the counts match ``experimental_get_tracing_count()``; plus the BERT model itself retracing.
3. Determinism: the same graph JSON from two separate processes (one fresh process, compared
   with the fingerprint a fresh process of the same code recorded in the cache; two fresh ones
   when there is no record yet).
4. XLA / MLIR op counts of the same graph (full run only).
5. Part B's pipeline (SavedModel, TFLite float32 / dynamic range, accuracy, latency), merged.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from phase01_common.report import Check, Image, Section, Table, step
from phase01_common.units import format_bytes

from graph_inspector_harness.report_parts import (
    concepts_part,
    profile_part,
    quantization_part,
    xla_mlir_part,
)

TITLE = "Lab 03 — graph_inspector: tf.function graphs, retracing, BERT to TFLite"
NUM_LABELS = 5  # BBC News topics


def bert_analytic_matmul_flops(
    batch: int, seq: int, hidden: int, intermediate: int, layers: int, labels: int
) -> int:
    """FLOPs of every matrix product in BERT + classifier, by hand (2·m·n·k each).

    Per layer: Q, K, V, output projections 4·(2·b·s·h·h); feed-forward 2·(2·b·s·h·i);
    attention scores Q·Kᵀ and probs·V 2·(2·b·s·s·h) (summed over heads). Then the pooler
    2·b·h·h and the classifier 2·b·h·labels. Embeddings are gathers: no FLOPs.
    """
    per_layer = 8 * batch * seq * hidden * hidden
    per_layer += 4 * batch * seq * hidden * intermediate
    per_layer += 4 * batch * seq * seq * hidden
    return layers * per_layer + 2 * batch * hidden * hidden + 2 * batch * hidden * labels


def build_section(out_dir: Path, quick: bool) -> Section:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    section = Section(TITLE)
    timings: list[list[object]] = []

    def timed(name: str, start: float) -> None:
        timings.append([name, round(time.perf_counter() - start, 2)])

    from graph_inspector_harness.fingerprint import recorded_fingerprint, start_fingerprints

    # The determinism check compares two separate processes: a fresh one started now (collected
    # later, so its TensorFlow start-up overlaps with the work below) and the one that recorded
    # this code's fingerprint in the cache, or a second fresh one when there is no record.
    kind = "mlp" if quick else "bert"
    fingerprint_start = time.perf_counter()
    try:
        recorded = recorded_fingerprint(kind)
        fingerprint_procs: list[Any] | Exception = start_fingerprints(
            kind, processes=1 if recorded else 2
        )
    except Exception as exc:  # noqa: BLE001 - reported as a failed check below
        recorded, fingerprint_procs = None, exc

    start = time.perf_counter()
    with step("trace and inspect the BERT-tiny classifier's FuncGraph"):
        graph, classify, report = _graph_part(section, out_dir, quick)
    timed("FuncGraph inspection + drawings", start)

    start = time.perf_counter()
    with step("run every retracing trigger under the monitor"):
        retraces = _retrace_part(section)
    timed("retracing scenarios", start)

    with step("determinism: the same graph JSON in two separate processes"):
        _determinism_part(section, kind, fingerprint_procs, recorded)
    timed(
        f"determinism ({'1 subprocess + the record' if recorded else '2 subprocesses'}, "
        "overlapped, wall)",
        fingerprint_start,
    )

    start = time.perf_counter()
    with step("TF1 Session.run vs tf.function; a SavedModel's signatures and asset"):
        concepts_part(section, out_dir)
    timed("TF1 / SavedModel concepts", start)

    start = time.perf_counter()
    with step("every TFLite mode, and the quantization debugger, on a planted outlier"):
        quantization_part(section, out_dir)
    timed("TFLite modes / quantization debugger", start)

    start = time.perf_counter()
    with step("TF Profiler joined with the cost model, on this CPU's roofline"):
        profile_part(section, out_dir)
    timed("profiler + roofline", start)

    if not quick:
        start = time.perf_counter()
        with step("XLA and MLIR op counts"):
            xla_mlir_part(section, classify, report)  # the graph part's trace, at [1, 128]
        timed("XLA / MLIR", start)

    start = time.perf_counter()
    pipeline = _pipeline_part(section, out_dir, quick)
    timed("BERT pipeline", start)

    section.tables.append(Table("Lab 03 timings (s)", ["step", "seconds"], timings))
    section.headline = headline(pipeline, retraces, graph)
    return section


def headline(pipeline: Any, retraces: tuple[int, int], graph: str) -> list[tuple[str, str]]:
    """The section's key figures: TFLite accuracy and size, retraces explained, the graph."""
    lines = []
    if pipeline is not None:
        acc, sizes = pipeline.accuracy, pipeline.sizes
        lines.append(
            (
                "BERT-tiny TFLite dev accuracy, float32 / dynamic-range (TF)",
                f"{100 * acc['tflite_float32']:.2f}% / {100 * acc['tflite_dynamic_range']:.2f}% "
                f"({100 * acc['tf']:.2f}%), {format_bytes(sizes['tflite_float32'], binary=True)} / "
                f"{format_bytes(sizes['tflite_dynamic_range'], binary=True)}",
            )
        )
    else:
        lines.append(("BERT-tiny to TFLite", "the pipeline failed (see the checks)"))
    passed, total = retraces
    lines.append(
        ("retraces explained", f"{passed}/{total} scenarios: cause named, count = TF's count")
    )
    lines.append(("BERT-tiny FuncGraph", graph))
    return lines


# --- 1. the graph ---------------------------------------------------------------------------


def _graph_part(section: Section, out_dir: Path, quick: bool) -> tuple[str, Any, Any]:
    """Trace, inspect and draw BERT-tiny; returns (headline, classify, its report): the XLA
    part reuses them (the full run traces at [1, 128], the shape XLA compiles)."""
    import tensorflow as tf
    from graph_inspector.bert import BertConfig, BertForSequenceClassification
    from graph_inspector.inspect_graph import trace_and_inspect
    from graph_inspector.render import (
        draw_full_graph_svg,
        draw_scope_overview_svg,
        plot_op_histogram,
        to_dot,
    )

    config = BertConfig()
    seq_len = 64 if quick else 128
    model = BertForSequenceClassification(config, num_labels=NUM_LABELS)  # built eagerly

    def classify(input_ids, attention_mask, token_type_ids):
        return model(input_ids, attention_mask, token_type_ids, training=False)

    spec = tf.TensorSpec([1, seq_len], tf.int32)
    report = trace_and_inspect(classify, spec, spec, spec)

    overview = draw_scope_overview_svg(report, out_dir / "bert_tiny_funcgraph.svg")
    full = draw_full_graph_svg(report, out_dir / "bert_tiny_funcgraph_full.svg")
    histogram = plot_op_histogram(report, out_dir / "bert_tiny_op_histogram.png")
    (out_dir / "bert_tiny_funcgraph.json").write_text(report.to_json())
    (out_dir / "bert_tiny_funcgraph.dot").write_text(to_dot(report, hide_ops=("Const", "NoOp")))
    section.images.append(
        Image(
            overview,
            f"FuncGraph of BERT-tiny classify() at [1, {seq_len}] ({report.node_count} nodes), "
            "one box per name scope (layer, attention block) with its node count, FLOPs and "
            f"main ops; colour = op family. Click it for every node ({full.name}); "
            "also bert_tiny_funcgraph.dot and .json beside this report",
            link=full,
        )
    )
    section.images.append(Image(histogram, "Nodes per op type in the same FuncGraph"))
    section.texts.append((f"FuncGraph summary (BERT-tiny, [1, {seq_len}])", report.summary()))
    return _cost_part(section, report, model, config, seq_len), classify, report


def _cost_part(section: Section, report: Any, model: Any, config: Any, seq_len: int) -> str:
    """The cost by op type, checked against the analytic BERT count; returns the headline."""
    import tensorflow as tf
    from graph_inspector.cost_rules import category

    flops_by_op: dict[str, int] = {}
    bytes_by_op: dict[str, int] = {}
    for node in report.nodes:
        if node.cost:
            flops_by_op[node.op] = flops_by_op.get(node.op, 0) + node.cost.flops
            bytes_by_op[node.op] = bytes_by_op.get(node.op, 0) + node.cost.bytes_moved
    hist = report.op_histogram
    ranked = sorted(flops_by_op, key=lambda op: (-flops_by_op[op], op))[:12]
    section.tables.append(
        Table(
            f"Estimated cost by op type (BERT-tiny, batch 1, seq {seq_len})",
            ["op type", "nodes", "MFLOP", "MB moved"],
            [[op, hist[op], flops_by_op[op] / 1e6, bytes_by_op[op] / 1e6] for op in ranked],
        )
    )

    measured = sum(n.cost.flops for n in report.nodes if n.cost and category(n.op) == "matmul/conv")
    expected = bert_analytic_matmul_flops(
        1,
        seq_len,
        config.hidden_size,
        config.intermediate_size,
        config.num_hidden_layers,
        NUM_LABELS,
    )
    section.checks.append(
        Check(
            "cost model: matrix-product FLOPs equal the analytic BERT count",
            measured == expected,
            f"{measured:,} FLOP from the graph vs {expected:,} by hand",
            "sum over MatMul/BatchMatMul nodes of 2·m·n·k, from static shapes",
        )
    )
    var_count, var_bytes = report.captured("variable")
    params = sum(int(tf.size(w)) for w in model.weights) * 4
    section.checks.append(
        Check(
            "graph reads the model's variables (no initial values baked in)",
            var_count == len(model.weights) and var_bytes == params,
            f"{var_count} captured variables, {format_bytes(var_bytes)} "
            f"(model: {len(model.weights)} weights, {format_bytes(params)})",
        )
    )
    section.checks.append(
        Check(
            "every node costed or listed as uncostable",
            len(report.uncostable) == 0,
            f"{report.node_count - len(report.uncostable)} costed, "
            f"{len(report.uncostable)} uncostable of {report.node_count}",
        )
    )
    return (
        f"{report.node_count} nodes, {measured / 1e6:.1f} MFLOP in matrix products "
        f"({'=' if measured == expected else '≠'} the hand count)"
    )


# --- 2. retracing -----------------------------------------------------------------------------


def _retrace_part(section: Section) -> tuple[int, int]:
    from graph_inspector_harness.scenarios import run_all

    rows = []
    for result in run_all():
        causes = sorted(
            {
                f"{c.arg} ({c.kind})"
                for r in result.log.records
                for c in [*r.causes, *r.warnings]
                if c.kind != "first trace"
            }
        )
        ok = result.passed
        rows.append(
            [result.name, result.expected_traces, result.traces, result.tf_tracing_count, ok]
        )
        section.checks.append(
            Check(
                f"retrace: {result.name}",
                ok,
                f"{result.traces} traces (expected {result.expected_traces}, TF count "
                f"{result.tf_tracing_count}); causes: {', '.join(causes) or 'none'}",
            )
        )
        section.texts.append((f"Retrace explanation — {result.name}", result.log.report()))
    section.tables.append(
        Table(
            "Retracing scenarios: traces expected / seen by the monitor / TensorFlow's count",
            ["scenario", "expected", "monitor", "TF count", "causes named"],
            rows,
        )
    )
    _bert_retrace(section)
    return sum(bool(row[-1]) for row in rows), len(rows)


def _bert_retrace(section: Section) -> None:
    """The BERT classifier itself (reduce_retracing=True on call) under the monitor."""
    import tensorflow as tf
    from graph_inspector.bert import BertConfig, BertForSequenceClassification
    from graph_inspector.retrace import explain_retracing

    model = BertForSequenceClassification(BertConfig(num_hidden_layers=1), NUM_LABELS)
    with explain_retracing() as log:
        for batch, seq in ((1, 16), (1, 16), (1, 32), (2, 48), (2, 48)):
            ids = tf.zeros([batch, seq], tf.int32)
            model(ids, tf.ones_like(ids), tf.zeros_like(ids), training=False)
        ids = tf.zeros([2, 48], tf.int32)
        model(ids, tf.ones_like(ids), tf.zeros_like(ids), training=True)
    ok = log.traces == log.tracing_count() and log.traces > 0
    section.checks.append(
        Check(
            "retrace: BERT classifier under explain_retracing()",
            ok,
            f"{log.traces} traces over {len(log.monitors)} tf.function object(s) "
            f"= TF count {log.tracing_count()}",
        )
    )
    section.texts.append(("Retrace explanation — BERT classifier (shapes, training)", log.report()))


# --- 3. determinism ------------------------------------------------------------------------


def _determinism_part(
    section: Section, kind: str, procs: list[Any] | Exception, recorded: dict | None
) -> None:
    from graph_inspector_harness.fingerprint import (
        collect_fingerprints,
        record_fingerprint,
        record_folder,
    )

    name = f"FuncGraph deterministic across 2 processes ({kind})"
    try:
        if isinstance(procs, Exception):
            raise procs
        fresh = collect_fingerprints(procs)
        a, b = (recorded, *fresh) if recorded else fresh
    except Exception as exc:  # noqa: BLE001 - a failed subprocess is a failed check
        section.checks.append(Check(name, False, f"{type(exc).__name__}: {exc}"))
        return
    same = a["node_count"] == b["node_count"] and a["sha256"] == b["sha256"]
    if same and not recorded:
        record_fingerprint(kind, b)
    if recorded:
        which = f"recorded by an earlier fresh process of this code ({record_folder(kind)}) / fresh"
    else:
        which = "two fresh processes"
    section.checks.append(
        Check(
            name,
            same,
            f"node counts {a['node_count']} / {b['node_count']}, JSON sha256 "
            f"{a['sha256'][:12]} / {b['sha256'][:12]}",
            f"{which}, each with its own hash seed",
        )
    )


# --- 5. pipeline ------------------------------------------------------------------


def _pipeline_part(section: Section, out_dir: Path, quick: bool) -> Any:
    from graph_inspector_harness.pipeline_steps import run_demo

    try:
        result = run_demo(out_dir, quick=quick)
    except Exception as exc:  # noqa: BLE001 - report it as a failed check, keep the section
        section.checks.append(
            Check(
                "BERT pipeline (SavedModel → TFLite) ran",
                False,
                f"{type(exc).__name__}: {' '.join(str(exc).split())[:400]}",
            )
        )
        return None
    section.checks += list(result.checks)
    section.tables += list(result.tables)
    section.images += list(result.images)
    section.texts += list(result.texts)
    return result
