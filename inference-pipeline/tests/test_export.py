"""Export parity per route, torch.export as the reference, and the exporters' known traps."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest
import torch
from inference_pipeline import export
from inference_pipeline.model import torch_outputs
from inference_pipeline.quiet import quiet
from inference_pipeline_harness.scenarios import gate_onnx, quick_artifacts
from torch import nn


@pytest.fixture(scope="session")
def art():
    return quick_artifacts()


@pytest.mark.parametrize("route", export.ROUTES)
def test_route_matches_pytorch_on_padded_mixed_length_batches(art, route):
    report = gate_onnx(art.exports[route])
    values = {r.name: r.value for r in report.results}
    assert report.passed, [r.describe() for r in report.failed]
    assert values["max_abs_logit_diff_vs_torch"] <= 1e-4
    assert values["alone_vs_batch_max_abs_diff"] <= 1e-4
    lengths = [art.tokenizer.token_count(t) for t in art.gate_set.texts]
    assert min(lengths) <= 4 and max(lengths) == 256  # the gate set spans 4..256 tokens


@pytest.mark.parametrize("route", export.ROUTES)
def test_graph_has_dynamic_batch_and_sequence_axes(art, route):
    model = onnx.load(str(art.exports[route]))
    for value in model.graph.input:
        dims = value.type.tensor_type.shape.dim
        assert [d.HasField("dim_value") for d in dims] == [False, False], value.name
    session = ort.InferenceSession(str(art.exports[route]), providers=["CPUExecutionProvider"])
    for batch, length in ((1, 4), (3, 200)):
        feed = {n: np.ones((batch, length), np.int64) for n in export.INPUT_NAMES}
        logits, embedding = session.run(None, feed)
        assert logits.shape == (batch, 5) and embedding.shape == (batch, 384)


def test_exported_program_is_the_reference(art):
    classifier = art.trained.classifier("eager")
    program = export.export_program(classifier, export.example_inputs(art.tokenizer))
    batch = art.tokenizer.encode(art.gate_set.texts[:6])
    expected = torch_outputs(art.trained.classifier("sdpa"), batch)
    got = export.exported_program_outputs(program, batch)
    assert max(float(np.abs(a - b).max()) for a, b in zip(got, expected, strict=True)) <= 1e-4


class SkipsMaskWhenUnpadded(nn.Module):
    """What transformers' SDPA path used to do: drop the mask when nothing is padded, decided
    in Python. The tracer records only the branch its example input took."""

    def __init__(self, classifier: nn.Module) -> None:
        super().__init__()
        self.inner = classifier

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        encoder_mask = None if bool(attention_mask.all()) else attention_mask
        out = self.inner.bert(input_ids=input_ids, attention_mask=encoder_mask)
        weights = attention_mask.unsqueeze(-1).to(out.last_hidden_state.dtype)
        pooled = (out.last_hidden_state * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return self.inner.classifier(out.pooler_output), pooled


def test_torchscript_unpadded_example_bakes_in_no_padding_and_the_gate_catches_it(art):
    model = SkipsMaskWhenUnpadded(art.trained.classifier("eager")).eval()
    unpadded = export.example_inputs(art.tokenizer, ("one text alone, so nothing is padded",))
    assert bool(unpadded[1].all())
    broken = art.folder / "torchscript_unpadded_example.onnx"
    export.export_torchscript(model, unpadded, broken)
    report = gate_onnx(broken)
    failed = {r.name: r.value for r in report.failed}
    assert "max_abs_logit_diff_vs_torch" in failed and failed["max_abs_logit_diff_vs_torch"] > 1e-3
    assert "alone_vs_batch_max_abs_diff" in failed
    # The pipeline's padded example records the masked branch: same model, gates pass.
    fixed = art.folder / "torchscript_padded_example.onnx"
    export.export_torchscript(model, export.example_inputs(art.tokenizer), fixed)
    assert gate_onnx(fixed).passed


class TinyClassifier(nn.Module):
    """An embedding lookup (dynamo names its output 'embedding') and the contract's outputs."""

    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(50, 384)
        self.head = nn.Linear(384, 5)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor):
        weights = attention_mask.unsqueeze(-1).float()
        pooled = (self.table(input_ids) * weights).sum(1) / weights.sum(1).clamp(min=1.0)
        return self.head(pooled), pooled


def test_dynamo_output_names_collide_unless_renamed(tmp_path):
    torch.manual_seed(0)
    model = TinyClassifier().eval()
    example = (torch.randint(0, 50, (2, 6)), torch.tensor([[1] * 6, [1] * 3 + [0] * 3]))
    naive = tmp_path / "naive.onnx"
    with quiet("torch.onnx._internal.exporter._registration"):
        torch.onnx.export(
            model,
            example,
            str(naive),
            dynamo=True,
            input_names=list(export.INPUT_NAMES),
            output_names=list(export.OUTPUT_NAMES),
        )
    assert "embedding" in export.duplicate_definitions(onnx.load(str(naive)))
    with pytest.raises(Exception, match="Duplicate definition"):
        ort.InferenceSession(str(naive), providers=["CPUExecutionProvider"])
    fixed = tmp_path / "fixed.onnx"
    export.export_dynamo(model, example, fixed)
    proto = onnx.load(str(fixed))
    export.check_io_contract(proto, str(fixed))
    session = ort.InferenceSession(str(fixed), providers=["CPUExecutionProvider"])
    feed = dict(zip(export.INPUT_NAMES, (t.numpy() for t in example), strict=True))
    with torch.inference_mode():
        expected = [t.numpy() for t in model(*example)]
    for got, want in zip(session.run(list(export.OUTPUT_NAMES), feed), expected, strict=True):
        np.testing.assert_allclose(got, want, atol=1e-5)


def test_io_contract_violations_are_named(art, tmp_path):
    model = onnx.load(str(art.exports["torchscript"]))
    model.graph.output[1].name = "sentence_embedding"
    with pytest.raises(export.ExportError, match="outputs are"):
        export.check_io_contract(model, "edited.onnx")
    with pytest.raises(ValueError, match="unknown export route"):
        export.export_onnx(nn.Identity(), "tflite", (), tmp_path / "x.onnx")
