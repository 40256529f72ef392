"""The retrace monitor: causes, explanations, wrapping, the call context, edge cases."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from graph_inspector.retrace import RetraceMonitor, explain_retracing  # noqa: E402
from graph_inspector_harness import scenarios as retrace_scenarios  # noqa: E402


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
    # A trace made before monitoring counts: the first monitored trace is a retrace, not a
    # "first call".
    result = retrace_scenarios.traced_before_monitoring()
    text = result.log.report()
    assert "first call" not in text, text
    assert len(result.log.retraces) == 1 and result.log.records[0].retraced
    assert "x: now float32[2], before float32[1] (a trace made before monitoring began)" in text


def test_retrace_monitor_stores_the_generalized_trace_of_reduce_retracing():
    # The monitor stores the generalized trace (x: [None,3]), so a later Python-value retrace
    # blames the flag alone, not x as well.
    result = retrace_scenarios.python_value_under_reduce_retracing()
    traced = [r for r in result.log.records if r.new_traces]
    assert [(c.arg, c.kind) for c in traced[-1].causes] == [("flag", "python value")]
    shape_fix = traced[1].causes[0].fix
    assert "reduce_retracing is on" in shape_fix and "use tf.function(" not in shape_fix


def test_saving_retrace_is_explained_by_the_call_context(tmp_path):
    # Keras's ExportArchive (tf.saved_model.save) traces a model's tf.function call again with
    # the same arguments: TF keys traces by the call context too, and saving runs the call
    # inside its save context. The monitor names that cause rather than "unexplained".
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
    # explain_retracing(Model.step) watches every instance's bound copy, and a second instance
    # is named as such (not "a new tf.function object" with the advice to hoist it).
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
    # A list replaced by a tuple has the same leaf paths: the container type is the cause.
    result = retrace_scenarios.container_type_changed()
    text = result.log.report()
    assert "batch['b']: now tuple, before list" in text and "unexplained" not in text


def test_composite_tensor_arguments_are_keyed_by_type_spec():
    # RaggedTensor and SparseTensor are keyed by their TypeSpec, as TF does: neither
    # "unhashable" nor "object identity".
    from graph_inspector.retrace import describe

    result = retrace_scenarios.composite_tensors()
    text = result.log.report()
    assert "s: now SparseTensor float32[4,3], before SparseTensor float32[2,3] [shape]" in text
    assert "unhashable" not in text and "object identity" not in text
    a = describe(tf.ragged.constant([[1.0, 2.0], [3.0]]))
    b = describe(tf.ragged.constant([[1.0], [3.0, 4.0, 5.0]]))
    assert a.key == b.key and a.kind == "composite"


def test_keras_variable_argument_is_keyed_like_a_tensor():
    # TF keys a keras.Variable by a TensorSpec (not by hash), so a tensor of the same shape
    # reuses its trace.
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
    # A frozen dataclass is hashed by value: a change of value is "object value", not identity.
    result = retrace_scenarios.object_value()
    assert result.found("config", "object value")
    assert "object identity" not in result.log.report()


def test_numpy_arguments_are_described_like_tensors():
    from graph_inspector.retrace import describe

    assert describe(np.zeros([2, 3], np.float32)).text == "float32[2,3]"
    assert describe(tf.zeros([2], tf.int32)).key == describe(np.zeros([2], np.int32)).key


# --- every suggested fix works, eager calls, TF's own warning ------------------------------------


def _fix_scenarios():
    from graph_inspector_harness.scenarios import fix_scenarios

    return fix_scenarios()


def test_every_actionable_fix_in_the_cause_table_has_a_scenario():
    from graph_inspector.retrace_causes import CAUSES, RULES

    actionable = {
        (rule, f.key) for rule, kind in CAUSES.items() for f in kind.fixes if f.actionable
    }
    assert actionable, "the table lists no fix"
    assert actionable <= set(_fix_scenarios()), sorted(actionable - set(_fix_scenarios()))
    # The rules are data: every rule a predicate can pick has its entry in the table.
    assert {rule for _, rule in RULES} <= set(CAUSES)


@pytest.mark.parametrize("key", sorted(_fix_scenarios()), ids=lambda k: f"{k[0]}-{k[1]}")
def test_suggested_fix_removes_the_retrace_and_keeps_the_outputs(key):
    result = _fix_scenarios()[key]()
    assert result.suggested, f"monitor did not suggest {key}:\n{result.before.report()}"
    assert result.retrace_gone, (
        f"{result.before.traces} -> {result.after.traces} traces (expected "
        f"{result.expected_traces}):\n{result.after.report()}"
    )
    assert result.outputs_match, (result.outputs_before, result.outputs_after)


def test_variable_with_changing_shape_is_told_reduce_retracing_not_input_signature():
    # input_signature=[tf.TensorSpec([None], tf.float32)] would hand the function a tensor
    # ('SymbolicTensor' object has no attribute 'assign_add'): for a variable whose shape
    # changes, reduce_retracing is the fix.
    @tf.function
    def accumulate(v, x):
        v.assign_add(x)
        return v.read_value()

    monitor = RetraceMonitor(accumulate)
    for n in (2, 3):
        monitor(tf.Variable(tf.zeros([n])), tf.ones([n]))
    causes = monitor.records[1].causes
    assert {c.arg for c in causes} == {"v", "x"}
    for cause in causes:
        assert "reduce_retracing=True" in cause.fix and "input_signature=[" not in cause.fix
    broken = tf.function(accumulate.python_function, input_signature=[tf.TensorSpec([None])] * 2)
    with pytest.raises(AttributeError, match="assign_add"):  # what the old advice did
        broken(tf.Variable(tf.zeros([2])), tf.ones([2]))


def test_explain_retracing_of_a_plain_function_called_eagerly_does_not_warn(recwarn):
    def add_one(x):
        return x + 1

    with explain_retracing(add_one) as log:
        add_one(tf.ones([2]))  # eager: no tf.function, nothing traces
    assert not [w for w in recwarn if "never called" in str(w.message)]
    assert log.traces == 0 and "called 1 time(s) in the block, eagerly" in log.report()
    with pytest.warns(UserWarning, match="never called"):  # not called at all: still warned
        with explain_retracing(add_one):
            pass


def _double(x):
    return x * 2


def _trigger_tf_retracing_warning():
    for _ in range(7):  # fresh tf.function objects: TF warns "... triggered tf.function retracing"
        tf.function(_double)(tf.ones([2]))


def test_bench_drops_tensorflows_own_retracing_warning(caplog, monkeypatch):
    from graph_inspector_harness import bench

    with caplog.at_level("WARNING", logger="tensorflow"):
        _trigger_tf_retracing_warning()
    assert "triggered tf.function retracing" in caplog.text  # the warning the bench must drop
    caplog.clear()
    monkeypatch.setattr(bench, "_measure", lambda repeats: _trigger_tf_retracing_warning() or 0)
    with caplog.at_level("WARNING", logger="tensorflow"):
        assert bench.run_bench(repeats=1) == 0
    assert "triggered tf.function retracing" not in caplog.text
