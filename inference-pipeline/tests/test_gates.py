"""Every gate fails on a deliberately broken model, and the thresholds live in one place."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from inference_pipeline.gates import (
    GATES,
    INT8_GATES,
    Evaluation,
    GateCheck,
    GateSet,
    GateThresholds,
    apply_gates,
)
from inference_pipeline_harness import scenarios


@pytest.fixture(scope="session")
def art():
    return scenarios.quick_artifacts()


def test_thresholds_are_declared_once_and_frozen():
    assert GATES == GateThresholds()
    assert GATES.fp32_max_abs_logit_diff == 1e-4
    assert GATES.fp32_alone_vs_batch_max_abs_diff == 1e-4
    assert GATES.reduced_min_embedding_cosine == 0.98
    assert GATES.reduced_min_argmax_agreement == 0.99
    assert GATES.reduced_max_accuracy_drop_points == 0.5
    assert GATES.max_non_finite_values == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        GATES.fp32_max_abs_logit_diff = 1.0


def _failed(report) -> dict[str, float]:
    return {r.name: r.value for r in report.failed}


def test_zeroed_weight_fails_the_logit_gate(art):
    path = scenarios.zero_weight(art.exports["torchscript"], art.folder / "zeroed.onnx")
    failed = _failed(scenarios.gate_onnx(path))
    assert failed["max_abs_logit_diff_vs_torch"] > 1e-4


def test_model_ignoring_the_attention_mask_fails_the_padding_gate(art):
    path = scenarios.ignore_attention_mask(art.exports["dynamo"], art.folder / "nomask.onnx")
    report = scenarios.gate_onnx(path)
    failed = _failed(report)
    assert failed["alone_vs_batch_max_abs_diff"] > 1e-4
    assert failed["max_abs_logit_diff_vs_torch"] > 1e-4
    # and as a reduced-precision variant it fails the alone-vs-batch cosine gate too
    reduced = _failed(scenarios.gate_onnx(path, "int8_dynamic"))
    assert reduced["alone_vs_batch_min_cosine"] < GATES.reduced_alone_vs_batch_min_cosine


def test_nan_producing_model_fails_the_finite_gate(art):
    path = scenarios.produce_nan(art.exports["torchscript"], art.folder / "nan.onnx")
    report = scenarios.gate_onnx(path)
    failed = _failed(report)
    assert failed["non_finite_values"] > 0
    assert not report.passed
    assert "non_finite_values = " in report.failed[0].describe()


def _evaluation(logits: np.ndarray, embedding: np.ndarray) -> Evaluation:
    return Evaluation((logits, embedding), (logits[:1], embedding[:1]))


def test_reduced_precision_gates_compute_agreement_drop_and_cosine():
    rng = np.random.default_rng(0)
    labels = [0, 1, 2, 3]
    ref_logits = np.eye(4, 5, dtype=np.float32) * 5
    embedding = rng.normal(size=(4, 384)).astype(np.float32)
    gate_set = GateSet(texts=["a", "b", "c", "d"], labels=labels, alone=[0])
    reference = _evaluation(ref_logits, embedding)
    flipped = ref_logits.copy()
    flipped[3] = np.eye(5, dtype=np.float32)[0] * 5  # one of four texts changes class
    rotated = embedding.copy()
    rotated[2] = -embedding[2]  # one embedding points the other way: cosine -1
    report = apply_gates("x", INT8_GATES, _evaluation(flipped, rotated), reference, gate_set)
    values = {r.name: r.value for r in report.results}
    assert values["argmax_agreement_vs_fp32"] == 0.75
    assert values["accuracy_drop_points"] == pytest.approx(25.0)
    assert values["min_embedding_cosine_vs_fp32"] == pytest.approx(-1.0, abs=1e-6)
    assert {r.name for r in report.failed} == {
        "argmax_agreement_vs_fp32",
        "accuracy_drop_points",
        "min_embedding_cosine_vs_fp32",
    }
    same = apply_gates("y", INT8_GATES, reference, reference, gate_set)
    assert same.passed
    with pytest.raises(ValueError, match="unknown gate measure"):
        apply_gates("z", (GateCheck("int4_magic", 1.0, "<="),), reference, reference, gate_set)
