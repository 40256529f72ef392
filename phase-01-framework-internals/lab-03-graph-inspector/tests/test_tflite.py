"""TFLite conversion and the validator that refuses broken models."""

from __future__ import annotations

import os
import re

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402
from graph_inspector.pipeline import keras_predict  # noqa: E402
from graph_inspector.tflite import (  # noqa: E402
    ConversionError,
    convert_savedmodel,  # noqa: E402
    validate_tflite,
)
from graph_inspector_harness.pipeline_steps import export_untracked_module  # noqa: E402


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
    # ...but its TFLite conversion "succeeds" into a broken model, which must be refused. The
    # session's demo converted this same export (pipeline_steps.trap_is_caught): its message is
    # read here rather than converting BERT-tiny a second time. That a refused model leaves no
    # file behind is test_validator_checks_every_output_by_name's check.
    message = dict(demo.texts)["TFLite validation of the broken export"]
    assert re.search("failed validation.*(NaN|disagrees|too small)", message), message
    (trap_check,) = [c for c in demo.checks if c.name.startswith("validator rejects the broken")]
    assert trap_check.passed


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
    with pytest.raises(ConversionError, match="no such file or directory"):
        convert_savedmodel(tmp_path / "nope", tmp_path / "out")
    with pytest.raises(ConversionError, match="not a SavedModel"):
        convert_savedmodel(tmp_path, tmp_path / "out")


def test_each_mode_sets_up_the_converter_from_its_row():
    from types import SimpleNamespace

    from graph_inspector.quant_modes import DEFAULT_QUANTIZATIONS, MODES

    def converter():
        return SimpleNamespace(target_spec=SimpleNamespace())

    assert DEFAULT_QUANTIZATIONS == ("float32", "dynamic_range")
    plain = converter()
    MODES["float32"].configure(plain, None)
    assert not hasattr(plain, "optimizations") and vars(plain.target_spec) == {}
    dynamic = converter()
    MODES["dynamic_range"].configure(dynamic, None)
    assert dynamic.optimizations == [tf.lite.Optimize.DEFAULT]
    assert vars(dynamic.target_spec) == {}  # Optimize.DEFAULT alone: dynamic range
    half = converter()
    MODES["float16"].configure(half, None)
    assert half.target_spec.supported_types == [tf.float16]
    data = lambda: iter(())  # noqa: E731 - a representative dataset
    for name, kernels in (
        ("int8", tf.lite.OpsSet.TFLITE_BUILTINS_INT8),
        ("int16x8", tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8),
    ):
        full = converter()
        MODES[name].configure(full, data)
        assert full.representative_dataset is data
        assert full.target_spec.supported_ops == [kernels, tf.lite.OpsSet.TFLITE_BUILTINS]
        with pytest.raises(ValueError, match="needs a representative dataset"):
            MODES[name].configure(converter(), None)
    # the gate tightens where the precision is higher
    assert MODES["float32"].max_rel_error < MODES["float16"].max_rel_error
    assert MODES["float16"].max_rel_error < MODES["dynamic_range"].max_rel_error
    assert MODES["float32"].min_size_fraction > MODES["float16"].min_size_fraction
