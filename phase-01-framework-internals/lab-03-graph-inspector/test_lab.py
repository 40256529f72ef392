"""Lab 03 acceptance checks (the spec's "How to Test"): retracing counts match the expected and
TensorFlow's, the FuncGraph node count is deterministic across processes, the cost annotation
matches a hand count, SavedModel round trip, TFLite float32 within 1e-4 of TF on 100 samples,
and dynamic-range accuracy within 0.5 pp of float32.

Run: ``pytest test_lab.py`` in this folder (the BERT-tiny pipeline runs once per session, in
``conftest.py``'s ``demo`` fixture, on the quick model from the cache when this code already
trained it; the other tests live in ``tests/``).
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from graph_inspector.bert import (  # noqa: E402
    BertConfig,
)
from graph_inspector.cost_rules import category  # noqa: E402
from graph_inspector.inspect_graph import trace_and_inspect  # noqa: E402
from graph_inspector.pipeline import keras_predict  # noqa: E402
from graph_inspector.tflite import TFLiteModel  # noqa: E402
from graph_inspector_harness import scenarios as retrace_scenarios  # noqa: E402

TFLITE_FP32_TOL = 1e-4  # TFLite float32 vs TensorFlow, logits (the spec)
MAX_ACCURACY_DELTA_PP = 0.5  # dynamic-range vs float32, percentage points (the spec)


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


def test_graph_json_identical_in_two_processes():
    """A fresh process and this one (another process, with its own hash seed) draw the same
    graph. The JSON is meant to depend on nothing but the code and the inputs (node names are
    local to the FuncGraph, captures are renamed ``capture_<i>``), so this process's fingerprint,
    taken after whatever else ran here, must equal a fresh one's: a difference fails the test."""
    from graph_inspector_harness.fingerprint import (
        collect_fingerprints,
        fingerprint,
        start_fingerprints,
    )

    procs = start_fingerprints("mlp", processes=1)  # started first: it runs beside this one
    here = fingerprint("mlp")
    (fresh,) = collect_fingerprints(procs)
    assert here["node_count"] == fresh["node_count"] > 0
    assert here["sha256"] == fresh["sha256"]
    assert here["hash_probe"] != fresh["hash_probe"]  # two hash seeds, not one


def test_bert_tiny_graph_matmul_flops_match_analytic_count():
    from graph_inspector_harness.fingerprint import bert_report
    from graph_inspector_harness.report_section import bert_analytic_matmul_flops

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


def test_demo_reports_measured_table_and_passing_checks(demo):
    failed = [f"{c.name}: {c.measured}" for c in demo.checks if not c.passed]
    assert not failed, failed
    (table,) = demo.tables
    assert len(table.rows) == 3 and not table.has_nan()
    assert all(image.path.is_file() for image in demo.images)
    assert all(ms > 0 for ms in demo.latency_ms.values())


def test_demo_model_is_the_cached_one_and_says_so(demo):
    """Trained in this session or loaded, the run's model is the cached weights, and the
    report says which; the retrace check covers the stages this run actually traced."""
    from graph_inspector.bert import BertForSequenceClassification
    from graph_inspector_harness.bert_training import WEIGHTS

    trained = demo.trained
    fresh = BertForSequenceClassification(demo.model.config, num_labels=len(demo.label_names))
    fresh.load_weights(trained.folder / WEIGHTS)
    np.testing.assert_array_equal(keras_predict(fresh, demo.dev_inputs), demo.dev_logits["tf"])
    (learned,) = [c for c in demo.checks if "learned the task" in c.name]
    assert trained.provenance() in learned.detail
    (retrace,) = [c for c in demo.checks if c.name.startswith("retrace monitor")]
    stages = "loading (training came from the cache)" if trained.from_cache else "training"
    assert retrace.measured.endswith(f"in {stages}, export and reload")
    assert int(retrace.measured.split()[0]) > 0  # it watched real traces


if __name__ == "__main__":
    # The acceptance checks; `pytest .` in this folder runs them and tests/ too.
    raise SystemExit(pytest.main([__file__, "-v"]))
