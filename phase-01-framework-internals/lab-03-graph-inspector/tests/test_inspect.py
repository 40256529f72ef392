"""Graph inspection: the cost model, the walk (calls, control flow), outputs and drawings."""

from __future__ import annotations

import json
import os
import re

import numpy as np
import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import tensorflow as tf  # noqa: E402
from graph_inspector.inspect_graph import trace_and_inspect  # noqa: E402
from graph_inspector.render import (  # noqa: E402
    draw_svg,
    plot_op_histogram,
    to_dot,
    write_tensorboard,
)


def node_of(report, op: str):
    matches = [n for n in report.nodes if n.op == op]
    assert matches, f"no {op} node in {[n.op for n in report.nodes]}"
    return matches[0]


def test_matmul_flops_is_2mnk_and_honours_transpose():
    m, k, n = 6, 5, 7
    report = trace_and_inspect(
        lambda a, b: tf.matmul(a, b, transpose_b=True),
        tf.TensorSpec([m, k], tf.float32),
        tf.TensorSpec([n, k], tf.float32),
    )
    mm = node_of(report, "MatMul")
    assert mm.cost.flops == 2 * m * n * k
    assert mm.cost.bytes_moved == 4 * (m * k + n * k + m * n)


def test_batch_matmul_flops_with_broadcast_batch():
    b, m, k, n = 3, 4, 5, 6
    report = trace_and_inspect(
        tf.matmul, tf.TensorSpec([b, m, k], tf.float32), tf.TensorSpec([k, n], tf.float32)
    )
    bmm = node_of(report, "BatchMatMulV2")
    assert bmm.cost.flops == 2 * b * m * n * k


def test_einsum_flops_count_every_point_of_the_index_space():
    b, i, j, k = 2, 3, 4, 5
    report = trace_and_inspect(
        lambda x, y: tf.einsum("bij,bjk->bik", x, y),
        tf.TensorSpec([b, i, j], tf.float32),
        tf.TensorSpec([b, j, k], tf.float32),
    )
    assert node_of(report, "Einsum").cost.flops == 2 * b * i * j * k


@pytest.mark.parametrize(
    ("equation", "shapes", "flops"),
    [
        # Not 2 per point of i·j·k (12000): the [30,40] operand is summed to a scalar first
        # (30·40 adds), then multiplied into the 5 outputs (5 multiplies).
        ("ij,k->k", [[30, 40], [5]], 30 * 40 + 5),
        # k lives only in the second operand: sum [3,4] over k (12), then a matvec (2·2·3).
        ("ij,jk->i", [[2, 3], [3, 4]], 3 * 4 + 2 * 2 * 3),
        ("i,j->", [[3], [4]], 3 + 4 + 1),  # sum each vector, multiply the two sums
        ("i,j->ij", [[3], [4]], 3 * 4),  # outer product: one multiply per output
        ("ii->", [[5, 5]], 5),  # trace: five adds
    ],
)
def test_einsum_flops_reduce_a_one_sided_label_first(equation, shapes, flops):
    specs = [tf.TensorSpec(s, tf.float32) for s in shapes]
    report = trace_and_inspect(lambda *xs: tf.einsum(equation, *xs), *specs)
    assert node_of(report, "Einsum").cost.flops == flops


