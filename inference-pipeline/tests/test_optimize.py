"""Fusions per export route: which tool fuses what, and the fused graphs keep parity."""

from __future__ import annotations

import pytest
from inference_pipeline import optimize
from inference_pipeline_harness.scenarios import gate_onnx, quick_artifacts

LAYERS = 6


@pytest.fixture(scope="session")
def fused():
    art = quick_artifacts()
    return {
        route: optimize.fuse(path, art.folder / f"{route}_fused.onnx", route)
        for route, path in art.exports.items()
    }


def test_ort_optimizer_fuses_the_torchscript_export_fully(fused):
    report = fused["torchscript"]
    assert report.tool == optimize.ORT_TRANSFORMER_OPTIMIZER
    assert report.count("Attention") == LAYERS
    assert report.count("EmbedLayerNormalization") == 1
    assert report.count("SkipLayerNormalization") == 2 * LAYERS
    assert report.count("BiasGelu") == LAYERS


def test_ort_optimizer_misses_attention_in_the_dynamo_export():
    # The trap: the same model, exported by dynamo, gets no Attention fusion from ONNX
    # Runtime's optimizer (its patterns follow the TorchScript exporter's graph) ...
    art = quick_artifacts()
    report = optimize.fuse_with_ort_optimizer(art.exports["dynamo"], None, "dynamo")
    assert report.count("Attention") == 0 and report.count("MultiHeadAttention") == 0
    assert report.count("SkipLayerNormalization") == 2 * LAYERS


def test_onnxscript_rewriter_fuses_attention_in_the_dynamo_export(fused):
    # ... which onnxscript's ORT fusion rewriter does fuse.
    report = fused["dynamo"]
    assert report.tool == optimize.ONNXSCRIPT_REWRITER
    assert report.count("attention") == LAYERS
    assert report.count("skip_layer_normalization") == 2 * LAYERS


@pytest.mark.parametrize("route", ["torchscript", "dynamo"])
def test_fused_graph_keeps_fp32_parity(fused, route):
    report = gate_onnx(fused[route].path)
    assert report.passed, [r.describe() for r in report.failed]


def test_ort_own_graph_optimizations_fuse_at_load():
    art = quick_artifacts()
    plain = optimize.ort_graph_op_counts(art.exports["torchscript"], level="disabled")
    extended = optimize.ort_graph_op_counts(art.exports["torchscript"], level="extended")
    assert sum(extended.values()) < sum(plain.values())
    assert extended.get("BiasGelu", 0) == LAYERS and "Gelu" not in extended
