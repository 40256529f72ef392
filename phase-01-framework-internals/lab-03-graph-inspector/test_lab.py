"""Lab 03 acceptance suite: graph inspection, cost model, retracing monitor, CLI, and the
BERT model through SavedModel to validated TFLite models.

Run: ``python test_lab.py`` in this folder, or ``pytest test_lab.py`` (a few minutes on two
cores: the BERT-tiny pipeline runs once, in a module-scoped fixture, and the tests re-measure
its artefacts independently).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from graph_inspector import cli, retrace_scenarios  # noqa: E402
from graph_inspector.bert import (  # noqa: E402
    BertConfig,
    BertForSequenceClassification,
    BertTokenizer,
    load_hf_bert,
)
from graph_inspector.cost_rules import category  # noqa: E402
from graph_inspector.inspect_graph import trace_and_inspect  # noqa: E402
from graph_inspector.mnli import MNLI_LABELS, load_mnli_tsv  # noqa: E402
from graph_inspector.pipeline import (  # noqa: E402
    convert_savedmodel,
    export_untracked_module,
    keras_predict,
    run_demo,
)
from graph_inspector.retrace import RetraceMonitor, explain_retracing  # noqa: E402
from graph_inspector.tflite import ConversionError, TFLiteModel, validate_tflite  # noqa: E402
from phase01_common.checkpoints import minilm_checkpoint_dir  # noqa: E402

LAB = Path(__file__).resolve().parent


def node_of(report, op: str):
    matches = [n for n in report.nodes if n.op == op]
    assert matches, f"no {op} node in {[n.op for n in report.nodes]}"
    return matches[0]


# --- retracing -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "scenario",
    retrace_scenarios.TRIGGERS + retrace_scenarios.FIXES,
    ids=lambda s: s.__name__,
)
def test_retrace_scenario_counts_and_causes(scenario):
    result = scenario()
    assert result.traces == result.expected_traces, result.log.report()
    # The monitor's count is TensorFlow's own count, not a separate guess.
    assert result.tf_tracing_count == result.traces
    for arg, kind in result.expected_causes:
        assert result.found(arg, kind), f"missing cause {arg} ({kind}):\n{result.log.report()}"


def test_retrace_explanations_say_now_and_before():
    text = retrace_scenarios.new_shape().log.report()
    assert "x: now float32[4,3], before float32[2,3]" in text
    assert "tf.TensorSpec([None, 3], tf.float32)" in text  # the suggested input_signature
    text = retrace_scenarios.new_python_value().log.report()
    assert "training: now True, before False" in text
    text = retrace_scenarios.new_dtype().log.report()
    assert "x: now float64[3], before float32[3]" in text
    text = retrace_scenarios.new_closure_argument().log.report()
    assert "capturing scale=3.0" in text and "capturing scale=2.0" in text
    text = retrace_scenarios.redefined_in_loop().log.report()
    assert "hoist the tf.function" in text and "<captured> scale: now 3.0, before 2.0" in text


def test_retrace_monitor_wrapping_and_closest_trace():
    @tf.function
    def f(x, mode):
        return x * 2 if mode == "double" else x

    monitor = RetraceMonitor(f)
    monitor(tf.ones([2]), "double")
    monitor(tf.ones([3]), "double")  # shape differs from trace 1
    monitor(tf.ones([2]), "same")  # closest earlier trace is trace 1: only `mode` differs
    monitor(tf.ones([3]), "double")  # reuses trace 2
    assert monitor.traces == f.experimental_get_tracing_count() == 3
    last = monitor.records[2]
    assert [(c.arg, c.kind) for c in last.causes] == [("mode", "python value")]
    assert str(last.causes[0]) == "mode: now 'same', before 'double'"
    assert monitor.records[3].new_traces == 0


def test_retrace_monitor_wraps_plain_function_and_rejects_non_callable():
    monitor = RetraceMonitor(lambda x: x + 1, reduce_retracing=True)
    for n in (1, 2, 3):
        monitor(tf.ones([n]))
    assert monitor.traces == monitor.fn.experimental_get_tracing_count() == 2
    with pytest.raises(TypeError, match="tf.function or a callable"):
        RetraceMonitor(42)


def test_explain_retracing_restores_tf_function_call():
    call_before = type(tf.function(lambda: None)).__call__
    with explain_retracing():
        pass
    assert type(tf.function(lambda: None)).__call__ is call_before
    with pytest.raises(TypeError, match="cannot watch"):
        with explain_retracing(42):
            pass


def test_retrace_of_a_function_traced_before_monitoring():
    # Regression: the first monitored retrace was reported as "first call", 0 retraces.
    result = retrace_scenarios.traced_before_monitoring()
    text = result.log.report()
    assert "first call" not in text, text
    assert len(result.log.retraces) == 1 and result.log.records[0].retraced
    assert "x: now float32[2], before float32[1] (a trace made before monitoring began)" in text


def test_retrace_monitor_stores_the_generalized_trace_of_reduce_retracing():
    # Regression: the stored trace kept the call's [4,3], so a Python-value retrace also blamed x.
    result = retrace_scenarios.python_value_under_reduce_retracing()
    traced = [r for r in result.log.records if r.new_traces]
    assert [(c.arg, c.kind) for c in traced[-1].causes] == [("flag", "python value")]
    shape_fix = traced[1].causes[0].fix
    assert "reduce_retracing is on" in shape_fix and "use tf.function(" not in shape_fix


def test_saving_retrace_is_explained_by_the_call_context(tmp_path):
    # Regression: Keras's ExportArchive (tf.saved_model.save) traces a model's tf.function call
    # again with the same arguments; the monitor said "unexplained". TF keys traces by the
    # call context too, and saving runs the call inside its save context.
    class Model(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(2)

        @tf.function(reduce_retracing=True)
        def call(self, x, training=False):
            return self.dense(x)

    model = Model()
    model(tf.ones([1, 3]))
    with explain_retracing() as log:  # every tf.function, as the pipeline watches its export
        model(tf.ones([4, 3]))
        model(tf.ones([5, 3]))  # generalized to [None, 3]: the export reuses its arguments
        archive = keras.export.ExportArchive()
        archive.track(model)
        spec = tf.TensorSpec([None, 3], tf.float32)
        archive.add_endpoint("serve", lambda x: model(x), input_signature=[spec])
        archive.write_out(str(tmp_path / "sm"), verbose=False)
    saving = [c for c in log.causes() if c.kind == "call context"]
    assert [(c.arg, c.now, c.before) for c in saving] == [("<saving a SavedModel>", "yes", "no")]
    assert not [c for c in log.causes() if c.kind == "unexplained"]
    # Saving also traces the call for serialization without calling it: recorded as such, so
    # the monitor's count stays TensorFlow's.
    assert any(c.kind == "traced without a call" for c in log.causes())
    assert log.traces == log.tracing_count()


def test_explain_retracing_of_a_class_method_watches_every_instance():
    # Regression: explain_retracing(Model.step) watched nothing; a second instance was blamed on
    # "a new tf.function object" with the advice to hoist it.
    result = retrace_scenarios.method_on_new_instance()
    assert result.traces == 2 == result.tf_tracing_count
    second = result.log.records[1]
    assert [c.kind for c in second.causes] == ["new instance"]
    text = result.log.report()
    assert "each object's bound method has its own trace cache" in text
    assert "hoist" not in text and "new tf.function object" not in text

    class Model(tf.Module):
        @tf.function
        def step(self, x):
            return x

    with pytest.warns(UserWarning, match="never called"):
        with explain_retracing(Model.step):
            pass


def test_retrace_names_a_container_type_change():
    # Regression: a list replaced by a tuple was "unexplained" (the same leaf paths).
    result = retrace_scenarios.container_type_changed()
    text = result.log.report()
    assert "batch['b']: now tuple, before list" in text and "unexplained" not in text


def test_composite_tensor_arguments_are_keyed_by_type_spec():
    # Regression: RaggedTensor was "unhashable", SparseTensor "object identity".
    from graph_inspector.retrace import describe

    result = retrace_scenarios.composite_tensors()
    text = result.log.report()
    assert "s: now SparseTensor float32[4,3], before SparseTensor float32[2,3] [shape]" in text
    assert "unhashable" not in text and "object identity" not in text
    a = describe(tf.ragged.constant([[1.0, 2.0], [3.0]]))
    b = describe(tf.ragged.constant([[1.0], [3.0, 4.0, 5.0]]))
    assert a.key == b.key and a.kind == "composite"


def test_keras_variable_argument_is_keyed_like_a_tensor():
    # Regression: a keras.Variable was "unhashable" with advice to define __hash__; TF keys it by
    # a TensorSpec, so a tensor of the same shape reuses its trace.
    @tf.function
    def g(v):
        return v * 2.0

    monitor = RetraceMonitor(g)
    monitor(keras.Variable(tf.ones([2])))
    monitor(keras.Variable(tf.ones([2])))  # another object, same spec: no trace
    monitor(keras.Variable(tf.ones([3])))
    monitor(tf.ones([2]))  # reuses the keras.Variable [2] trace
    assert [r.new_traces for r in monitor.records] == [1, 0, 1, 0]
    assert monitor.traces == g.experimental_get_tracing_count() == 2
    assert [str(c) for c in monitor.records[2].causes] == ["v: now float32[3], before float32[2]"]
    assert monitor.records[2].causes[0].kind == "shape"


def test_object_hashed_by_value_is_not_called_identity():
    # Regression: a frozen dataclass changing value was labelled [object identity].
    result = retrace_scenarios.object_value()
    assert result.found("config", "object value")
    assert "object identity" not in result.log.report()


# --- graph inspection and cost model -----------------------------------------------------------


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
        # Regression: 12000 (2 per point of i·j·k). The [30,40] operand is summed to a scalar
        # first (30·40 adds), then multiplied into the 5 outputs (5 multiplies).
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


def test_report_counts_inputs_outputs_captures():
    w = tf.Variable(tf.ones([3, 4]))
    c = tf.constant([1.0, 2.0, 3.0, 4.0])

    @tf.function
    def f(x, y):
        return {"z": tf.matmul(x, w) + c, "y2": y * 2}

    report = trace_and_inspect(f, tf.TensorSpec([2, 3], tf.float32), tf.TensorSpec([5], tf.int32))
    concrete = f.get_concrete_function(
        tf.TensorSpec([2, 3], tf.float32), tf.TensorSpec([5], tf.int32)
    )
    assert report.node_count == len(concrete.graph.get_operations())
    assert report.op_histogram == Counter(op.type for op in concrete.graph.get_operations())
    assert [(t.name, t.dtype, t.shape) for t in report.inputs] == [
        ("x", "float32", (2, 3)),
        ("y", "int32", (5,)),
    ]
    assert sorted((t.name, t.shape) for t in report.outputs) == [
        ("output['y2']", (5,)),
        ("output['z']", (2, 4)),
    ]
    assert report.captured("variable") == (1, 3 * 4 * 4)
    assert report.captured("constant") == (1, 4 * 4)


def test_report_inputs_skip_python_values_in_the_signature():
    # Regression: a Python value before a tensor shifted the input names (and the count took
    # captured variables for inputs).
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
    # Regression: the ops inside tf.cond branches and tf.while_loop bodies were missing.
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
    dot = report.to_dot()
    assert dot.startswith("digraph")
    # Edges read back from the DOT text, by node name (the second line of each label).
    names = dict(re.findall(r'^  (n\d+) \[label="[^\\]*\\n([^\\"]*)', dot, re.M))
    edges = {(names[a], names[b]) for a, b in re.findall(r"^  (n\d+) -> (n\d+);", dot, re.M)}
    assert edges == {("x", "MatMul"), ("ones", "MatMul"), ("MatMul", "Relu"), ("Relu", "Identity")}
    drawing = report.render(tmp_path / "graph")
    assert drawing.exists() and drawing.stat().st_size > 1000
    assert report.plot_op_histogram(tmp_path / "hist.png").exists()
    logdir = report.write_tensorboard(tmp_path / "tb")
    assert list(logdir.glob("events.out.tfevents.*"))


def test_graph_json_identical_in_two_processes():
    from graph_inspector.fingerprint import fingerprints_in_subprocesses

    a, b = fingerprints_in_subprocesses("mlp", processes=2)
    assert a["node_count"] == b["node_count"] > 0
    assert a["sha256"] == b["sha256"]


def test_bert_tiny_graph_matmul_flops_match_analytic_count():
    from graph_inspector.bert import BertConfig
    from graph_inspector.fingerprint import bert_report
    from graph_inspector.report_section import bert_analytic_matmul_flops

    seq = 32
    report = bert_report(seq_len=seq, num_labels=5)
    cfg = BertConfig()
    measured = sum(n.cost.flops for n in report.nodes if n.cost and category(n.op) == "matmul/conv")
    expected = bert_analytic_matmul_flops(
        1, seq, cfg.hidden_size, cfg.intermediate_size, cfg.num_hidden_layers, 5
    )
    assert measured == expected
    assert report.uncostable == []
    assert report.captured("variable")[0] > 0  # reads variables, not baked initial values


def test_autograph_rewrites_tensor_if_and_for_but_not_python_ones():
    from graph_inspector.graph_semantics import control_flow_views

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
    from graph_inspector.graph_semantics import variable_vs_python_capture

    demo = variable_vs_python_capture()
    assert (demo.variable_before, demo.variable_after_assign) == (2.0, 5.0)
    assert (demo.python_before, demo.python_after_rebind) == (2.0, 2.0)  # stale, no retrace
    assert demo.traces == 2


# --- CLI --------------------------------------------------------------------------------------


def run_cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "graph_inspector", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )


def assert_one_line_error(proc: subprocess.CompletedProcess, needle: str) -> None:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("graph_inspector: error:") and needle in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["inspect", "convert"])
def test_cli_bad_path_and_not_a_savedmodel(tmp_path, command):
    proc = run_cli(command, str(tmp_path / "missing"))
    assert_one_line_error(proc, "no such file or directory")
    assert proc.returncode == cli.EXIT_USAGE
    proc = run_cli(command, str(tmp_path))
    assert_one_line_error(proc, "is not a SavedModel")
    assert proc.returncode == cli.EXIT_USAGE


@pytest.mark.parametrize("command", ["inspect", "convert"])
def test_cli_corrupt_savedmodel_is_one_line(tmp_path, command):
    (tmp_path / "saved_model.pb").write_bytes(b"not a protobuf")
    proc = run_cli(command, str(tmp_path))
    assert_one_line_error(proc, "could not be loaded as a SavedModel")
    assert proc.returncode == cli.EXIT_USAGE  # convert exited 1 with an OSError line


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        ([], "required: command"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["inspect", ".", "--unknown-dim", "x"], "--unknown-dim: invalid int value: 'x'"),
        (["convert", ".", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_cli_argument_errors_are_one_line(argv, needle, capsys):
    # Regression: argparse printed its usage block and a "python -m graph_inspector <cmd>:" prefix.
    assert cli.main(argv) == cli.EXIT_USAGE
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graph_inspector: error: "), captured.err
    assert needle in lines[0] and captured.out == ""


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["inspect", "{sm}", "--json", "{tmp}/missing/r.json"], "missing does not exist"),
        (["inspect", "{sm}", "--dot", "{tmp}"], "is a folder, expected a file name"),
        (["convert", "{sm}", "--out", "{tmp}/a_file"], "a_file: exists and is not a folder"),
        (["convert", "{sm}", "--out", "{tmp}/a_file/sub"], "a_file is a file, not a folder"),
    ],
)
def test_cli_output_paths_are_checked_before_the_work(tmp_path, argv, needle, capsys):
    # Regression: the paths were only tried after the work (inspect crashed with exit 1 at the
    # end). The SavedModel here is corrupt, so reaching the work would report that instead.
    sm = tmp_path / "sm"
    sm.mkdir()
    (sm / "saved_model.pb").write_bytes(b"not a protobuf")
    (tmp_path / "a_file").write_text("")
    argv = [a.format(sm=sm, tmp=tmp_path) for a in argv]
    assert cli.main(argv) == cli.EXIT_USAGE
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graph_inspector: error: ")
    assert needle in lines[0] and "could not be loaded" not in lines[0], lines[0]


@pytest.fixture(scope="module")
def small_savedmodel(tmp_path_factory):
    class Classifier(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.random.stateless_normal([8, 4], seed=[1, 2]))
            self.b = tf.Variable(tf.zeros([4]))

        @tf.function(input_signature=[tf.TensorSpec([2, 8], tf.float32, name="x")])
        def serve(self, x):
            return {"probs": tf.nn.softmax(tf.matmul(x, self.w) + self.b)}

    folder = tmp_path_factory.mktemp("sm") / "classifier"
    model = Classifier()
    tf.saved_model.save(model, str(folder), signatures={"serving_default": model.serve})
    return folder


def test_cli_unconvertible_graph_is_one_line(tmp_path):
    class PyFunc(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([2, 8], tf.float32, name="x")])
        def serve(self, x):
            # tf.py_function runs Python: TFLite has no kernel for it (neither builtin nor flex).
            return {"y": tf.py_function(lambda t: t * 2, [x], tf.float32)}

    module = PyFunc()
    folder = tmp_path / "pyfunc"
    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})
    proc = run_cli("convert", str(folder), "--out", str(tmp_path / "out"))
    assert_one_line_error(proc, "conversion")
    assert proc.returncode == cli.EXIT_FAILED
    assert not (tmp_path / "out" / "model_float32.tflite").exists()


def test_cli_inspect_small_savedmodel(small_savedmodel, tmp_path, capsys):
    json_path, dot_path = tmp_path / "g.json", tmp_path / "g.dot"
    code = cli.main(
        ["inspect", str(small_savedmodel), "--json", str(json_path), "--dot", str(dot_path)]
        + ["--mlir", "--tensorboard", str(tmp_path / "tb")]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "signature 'serving_default'" in out and "MatMul" in out and "tf.MatMul" in out
    data = json.loads(json_path.read_text())["serving_default"]
    assert data["captured_variables"] == {"count": 2, "bytes": (8 * 4 + 4) * 4}
    mm = [n for n in data["nodes"] if n["op"] == "MatMul"][0]
    assert mm["cost"]["flops"] == 2 * 2 * 4 * 8
    assert dot_path.read_text().startswith("digraph")
    assert list((tmp_path / "tb" / "serving_default").glob("events.out.tfevents.*"))


def test_cli_inspect_xla(small_savedmodel, capsys):
    assert cli.main(["inspect", str(small_savedmodel), "--xla"]) == 0
    out = capsys.readouterr().out
    assert "XLA (jit_compile=True" in out and " dot " in out.replace(",", " ")


def test_cli_unknown_signature_is_one_line(small_savedmodel, capsys):
    assert cli.main(["inspect", str(small_savedmodel), "--signature", "nope"]) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no signature 'nope'" in err[0]


def test_numpy_arguments_are_described_like_tensors():
    from graph_inspector.retrace import describe

    assert describe(np.zeros([2, 3], np.float32)).text == "float32[2,3]"
    assert describe(tf.zeros([2], tf.int32)).key == describe(np.zeros([2], np.int32)).key


# --- BERT, SavedModel, TFLite ----------------------------------------------------------

HIDDEN_TOL = 1e-4  # Keras BERT vs transformers' BertModel, last hidden state
TFLITE_FP32_TOL = 1e-4  # TFLite float32 vs TensorFlow, logits
MAX_ACCURACY_DELTA_PP = 0.5  # dynamic-range vs float32, percentage points


# ---------------------------------------------------------------- Keras BERT vs PyTorch


@pytest.fixture(scope="module")
def minilm():
    import torch
    from transformers import BertModel as HFBertModel

    folder = minilm_checkpoint_dir()
    keras_model, config = load_hf_bert(folder)
    reference = HFBertModel.from_pretrained(folder, local_files_only=True).eval()
    tokenizer = BertTokenizer(folder, max_length=48)

    def both(batch: dict[str, np.ndarray]):
        hidden, pooled = keras_model(
            batch["input_ids"], batch["attention_mask"], batch["token_type_ids"]
        )
        with torch.no_grad():
            out = reference(**{k: torch.tensor(v, dtype=torch.long) for k, v in batch.items()})
        return (
            (hidden.numpy(), pooled.numpy()),
            (out.last_hidden_state.numpy(), out.pooler_output.numpy()),
        )

    return config, tokenizer, both


def _max_diff_on_real_tokens(ours: np.ndarray, ref: np.ndarray, mask: np.ndarray) -> float:
    # Padding positions are outputs nobody reads; compare where attention_mask is 1.
    return float(np.abs(ours - ref)[mask.astype(bool)].max())


def test_minilm_config_read_from_checkpoint(minilm):
    config, tokenizer, _ = minilm
    assert (config.num_hidden_layers, config.hidden_size, config.num_attention_heads) == (
        6,
        384,
        12,
    )
    assert config.vocab_size == tokenizer.vocab_size == 30522


def test_keras_bert_matches_transformers_single_sentences(minilm):
    _, tokenizer, both = minilm
    batch = tokenizer(
        [
            "The quick brown fox jumps over the lazy dog.",
            "Graph mode and eager mode should agree.",
            "Short one",
        ]
    )
    (hidden, pooled), (ref_hidden, ref_pooled) = both(batch)
    assert hidden.shape == ref_hidden.shape == (3, 48, 384)
    assert _max_diff_on_real_tokens(hidden, ref_hidden, batch["attention_mask"]) <= HIDDEN_TOL
    assert float(np.abs(pooled - ref_pooled).max()) <= HIDDEN_TOL


def test_keras_bert_matches_transformers_unpadded_all_positions(minilm):
    _, tokenizer, both = minilm
    batch = tokenizer(["Every position here is a real token, nothing is padding at all"] * 2)
    n_real = int(batch["attention_mask"][0].sum())
    batch = {k: v[:, :n_real] for k, v in batch.items()}  # drop the padding columns
    (hidden, _), (ref_hidden, _) = both(batch)
    assert float(np.abs(hidden - ref_hidden).max()) <= HIDDEN_TOL


def test_keras_bert_matches_transformers_sentence_pairs(minilm):
    _, tokenizer, both = minilm
    batch = tokenizer(
        ["A man is playing a guitar on stage.", "The cat sleeps."],
        ["Someone performs music.", "A dog is barking loudly at the mail carrier."],
    )
    # Second segment is marked with token type 1, the first with 0.
    assert set(np.unique(batch["token_type_ids"])) == {0, 1}
    assert batch["token_type_ids"][0, 0] == 0
    (hidden, pooled), (ref_hidden, ref_pooled) = both(batch)
    assert _max_diff_on_real_tokens(hidden, ref_hidden, batch["attention_mask"]) <= HIDDEN_TOL
    assert float(np.abs(pooled - ref_pooled).max()) <= HIDDEN_TOL


def test_first_traced_call_reads_the_weights():
    """A fresh model called first inside tf.function must still see later weight updates."""
    model = BertForSequenceClassification(BertConfig(vocab_size=50, max_position_embeddings=8), 3)
    ids = tf.constant([[1, 2]], tf.int32)

    @tf.function
    def logits():
        return model(ids, tf.ones_like(ids), tf.zeros_like(ids))

    before = logits().numpy()
    model.classifier.bias.assign(model.classifier.bias + 1.0)
    np.testing.assert_allclose(logits().numpy(), before + 1.0, rtol=0, atol=1e-5)


def test_load_hf_bert_rejects_bad_folders(tmp_path):
    with pytest.raises(FileNotFoundError, match="checkpoint folder not found"):
        load_hf_bert(tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="model.safetensors"):
        load_hf_bert(tmp_path)
    (tmp_path / "config.json").write_text('{"model_type": "roberta"}')
    with pytest.raises(ValueError, match="model_type"):
        BertConfig.from_hf_json(tmp_path / "config.json")
    with pytest.raises(ValueError, match="multiple of"):
        BertConfig(hidden_size=130, num_attention_heads=4)


_TINY_HF = dict(
    vocab_size=20,
    hidden_size=8,
    num_hidden_layers=2,
    num_attention_heads=2,
    intermediate_size=16,
    max_position_embeddings=16,
)


def _write_tiny_hf_checkpoint(folder: Path, stored_layers: int, **extra: np.ndarray) -> None:
    """A Hugging Face style folder: config.json says 2 layers, the weights hold stored_layers."""
    from graph_inspector.bert import BertModel, _hf_to_keras_pairs
    from safetensors.numpy import save_file

    folder.mkdir()
    model = BertModel(BertConfig(**{**_TINY_HF, "num_hidden_layers": stored_layers}))
    tensors = {
        f"bert.{name}": (np.asarray(v).T if transpose else np.asarray(v)).copy()
        for name, v, transpose in _hf_to_keras_pairs(model)
    }
    save_file({**tensors, **extra}, str(folder / "model.safetensors"))
    (folder / "config.json").write_text(json.dumps({"model_type": "bert", **_TINY_HF}))


def test_load_hf_bert_rejects_weights_the_config_does_not_use(tmp_path):
    # Regression: a 2-layer config over 3-layer weights loaded and silently dropped layer 2.
    _write_tiny_hf_checkpoint(tmp_path / "extra_layer", stored_layers=3)
    with pytest.raises(ValueError, match=r"layers 2 but config.json has num_hidden_layers=2; 16 "):
        load_hf_bert(tmp_path / "extra_layer")
    # Task heads and the position-id buffer are not part of the encoder: ignored, not an error.
    head = {
        "classifier.weight": np.zeros([3, 8], np.float32),
        "bert.embeddings.position_ids": np.arange(16, dtype=np.int64)[None],
    }
    _write_tiny_hf_checkpoint(tmp_path / "task_model", stored_layers=2, **head)
    model, config = load_hf_bert(tmp_path / "task_model")
    assert config.num_hidden_layers == len(model.encoder_layers) == 2
    _write_tiny_hf_checkpoint(
        tmp_path / "stray", stored_layers=2, **{"bert.extra.weight": np.zeros(2, np.float32)}
    )
    with pytest.raises(ValueError, match=r"1 tensor\(s\) unused: extra.weight$"):
        load_hf_bert(tmp_path / "stray")


def test_load_hf_bert_names_a_corrupt_file(tmp_path):
    # Regression: a raw JSONDecodeError / SafetensorError that did not say which file.
    _write_tiny_hf_checkpoint(tmp_path / "ckpt", stored_layers=2)
    (tmp_path / "ckpt" / "model.safetensors").write_bytes(b"garbage bytes here")
    with pytest.raises(ValueError, match=r"model.safetensors: not a readable safetensors file"):
        load_hf_bert(tmp_path / "ckpt")
    (tmp_path / "ckpt" / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match=r"config.json: not valid JSON"):
        load_hf_bert(tmp_path / "ckpt")


def test_bert_config_names_a_wrongly_typed_field(tmp_path):
    # Regression: a string where an int belongs surfaced as a Keras error inside a layer.
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "bert", "type_vocab_size": "two"}))
    with pytest.raises(ValueError, match=r"config.json: BertConfig.type_vocab_size must be an int"):
        BertConfig.from_hf_json(path)
    path.write_text(json.dumps({"model_type": "bert", "pad_token_id": None, "hidden_size": 64}))
    assert BertConfig.from_hf_json(path).pad_token_id is None  # null is valid in HF configs
    with pytest.raises(TypeError, match="num_attention_heads must be an integer"):
        BertConfig(num_attention_heads=2.0)


def test_tokenizer_rejects_mismatched_pairs():
    tokenizer = BertTokenizer(minilm_checkpoint_dir(), max_length=16)
    with pytest.raises(ValueError, match="2 first sentences but 1 second"):
        tokenizer(["a", "b"], ["c"])
    with pytest.raises(TypeError, match="list of strings"):
        tokenizer("not a list")


# ---------------------------------------------------------------- the pipeline, run once


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    return run_demo(tmp_path_factory.mktemp("lab03_pipeline"), quick=True)


def test_savedmodel_round_trip_matches(demo):
    loaded = tf.saved_model.load(str(demo.savedmodel_dir))
    signature = loaded.signatures["serving_default"]
    sample = {k: v[:100] for k, v in demo.dev_inputs.items()}
    reloaded = signature(**{k: tf.constant(v) for k, v in sample.items()})["logits"].numpy()
    original = keras_predict(demo.model, sample)
    assert reloaded.shape == (100, len(demo.label_names))
    np.testing.assert_allclose(reloaded, original, rtol=0, atol=1e-5)


def test_tflite_float32_matches_tf_on_100_samples(demo):
    sample = {k: v[:100] for k, v in demo.dev_inputs.items()}
    tf_logits = keras_predict(demo.model, sample)
    tfl_logits = TFLiteModel(demo.conversion.float32_path).predict(sample)
    assert tfl_logits.shape == tf_logits.shape == (100, len(demo.label_names))
    assert float(np.abs(tfl_logits - tf_logits).max()) <= TFLITE_FP32_TOL


def test_dynamic_range_accuracy_within_half_point_of_float32(demo):
    labels = demo.dev_labels
    fp32 = TFLiteModel(demo.conversion.float32_path).predict(demo.dev_inputs)
    dyn = TFLiteModel(demo.conversion.dynamic_range_path).predict(demo.dev_inputs)
    acc_fp32 = float((fp32.argmax(-1) == labels).mean())
    acc_dyn = float((dyn.argmax(-1) == labels).mean())
    assert len(labels) > 400  # the whole dev split, not a sample
    assert abs(100 * (acc_dyn - acc_fp32)) <= MAX_ACCURACY_DELTA_PP
    # The model actually learned the topics (chance is 20%), so the delta means something.
    assert acc_fp32 >= 0.8
    # Dynamic-range really quantized the weights: int8 is about a quarter of float32.
    assert demo.conversion.dynamic_range_bytes < 0.35 * demo.conversion.float32_bytes


def test_validator_catches_keras_variables_in_plain_tf_module(demo, tmp_path):
    # The SavedModel of the trap is fine in TensorFlow...
    seq_len = demo.dev_inputs["input_ids"].shape[1]
    broken_dir = export_untracked_module(demo.model, tmp_path / "untracked", seq_len)
    loaded = tf.saved_model.load(str(broken_dir))
    sample = {k: tf.constant(v[:4]) for k, v in demo.dev_inputs.items()}
    np.testing.assert_allclose(
        loaded.signatures["serving_default"](**sample)["logits"].numpy(),
        keras_predict(demo.model, {k: v[:4] for k, v in demo.dev_inputs.items()}),
        atol=1e-5,
    )
    # ...but its TFLite conversion "succeeds" into a broken model, which must be refused.
    probes = {k: v[:8] for k, v in demo.dev_inputs.items()}
    with pytest.raises(ConversionError, match="failed validation.*(NaN|disagrees|too small)"):
        convert_savedmodel(broken_dir, tmp_path / "tflite", probe_inputs=probes)
    assert not (tmp_path / "tflite" / "model_float32.tflite").exists()


def test_validator_raises_on_nan_model(tmp_path):
    class NaNModel(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(np.ones((4, 3), np.float32))

        @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
        def serve(self, x):
            # log of a negative number: NaN for every input, a deliberately broken model.
            return {"y": tf.math.log(-tf.abs(tf.matmul(x, self.w)) - 1.0)}

    module = NaNModel()
    tf.saved_model.save(module, str(tmp_path / "nan"), signatures={"serving_default": module.serve})
    with pytest.raises(ConversionError, match="outputs are NaN or infinite"):
        convert_savedmodel(tmp_path / "nan", tmp_path / "out")


def test_validator_checks_every_output_by_name(tmp_path):
    # Two outputs: a matmul on a tracked tf.Variable (converts fine) and a Keras 3 Dense read
    # inside a plain tf.Module (the lab's trap: converts to NaN). Sorted by name the good one
    # comes first; checking only the first output would pass this model.
    dense = keras.layers.Dense(5)
    dense.build((None, 64))

    class TwoOutputs(tf.Module):
        def __init__(self):
            super().__init__()
            self.keras_variables = list(dense.variables)
            self.w = tf.Variable(tf.random.stateless_normal([64, 64], seed=[1, 2]))

        @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32, name="x")])
        def serve(self, x):
            return {"a_features": tf.matmul(x, self.w), "b_logits": dense(x)}

    module = TwoOutputs()
    tf.saved_model.save(module, str(tmp_path / "sm"), signatures={"serving_default": module.serve})
    probes = {"x": np.random.default_rng(0).standard_normal([8, 64]).astype(np.float32)}
    with pytest.raises(ConversionError, match="b_logits: .*(NaN|disagrees)"):
        convert_savedmodel(tmp_path / "sm", tmp_path / "out", probe_inputs=probes)
    assert not (tmp_path / "out" / "model_float32.tflite").exists()


def test_dynamic_range_validator_catches_a_ten_percent_shift(demo):
    probes = {k: v[:16] for k, v in demo.dev_inputs.items()}
    content = demo.conversion.dynamic_range_path.read_bytes()
    report = demo.conversion.validations["dynamic_range"]
    assert report.rel_error < 0.02 and report.outputs["logits"]["argmax_agreement"] >= 0.9
    with pytest.raises(ConversionError, match="logits: disagrees with TensorFlow"):
        validate_tflite(
            content,
            lambda inputs: keras_predict(demo.model, inputs) * 1.1,
            probes,
            quantization="dynamic_range",
            param_bytes=demo.conversion.param_bytes,
        )


def test_validator_raises_when_tflite_disagrees_with_tf(demo):
    probes = {k: v[:16] for k, v in demo.dev_inputs.items()}
    content = demo.conversion.float32_path.read_bytes()

    def shifted_reference(inputs):  # stands in for a conversion that changed the numbers
        return keras_predict(demo.model, inputs) + 0.5

    with pytest.raises(ConversionError, match="disagrees with TensorFlow"):
        validate_tflite(
            content,
            shifted_reference,
            probes,
            quantization="float32",
            param_bytes=demo.conversion.param_bytes,
        )


def test_convert_rejects_paths_that_are_not_savedmodels(tmp_path):
    with pytest.raises(ConversionError, match="does not exist"):
        convert_savedmodel(tmp_path / "nope", tmp_path / "out")
    with pytest.raises(ConversionError, match="not a SavedModel"):
        convert_savedmodel(tmp_path, tmp_path / "out")


def test_demo_reports_measured_table_and_passing_checks(demo):
    failed = [f"{c.name}: {c.measured}" for c in demo.checks if not c.passed]
    assert not failed, failed
    (table,) = demo.tables
    assert len(table.rows) == 3 and not table.has_nan()
    assert all(image.path.is_file() for image in demo.images)
    assert all(ms > 0 for ms in demo.latency_ms.values())


# ---------------------------------------------------------------- MNLI TSV


_MNLI_HEADER = (
    "index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
    "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tlabel2\tlabel3\tlabel4\t"
    "label5\tgold_label"
)


def _mnli_row(i: int, premise: str, hypothesis: str, gold: str) -> str:
    return "\t".join(
        [str(i), "1", f"{i}n", "fiction", "( x )", "( y )", "(ROOT x)", "(ROOT y)"]
        + [premise, hypothesis, gold, gold, gold, gold, gold, gold]
    )


def test_load_mnli_tsv(tmp_path):
    path = tmp_path / "dev_matched.tsv"
    rows = [
        _mnli_row(0, "The cat sat.", "An animal sat.", "entailment"),
        _mnli_row(1, 'He said "no".', "He agreed.", "contradiction"),
        _mnli_row(2, "It rained.", "The game was cancelled.", "neutral"),
        _mnli_row(3, "Ambiguous premise.", "Unclear hypothesis.", "-"),
    ]
    path.write_text("\n".join([_MNLI_HEADER, *rows]) + "\n", encoding="utf-8")
    examples = load_mnli_tsv(path)
    assert len(examples) == 3  # the "-" (no majority) row is skipped
    assert examples.premises == ["The cat sat.", 'He said "no".', "It rained."]
    assert examples.hypotheses[2] == "The game was cancelled."
    assert [MNLI_LABELS[i] for i in examples.labels] == ["entailment", "contradiction", "neutral"]
    # The pairs feed the same tokenizer as sentence pairs.
    batch = BertTokenizer(minilm_checkpoint_dir(), max_length=24)(
        examples.premises, examples.hypotheses
    )
    assert batch["input_ids"].shape == (3, 24) and batch["token_type_ids"].max() == 1


def test_load_mnli_tsv_rejects_bad_files(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_mnli_tsv(tmp_path / "missing.tsv")
    no_label = tmp_path / "nolabel.tsv"
    no_label.write_text("index\tsentence1\tsentence2\n0\ta\tb\n")
    with pytest.raises(ValueError, match="gold_label"):
        load_mnli_tsv(no_label)
    bad_label = tmp_path / "bad.tsv"
    bad_label.write_text(_MNLI_HEADER + "\n" + _mnli_row(0, "a", "b", "maybe") + "\n")
    with pytest.raises(ValueError, match=r"bad.tsv:2: unknown label 'maybe'"):
        load_mnli_tsv(bad_label)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))
