"""Fusions per export route: which tool fuses what (the quick build's fusions, on the exports
the other tests read), and the fused graphs keep parity."""

from __future__ import annotations

import dataclasses

import pytest
from inference_pipeline import optimize
from inference_pipeline.quantize import RECIPES
from inference_pipeline_harness.scenarios import gate_onnx, quick_artifacts, quick_graph

LAYERS = 6


@pytest.fixture(scope="session")
def fusions(quick_build) -> dict[tuple[str, str], optimize.FusionReport]:
    """The quick build's fusion reports by (route, tool): each route's fusion by its tool (its
    fused graph beside it, from the repository) and ONNX Runtime's optimizer's view of the
    dynamo export. The build ran ``optimize`` on the same exports the other tests read."""
    graphs = {row.route: row.name for row in RECIPES if row.method == "fuse"}
    reports = {}
    for report in quick_build.fusions:
        if report.tool == optimize.FUSION_TOOL_FOR_ROUTE[report.route]:
            report = dataclasses.replace(report, path=quick_graph(graphs[report.route]))
        reports[report.route, report.tool] = report
    return reports


@pytest.fixture(scope="session")
def fused(fusions) -> dict[str, optimize.FusionReport]:
    return {route: fusions[route, tool] for route, tool in optimize.FUSION_TOOL_FOR_ROUTE.items()}


def test_ort_optimizer_fuses_the_torchscript_export_fully(fused):
    report = fused["torchscript"]
    assert report.tool == optimize.ORT_TRANSFORMER_OPTIMIZER
    assert report.count("Attention") == LAYERS
    assert report.count("EmbedLayerNormalization") == 1
    assert report.count("SkipLayerNormalization") == 2 * LAYERS
    assert report.count("BiasGelu") == LAYERS


def test_ort_optimizer_misses_attention_in_the_dynamo_export(fusions):
    # The trap: the same model, exported by dynamo, gets no Attention fusion from ONNX
    # Runtime's optimizer (its patterns follow the TorchScript exporter's graph) ...
    report = fusions["dynamo", optimize.ORT_TRANSFORMER_OPTIMIZER]
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
