"""INT8 dynamic / static QDQ and FP16: what the graphs hold and how close they stay."""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx
import pytest
from inference_pipeline import quantize
from inference_pipeline.export import check_io_contract
from inference_pipeline_harness.scenarios import gate_onnx, quick_artifacts, quick_graph


@pytest.fixture(scope="session")
def art():
    return quick_artifacts()


def _ops(path) -> Counter:
    return Counter(node.op_type for node in onnx.load(str(path)).graph.node)


def _values(report) -> dict[str, float]:
    return {r.name: r.value for r in report.results}


@pytest.fixture(scope="session")
def dynamic(art):
    """Per-channel: the quick build's int8_dynamic graph (that row is per-channel, nothing kept
    FP32); per-tensor, its fallback, quantized here from the same export."""
    assert quantize.recipe("int8_dynamic").per_channel
    assert quantize.recipe("int8_dynamic").keep_fp32 is None
    per_tensor = quantize.quantize_int8_dynamic(
        art.exports["torchscript"], art.folder / "dyn_per_tensor.onnx", per_channel=False
    )
    return {True: quick_graph("int8_dynamic"), False: per_tensor}


def test_dynamic_int8_quantizes_every_weight_matmul(art, dynamic):
    model = onnx.load(str(art.exports["torchscript"]))
    weights = {i.name for i in model.graph.initializer}
    weight_matmuls = sum(
        1 for n in model.graph.node if n.op_type == "MatMul" and any(x in weights for x in n.input)
    )
    ops = _ops(dynamic[True])
    assert ops["MatMulInteger"] >= weight_matmuls == 36  # 6 per layer x 6 layers
    # Those weights shrink 4x; the word-embedding table (a Gather, not a MatMul) stays FP32.
    weight_bytes = sum(
        4 * int(np.prod(i.dims))
        for i in model.graph.initializer
        if len(i.dims) == 2 and i.dims[0] in (384, 1536) and i.dims[1] in (384, 1536)
    )
    saved = art.exports["torchscript"].stat().st_size - dynamic[True].stat().st_size
    assert saved >= 0.7 * weight_bytes > 0


def test_per_channel_keeps_the_embedding_closer_than_per_tensor(dynamic):
    per_channel, per_tensor = (
        _values(gate_onnx(dynamic[k], "int8_dynamic")) for k in (True, False)
    )
    assert per_channel["non_finite_values"] == 0
    assert per_channel["min_embedding_cosine_vs_fp32"] >= 0.98  # the INT8 gate's limit
    assert per_channel["min_embedding_cosine_vs_fp32"] > per_tensor["min_embedding_cosine_vs_fp32"]
    assert per_channel["alone_vs_batch_min_cosine"] >= 0.98


def test_static_qdq_is_calibrated_on_training_texts(art):
    from phase01_common.bbc_news import load_bbc_news

    texts = load_bbc_news().train_texts[:4]
    reader = quantize.TextCalibrationReader(art.tokenizer, texts, batch_size=2)
    batches = [reader.get_next() for _ in range(3)]
    assert batches[2] is None and batches[0]["input_ids"].shape[0] == 2
    # the quick build's graph of the row, calibrated through that reader on training texts
    path = quick_graph("int8_static")
    # Every weight MatMul reads dequantized INT8 inputs, except the 6 feed-forward output
    # projections, which stay FP32 (their GELU-output range ruins a MinMax scale).
    model = onnx.load(str(path))
    weights = {i.name for i in model.graph.initializer}
    dequantized_weights = {
        node.output[0]
        for node in model.graph.node
        if node.op_type == "DequantizeLinear" and node.input[0] in weights
    }
    matmuls = [n for n in model.graph.node if n.op_type == "MatMul"]
    quantized = [n.name for n in matmuls if n.input[1] in dequantized_weights]
    kept = quantize.ffn_output_matmuls(art.exports["torchscript"])
    assert len(kept) == 6 and not set(kept) & set(quantized)
    assert len(quantized) == 36 - 6
    values = _values(gate_onnx(path, "int8_static"))
    assert values["non_finite_values"] == 0 and values["min_embedding_cosine_vs_fp32"] > 0.5
    with pytest.raises(ValueError, match="calibration text"):
        quantize.quantize_int8_static(path, art.folder / "x.onnx", art.tokenizer, [])


