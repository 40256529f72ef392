"""Every TFLite mode of the modes table, its gate, and the quantization debugger finding a planted
outlier layer."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from graph_inspector import cli  # noqa: E402
from graph_inspector.errors import ConversionError  # noqa: E402
from graph_inspector.quant_debug import deny_list  # noqa: E402
from graph_inspector.quant_modes import MODES  # noqa: E402
from graph_inspector.savedmodel import load_serving_fn, signature_param_bytes  # noqa: E402
from graph_inspector.tflite import (  # noqa: E402
    convert_savedmodel_to_tflite,
    representative_from,
    validate_tflite,
)
from graph_inspector_harness.quant_scenarios import (  # noqa: E402
    compare_modes,
    convert_modes,
    make_outlier_model,
)


@pytest.fixture(scope="module")
def outlier(tmp_path_factory):
    return make_outlier_model(tmp_path_factory.mktemp("quant") / "outlier")


@pytest.fixture(scope="module")
def outlier_conversions(outlier):
    # every mode converted once for this file (each conversion costs seconds)
    return convert_modes(outlier)


def _gate(model, content, mode):
    reference = load_serving_fn(model.folder)
    return validate_tflite(
        content,
        reference,
        {"x": model.inputs[:200]},
        quantization=mode,
        param_bytes=signature_param_bytes(reference.signature),
    )


def test_every_mode_passes_the_gate_on_a_model_without_outliers(tmp_path):
    plain = make_outlier_model(tmp_path / "plain", gain=1.0)
    calibration = representative_from({"x": plain.inputs[:100]})
    for mode in MODES:
        content = convert_savedmodel_to_tflite(plain.folder, mode, representative=calibration)
        report = _gate(plain, content, mode)
        assert report.ok and report.argmax_agreement >= 0.9, (mode, report)
    with pytest.raises(ValueError, match="representative"):
        convert_savedmodel_to_tflite(plain.folder, "int8")


def test_outlier_breaks_int8_the_debugger_finds_the_layer_and_float_fixes_it(
    outlier, outlier_conversions
):
    int8 = outlier_conversions.contents["int8"]
    # 1. full integer gives garbage, and the gate refuses it
    with pytest.raises(ConversionError, match="logits: disagrees with TensorFlow"):
        _gate(outlier, int8, "int8")
    # 2. the debugger ranks the planted layer first, far ahead of the rest
    layers = outlier_conversions.layers
    assert layers[0].tensor.startswith(outlier.planted), [layer.tensor for layer in layers]
    assert layers[0].mean_squared_error > 10 * layers[1].mean_squared_error
    # 3. one change: that layer and its reader in float; the rest stays int8
    deny = deny_list(int8, layers)
    assert [name.split(";")[0] for name in deny] == ["planted", "reader"]
    assert deny == outlier_conversions.deny  # convert_modes ran selective_int8 with this list
    fixed = _gate(outlier, outlier_conversions.contents[outlier_conversions.fixed_mode], "int8")
    assert fixed.ok and fixed.argmax_agreement >= 0.97
    # 4. int16 activations survive the outlier without a deny list
    assert _gate(outlier, outlier_conversions.contents["int16x8"], "int16x8").ok


def test_modes_side_by_side_on_the_outlier_model(outlier, outlier_conversions):
    results = {r.mode: r for r in compare_modes(outlier, 5, outlier_conversions)}
    assert set(MODES) < set(results)
    assert results["float32"].gate == results["float16"].gate == "pass"
    assert results["int8"].gate != "pass" and results["int8"].agreement < 0.5
    assert results["dynamic_range"].gate != "pass"  # activations quantized per call: same outlier
    assert results["int16x8"].gate == "pass"
    fixed = results[outlier_conversions.fixed_mode]
    assert fixed.mode.startswith("int8, ")
    assert fixed.gate == "pass" and fixed.agreement >= 0.97
    assert results["int8"].size_bytes < 0.5 * results["float32"].size_bytes


def test_quant_debug_command_ranks_the_planted_layer_first(outlier, capsys):
    assert cli.main(["quant-debug", str(outlier.folder), "--samples", "50"]) == 0
    out = capsys.readouterr().out
    rows = [line.split()[0] for line in out.splitlines() if "FULLY_CONNECTED" in line]
    assert rows and rows[0].startswith("planted"), out
    int8_error = float(out.split("int8: relative error vs TensorFlow ")[1].split()[0])
    fixed_error = float(out.split("in float: relative error vs TensorFlow ")[1].split()[0])
    assert int8_error > 0.5 and fixed_error < 0.05
