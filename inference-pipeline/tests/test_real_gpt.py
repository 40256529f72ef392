"""The quick-trained GPT's real graphs (conftest's ``quick_gpt``): the INT8 gates on its real
INT8 graph (not FP32 against itself), a drifted INT8 graph refused, and continuous batching
over the ONNX step equal to the greedy oracle (PyTorch, no cache)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from inference_pipeline.generation.engine import ContinuousBatchingEngine
from inference_pipeline.generation.gates import eval_prompts, int8_gates
from inference_pipeline.generation.model import greedy_no_cache
from inference_pipeline.generation.requests import GenerationRequest
from inference_pipeline.generation.runtime import OrtStep
from inference_pipeline.generation.train import corpus_bytes
from inference_pipeline_harness.scenarios import zero_weight
from inference_pipeline_harness.serving_fixtures import one_torch_thread


@pytest.fixture(autouse=True)
def one_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def held_out() -> np.ndarray:
    return corpus_bytes()[1]


def test_the_int8_gates_pass_on_the_real_int8_graph(quick_gpt, held_out) -> None:
    files, config = quick_gpt.files, quick_gpt.model.config
    ops = {node.op_type for node in onnx.load(str(files.onnx_int8)).graph.node}
    assert {"DynamicQuantizeLinear", "MatMulInteger"} & ops  # really quantized
    fp32 = OrtStep(files.onnx_fp32, config, threads=1)
    int8 = OrtStep(files.onnx_int8, config, threads=1)
    agreement, perplexity, figures = int8_gates(fp32, int8, held_out, windows=8, width=128)
    assert agreement.passed, agreement
    assert perplexity.passed, perplexity
    # two different graphs: the figures measure quantization error, not a model against itself
    assert figures["ppl_increase"] != 0.0
    # and the model learned something: far better than uniform over 256 bytes
    assert figures["ppl_fp32"] < 256 / 4


def test_a_drifted_int8_graph_fails_the_int8_gates(quick_gpt, held_out, tmp_path) -> None:
    files, config = quick_gpt.files, quick_gpt.model.config
    drifted = zero_weight(files.onnx_int8, tmp_path / "drifted.onnx", name_part="")
    fp32 = OrtStep(files.onnx_fp32, config, threads=1)
    bad = OrtStep(drifted, config, threads=1)
    agreement, perplexity, _ = int8_gates(fp32, bad, held_out, windows=8, width=128)
    assert not agreement.passed and not perplexity.passed


def test_continuous_batching_over_the_onnx_step_equals_the_greedy_oracle(
    quick_gpt, held_out
) -> None:
    model, config = quick_gpt.model, quick_gpt.model.config
    engine = ContinuousBatchingEngine(
        OrtStep(quick_gpt.files.onnx_fp32, config, threads=1),
        max_num_seqs=3,
        max_num_batched_tokens=16,
    )
    prompts = eval_prompts(held_out, count=6, max_len=70, seed=3)
    new_tokens = 12
    handles = [engine.submit(GenerationRequest(p, new_tokens)) for p in prompts]
    engine.run_until_idle()
    for prompt, handle in zip(prompts, handles, strict=True):
        assert handle.tokens == greedy_no_cache(model, prompt, new_tokens), len(prompt)
    # requests shared passes (more requests than slots, prompts longer than one chunk)
    assert engine.stats.decode_passes < len(prompts) * new_tokens
    assert engine.stats.prefill_passes > 1