def test_fp16_keeps_fp32_io_and_passes_its_gates(art):
    path = quantize.convert_fp16(art.exports["torchscript"], art.folder / "fp16.onnx")
    model = onnx.load(str(path))
    check_io_contract(model, str(path))
    types = Counter(i.data_type for i in model.graph.initializer if len(i.dims) == 2)
    assert types[onnx.TensorProto.FLOAT16] > 0 and types[onnx.TensorProto.FLOAT] == 0
    report = gate_onnx(path, "fp16")
    assert report.passed, [r.describe() for r in report.failed]


def test_recipe_table_is_consistent():
    from inference_pipeline.export import ROUTES
    from inference_pipeline.gates import MEASURES
    from inference_pipeline.serving.backends import backend_spec

    seen: set[str] = set()
    for row in quantize.RECIPES:
        assert row.route in ROUTES
        assert row.method in ("export", "fuse", "reuse") or row.method in quantize.METHODS
        assert backend_spec(row.runtime).platform  # a registered backend
        assert row.needs in (None, "bf16")
        assert (row.source is None) == (row.method == "export")
        assert row.source is None or row.source in seen, f"{row.name}: source listed later"
        assert row.keep_fp32 is None or row.keep_fp32 in quantize.KEEP_FP32
        assert row.calibration is None or row.calibration in quantize.CALIBRATIONS
        assert (row.calibration is not None) == (row.method == "int8_static")
        assert row.gates and all(check.measure in MEASURES for check in row.gates)
        seen.add(row.name)
    fallbacks = {row.fallback for row in quantize.RECIPES if row.fallback}
    assert fallbacks <= seen
    assert {row.name for row in quantize.primary_recipes()} == seen - fallbacks
    # a fallback builds into the folder of the recipe it replaces
    replaced = quantize.recipe("int8_dynamic")
    assert quantize.recipe(replaced.fallback).variant_suffix == replaced.variant_suffix
    with pytest.raises(KeyError, match="no recipe"):
        quantize.recipe("int4")


def test_bench_colours_follow_the_table_and_accept_a_new_precision():
    from inference_pipeline_harness.bench import precision_colour

    colours = [precision_colour(p) for p in ("torch", *quantize.precision_order())]
    assert len(set(colours)) == len(colours)
    assert precision_colour("int4") not in colours  # not in the table: the next colour


def test_a_new_recipe_is_one_table_row(art, monkeypatch):
    from inference_pipeline.gates import INT8_GATES

    row = quantize.Recipe(
        "int8_dynamic_ffn_fp32", "int8", "torchscript", "int8_dynamic", "fp32", INT8_GATES,
        "dynamic, per-channel, FFN output FP32", per_channel=True, keep_fp32="ffn_output_matmuls",
    )  # fmt: skip
    monkeypatch.setattr(quantize, "RECIPES", (*quantize.RECIPES, row))
    assert quantize.recipe(row.name) is row and row in quantize.primary_recipes()
    path = quantize.METHODS[row.method](
        row, art.exports["torchscript"], art.folder / f"{row.name}.onnx", art.tokenizer, []
    )
    kept = set(quantize.ffn_output_matmuls(art.exports["torchscript"]))
    graph = onnx.load(str(path)).graph
    assert len(kept) == 6 and kept <= {n.name for n in graph.node if n.op_type == "MatMul"}
    assert _ops(path)["MatMulInteger"] >= 36 - 6  # the other weight MatMuls are INT8
    report = gate_onnx(path, row.name)  # the row's gates, found by its name
    assert [r.name for r in report.results] == [c.measure for c in INT8_GATES]


def test_a_subset_of_recipes_brings_the_rows_it_is_made_from():
    from inference_pipeline.quantize import primary_recipes

    names = [row.name for row in primary_recipes(["ov_int8_nncf_static", "fp16"])]
    # each row after the rows it is made from, in table order
    assert names == ["fp32", "fp32_fused", "fp16", "ov_int8_nncf", "ov_int8_nncf_static"]
    assert [row.name for row in primary_recipes()] == [row.name for row in primary_recipes(None)]
    with pytest.raises(KeyError, match="no recipe 'int3'"):
        primary_recipes(["int3"])