def test_conv2d_elementwise_reduction_softmax_costs():
    report = trace_and_inspect(
        lambda x, w: tf.nn.softmax(tf.reduce_sum(tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME")), [1])),
        tf.TensorSpec([2, 8, 8, 3], tf.float32),
        tf.TensorSpec([3, 3, 3, 4], tf.float32),
    )
    out_elems = 2 * 8 * 8 * 4
    assert node_of(report, "Conv2D").cost.flops == 2 * out_elems * 3 * 3 * 3
    assert node_of(report, "Relu").cost.flops == out_elems
    assert node_of(report, "Sum").cost.flops == out_elems  # one add per input element
    assert node_of(report, "Softmax").cost.flops == 5 * (2 * 8 * 4)
    # The rest (placeholders, the axis Const, the output Identity) are free: the hand total.
    hand_total = 2 * out_elems * 27 + out_elems + out_elems + 5 * (2 * 8 * 4)
    assert report.total_flops == hand_total


def test_uncostable_ops_are_listed_not_guessed():
    report = trace_and_inspect(
        lambda x: tf.matmul(x, tf.ones([3, 2])) + tf.random.stateless_uniform([1, 2], seed=[1, 2]),
        tf.TensorSpec([None, 3], tf.float32),
    )
    mm = node_of(report, "MatMul")
    assert mm.cost is None and "dynamic shape float32[None,3]" in mm.uncostable_reason
    rng = [n for n in report.uncostable if n.op.startswith("StatelessRandomUniform")]
    assert rng and rng[0].uncostable_reason.startswith("no cost rule for op type")
    listed = json.loads(report.to_json())["uncostable"]
    assert {u["name"] for u in listed} == {n.name for n in report.uncostable}
    assert "not costed (listed, not guessed)" in report.summary()


def test_report_inputs_skip_python_values_in_the_signature():
    # A Python value before a tensor does not shift the input names, and captured variables
    # are not counted as inputs.
    v = tf.Variable(tf.ones([2, 3]))

    @tf.function
    def f(x, scale=1.0, training=False, extra=None):
        y = x * scale * v
        return y + tf.reduce_sum(extra["a"]) if training else y

    report = trace_and_inspect(f, tf.ones([2, 3]), training=True, extra={"a": tf.ones([4])})
    assert [(t.name, t.shape) for t in report.inputs] == [("x", (2, 3)), ("extra['a']", (4,))]


def test_nested_tf_function_calls_are_expanded():
    w = tf.Variable(tf.ones([3, 4]))

    @tf.function
    def inner(x):
        return tf.nn.relu(tf.matmul(x, w))

    @tf.function
    def outer(x):
        return tf.reduce_sum(inner(x))

    spec = tf.TensorSpec([2, 3], tf.float32)
    expanded = trace_and_inspect(outer, spec)
    mm = node_of(expanded, "MatMul")
    assert mm.name.endswith("PartitionedCall/MatMul") and mm.cost.flops == 2 * 2 * 4 * 3
    assert mm.inputs[0] == "x:0"  # the callee's parameter is wired to the caller's input
    assert not any(n.op.endswith("PartitionedCall") for n in expanded.nodes)
    flat = trace_and_inspect(outer, spec, expand_calls=False)
    call = node_of(flat, "StatefulPartitionedCall")
    assert call.cost is None and flat.node_count < expanded.node_count


def test_cond_and_while_bodies_are_listed_but_not_totalled():
    # The ops inside tf.cond branches and tf.while_loop bodies are listed (their run count is
    # unknown statically, so they stay out of the totals).
    @tf.function
    def f(x, n):
        y = tf.cond(tf.reduce_sum(x) > 0, lambda: tf.nn.relu(x), lambda: -x)
        return tf.while_loop(lambda i, v: i < n, lambda i, v: (i + 1, v * 2.0), [0, y])[1]

    report = trace_and_inspect(f, tf.TensorSpec([4], tf.float32), tf.TensorSpec([], tf.int32))
    relu, neg, mul = (node_of(report, op) for op in ("Relu", "Neg", "Mul"))
    assert relu.inside == "cond/then_branch" and neg.inside == "cond/else_branch"
    assert mul.inside == "while/body"
    assert relu.inputs == ("x:0",) and relu.cost.flops == 4  # wired to the cond's operand
    assert node_of(report, "Less").inside == "while/cond"
    assert report.op_histogram["Relu"] == report.op_histogram["Neg"] == 1
    # Totals: only the top-level Sum (4 adds) and Greater (1); If/While listed as not costed.
    assert report.total_flops == 4 + 1
    assert sorted(n.op for n in report.uncostable) == ["StatelessIf", "StatelessWhile"]
    assert "inside If branches / While bodies" in report.summary()


def test_switch_case_branches_are_listed_but_not_totalled():
    @tf.function
    def f(x, i):
        return tf.switch_case(i, [lambda: tf.nn.relu(x), lambda: tf.tanh(x), lambda: tf.exp(x)])

    report = trace_and_inspect(f, tf.TensorSpec([4], tf.float32), tf.TensorSpec([], tf.int32))
    case = next(n for n in report.nodes if n.op in ("Case", "StatelessCase"))
    for index, op in enumerate(("Relu", "Tanh", "Exp")):
        node = node_of(report, op)
        assert node.inside == f"{case.name}/branches/{index}", (op, node.inside)
        assert node.inputs == ("x:0",)  # wired to the operand, not the branch's placeholder
    assert [n.op for n in report.uncostable] == [case.op]
    assert report.total_flops == 0  # nothing outside the branches does arithmetic


def test_json_dot_tensorboard_and_drawing(tmp_path):
    report = trace_and_inspect(
        lambda x: tf.nn.relu(tf.matmul(x, tf.ones([3, 3]))), tf.TensorSpec([2, 3], tf.float32)
    )
    data = json.loads(report.to_json())
    assert data["node_count"] == report.node_count == len(data["nodes"])
    first = data["nodes"][0]
    assert set(first) >= {"name", "op", "inputs", "outputs", "cost"}
    # Byte-identical JSON across processes: test_graph_json_identical_in_two_processes.
    dot = to_dot(report)
    assert dot.startswith("digraph")
    # Edges read back from the DOT text, by node name (the second line of each label).
    names = dict(re.findall(r'^  (n\d+) \[label="[^\\]*\\n([^\\"]*)', dot, re.M))
    edges = {(names[a], names[b]) for a, b in re.findall(r"^  (n\d+) -> (n\d+);", dot, re.M)}
    assert edges == {("x", "MatMul"), ("ones", "MatMul"), ("MatMul", "Relu"), ("Relu", "Identity")}
    drawing = draw_svg(report, tmp_path / "graph")
    assert drawing.exists() and drawing.stat().st_size > 1000
    assert plot_op_histogram(report, tmp_path / "hist.png").exists()
    logdir = write_tensorboard(report, tmp_path / "tb")
    assert list(logdir.glob("events.out.tfevents.*"))


def test_autograph_rewrites_tensor_if_and_for_but_not_python_ones():
    from graph_inspector_harness.graph_semantics import control_flow_views

    views = {v.name: v for v in control_flow_views()}
    control = ("If", "StatelessIf", "While", "StatelessWhile")
    assert views["python if (bool=True)"].count(*control) == 0
    assert views["tensor if"].count("If", "StatelessIf") == 1
    assert views["python for range(3)"].count("Mul") == 3  # unrolled at trace time
    assert views["python for range(3)"].count(*control) == 0
    assert views["tensor for tf.range(n)"].count("While", "StatelessWhile") == 1
    assert "ag__.if_stmt" in views["tensor if"].autograph_code
    assert "ag__.for_stmt" in views["tensor for tf.range(n)"].autograph_code


def test_variable_captured_by_reference_python_value_by_value():
    from graph_inspector_harness.graph_semantics import variable_vs_python_capture

    demo = variable_vs_python_capture()
    assert (demo.variable_before, demo.variable_after_assign) == (2.0, 5.0)
    assert (demo.python_before, demo.python_after_rebind) == (2.0, 2.0)  # stale, no retrace
    assert demo.traces == 2


# --- unknown dimensions, the readable drawing ----------------------------------------------------


def test_unknown_dim_costs_a_none_batch_like_a_fixed_one():
    def dense(x):
        return tf.matmul(x, tf.ones([8, 4]))

    dynamic = trace_and_inspect(dense, tf.TensorSpec([None, 8], tf.float32))
    assert dynamic.total_flops == 0 and dynamic.uncostable
    costed = trace_and_inspect(dense, tf.TensorSpec([None, 8], tf.float32), unknown_dim=6)
    fixed = trace_and_inspect(dense, tf.TensorSpec([6, 8], tf.float32))
    assert costed.total_flops == fixed.total_flops == 2 * 6 * 8 * 4
    assert costed.inputs[0].shape == (None, 8)  # shapes shown as traced
    with pytest.raises(ValueError, match="positive"):
        trace_and_inspect(dense, tf.TensorSpec([None, 8], tf.float32), unknown_dim=-3)


def test_funcgraph_drawn_as_readable_svg_grouped_by_name_scope(tmp_path):
    import xml.etree.ElementTree as ET

    from graph_inspector.render import draw_full_graph_svg, draw_scope_overview_svg
    from graph_inspector_harness.fingerprint import bert_report

    report = bert_report(seq_len=16, num_labels=5)
    overview = draw_scope_overview_svg(report, tmp_path / "g.svg")
    full = draw_full_graph_svg(report, tmp_path / "g_full.svg")
    ns = {"s": "http://www.w3.org/2000/svg"}
    boxes = ET.parse(overview).getroot().findall("s:rect", ns)
    texts = [t.text for t in ET.parse(overview).getroot().findall("s:text", ns)]
    assert 10 <= len(boxes) <= 40  # scopes, not 463 nodes
    assert any(t and t.endswith("layer_0/attention") for t in texts), texts
    assert any(t and t.endswith("pooler") for t in texts)
    sizes = {int(t.get("font-size")) for t in ET.parse(overview).getroot().findall("s:text", ns)}
    assert min(sizes) >= 11  # readable at 100% zoom
    width = float(ET.parse(overview).getroot().get("width"))
    assert width <= 1400  # fits the page without scaling the text down
    full_boxes = ET.parse(full).getroot().findall("s:rect", ns)
    assert len(full_boxes) > 3 * len(boxes)  # the whole graph, one click away


# --- MLIR stage by stage, the MLIR bridge on and off ---------------------------------------------


def _two_layer():
    w = tf.Variable(tf.random.stateless_normal([16, 16], seed=[1, 2]))

    def f(x):
        return tf.nn.softmax(tf.matmul(tf.nn.relu(tf.matmul(x, w)), w) + 1.0)

    return f, tf.random.stateless_normal([4, 16], seed=[3, 4])


def test_mlir_stages_lower_the_tf_dialect_to_stablehlo():
    from graph_inspector.compiler_stats import mlir_stages

    f, x = _two_layer()
    stages = {s.stage: s for s in mlir_stages(tf.function(f).get_concrete_function(x))}
    imported, standard = stages["imported"], stages["tf-standard-pipeline"]
    hlo = stages["legalized to StableHLO"]
    assert not (imported.error or standard.error or hlo.error)
    assert imported.by_dialect().get("tf_executor", 0) > 0  # islands of the imported graph
    assert "tf_executor" not in standard.by_dialect()  # functional form after the pipeline
    assert imported.op_counts["tf.MatMul"] == standard.op_counts["tf.MatMul"] == 2
    assert set(hlo.by_dialect()) == {"stablehlo"} and hlo.op_counts["stablehlo.dot"] == 2
    assert "stablehlo.dot" in hlo.text


def test_mlir_bridge_on_and_off_compile_to_equal_outputs():
    from graph_inspector.compiler_stats import bridge_comparison
    from tensorflow.python.eager import context

    f, x = _two_layer()
    before = context.context().enable_mlir_bridge
    runs = bridge_comparison(f, x, repeats=1)
    assert [r.bridge for r in runs] == ["MLIR bridge", "old bridge"]
    after = context.context().enable_mlir_bridge  # 0 unspecified, 1 enabled, 2 disabled
    assert after == (2 if before == 0 else before)  # restored (unspecified: left disabled)
    np.testing.assert_allclose(runs[0].outputs, runs[1].outputs, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(runs[0].outputs, f(x).numpy(), rtol=1e-5, atol=1e-6)
    assert all(r.compile_seconds > 0 and r.hlo_op_counts.get("dot") == 2 for r in runs)
