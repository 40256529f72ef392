"""The GPT's ONNX export with an explicit KV cache: symbolic shapes, cache-vs-no-cache greedy
equality through ONNX Runtime, the torch.export reference, and the INT8 gates' logic."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from inference_pipeline.generation.export import (
    ExportedFiles,
    example_inputs,
    export_all,
    onnx_dims,
)
from inference_pipeline.generation.gates import (
    cache_equality_gate,
    eval_prompts,
    int8_gates,
)
from inference_pipeline.generation.model import GPT, TINY_CONFIG, greedy_no_cache
from inference_pipeline.generation.runtime import OrtStep, TorchStep, greedy_with_cache
from inference_pipeline_harness.serving_fixtures import one_torch_thread


@pytest.fixture(autouse=True)
def one_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[GPT, ExportedFiles]:
    torch.manual_seed(0)
    model = GPT(TINY_CONFIG).eval()
    with torch.no_grad():  # large weights: clear argmax winners, so equality tests the cache
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.3)
    return model, export_all(model, tmp_path_factory.mktemp("gpt"))


def test_graph_has_symbolic_batch_new_and_past_lengths(exported) -> None:
    _, files = exported
    dims = onnx_dims(files.onnx_fp32)
    assert dims["tokens"] == ["batch", "new_tokens"]
    assert dims["attention_mask"] == ["batch", "past_length + new_tokens"]
    assert dims["past_key_0"] == ["batch", TINY_CONFIG.n_head, "past_length", TINY_CONFIG.head_dim]
    assert dims["logits"] == ["batch", "new_tokens", 256]
    assert dims["new_value_1"] == ["batch", TINY_CONFIG.n_head, "new_tokens", TINY_CONFIG.head_dim]


def test_ort_greedy_with_cache_equals_torch_without_cache(exported) -> None:
    model, files = exported
    text = np.frombuffer(b"The quick brown fox jumps over the lazy dog. " * 8, dtype=np.uint8)
    prompts = eval_prompts(text, count=6, max_len=90)
    assert sorted(map(len, prompts))[0] == 1 and max(map(len, prompts)) == 90
    result = cache_equality_gate(
        model, OrtStep(files.onnx_fp32, TINY_CONFIG, threads=1), prompts, 24
    )
    assert result.passed, result.detail


def test_one_graph_serves_prefill_and_batched_decode(exported) -> None:
    model, files = exported
    step = OrtStep(files.onnx_fp32, TINY_CONFIG, threads=1)
    for batch, new, past in ((1, 17, 0), (3, 1, 9), (2, 4, 6)):
        inputs = example_inputs(TINY_CONFIG, batch, new, past)
        expected = model(*inputs)
        logits, new_kv = step(*(t.numpy() for t in inputs[:3]), [t.numpy() for t in inputs[3:]])
        np.testing.assert_allclose(logits, expected[0].detach().numpy(), atol=1e-4)
        assert new_kv[-1].shape == (batch, TINY_CONFIG.n_head, new, TINY_CONFIG.head_dim)
        np.testing.assert_allclose(new_kv[-1], expected[-1].detach().numpy(), atol=1e-4)


def test_torch_export_reference_matches_eager(exported) -> None:
    model, files = exported
    program = torch.export.load(str(files.program)).module()
    inputs = example_inputs(TINY_CONFIG, batch=2, new=1, past=11)
    for got, want in zip(program(*inputs), model(*inputs), strict=True):
        torch.testing.assert_close(got, want)

    # greedy decoding through the reference with its cache equals the no-cache oracle too
    class ProgramStep(TorchStep):
        def __init__(self) -> None:
            self.model, self.config = program, TINY_CONFIG

    assert greedy_with_cache(ProgramStep(), b"Reference", 12) == greedy_no_cache(
        model, b"Reference", 12
    )


def test_int8_graph_is_quantized_and_the_gates_separate_good_from_bad(exported) -> None:
    _, files = exported
    ops = {node.op_type for node in onnx.load(str(files.onnx_int8)).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} & ops
    assert files.onnx_int8.stat().st_size < files.onnx_fp32.stat().st_size
    text = np.frombuffer(
        b"Shares in the firm rose after it said profits would beat forecasts. " * 6, np.uint8
    )
    fp32 = OrtStep(files.onnx_fp32, TINY_CONFIG, threads=1)
    agreement, ppl, figures = int8_gates(fp32, fp32, text, windows=4, width=64)
    assert agreement.passed and ppl.passed and figures["ppl_increase"] == 0.0

    class Noisy:  # a "quantized" model that is badly wrong must fail both gates
        config = TINY_CONFIG

        def __call__(self, *args):
            logits, new_kv = fp32(*args)
            noise = np.random.default_rng(0).normal(0, 5, logits.shape).astype(np.float32)
            return logits + noise, new_kv

    agreement, ppl, _ = int8_gates(fp32, Noisy(), text, windows=4, width=64)
    assert not agreement.passed and not ppl.passed


def test_int8_model_runs_with_the_cache(exported) -> None:
    model, files = exported
    int8 = OrtStep(files.onnx_int8, TINY_CONFIG, threads=1)
    tokens = greedy_with_cache(int8, b"Quantized", 10)
    assert len(tokens) == 10 and all(0 <= t < 256 for t in tokens)


def test_greedy_refuses_sequences_longer_than_the_context(exported, tmp_path: Path) -> None:
    model, _ = exported
    with pytest.raises(ValueError, match="positions"):
        greedy_no_cache(model, b"x" * 120, 20)
    with pytest.raises(ValueError, match="positions"):
        greedy_with_cache(TorchStep(model), b"", 5)
