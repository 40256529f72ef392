"""Continuous and static batching engines, the paged KV cache and stop sequences."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from inference_pipeline.generation.engine import (
    ContinuousBatchingEngine,
    QueueFull,
    StaticBatchingEngine,
)
from inference_pipeline.generation.model import GPT, TINY_CONFIG, GPTConfig, greedy_no_cache
from inference_pipeline.generation.paged_cache import OutOfBlocks, PagedKVCache
from inference_pipeline.generation.requests import GenerationRequest
from inference_pipeline.generation.runtime import TorchStep
from inference_pipeline_harness.serving_fixtures import one_torch_thread

PROMPTS = [
    b"Hello world, this is",
    b"A",
    b"The Bank of England said on Monday that rates",
    b"xyz" * 10,
]


def peaky_tiny_model() -> GPT:
    """Untrained, but with large weights so next-token logits have clear winners (greedy
    comparisons then test the cache logic, not float round-off between near-ties)."""
    torch.manual_seed(0)
    model = GPT(TINY_CONFIG).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.normal_(0.0, 0.3)
    return model


@pytest.fixture(autouse=True)
def one_thread():
    with one_torch_thread():
        yield


@pytest.fixture(scope="module")
def model() -> GPT:
    return peaky_tiny_model()


class CountingStep:
    """A fake model: the next token is (last token + 1) mod 256; keys/values are zeros. Lets
    the scheduler be exercised over thousands of requests in well under a second."""

    config = GPTConfig(n_layer=1, n_head=1, d_model=2, max_positions=64)

    def __call__(self, tokens, positions, attention_mask, past):
        batch, new = tokens.shape
        logits = np.zeros((batch, new, 256), dtype=np.float32)
        np.put_along_axis(logits, ((tokens + 1) % 256)[..., None], 1.0, axis=-1)
        total = past[0].shape[2] + new
        present = [np.zeros((batch, 1, total, 2), dtype=np.float32) for _ in past]
        return logits, present


def test_request_joining_mid_batch_gets_the_tokens_it_gets_alone(model: GPT) -> None:
    alone = [greedy_no_cache(model, p, 20) for p in PROMPTS]
    engine = ContinuousBatchingEngine(TorchStep(model), max_batch=3, prefill_chunk=8, block_size=4)
    handles = [engine.submit(GenerationRequest(PROMPTS[0], 20))]
    for _ in range(5):  # the first request is already decoding when the others arrive
        engine.step()
    assert len(handles[0].tokens) >= 2
    handles += [engine.submit(GenerationRequest(p, 20)) for p in PROMPTS[1:]]
    engine.run_until_idle()
    assert [h.tokens for h in handles] == alone
    assert engine.stats.prefill_passes > len(PROMPTS)  # long prompts were prefilled in chunks
    assert engine.cache.free_blocks == engine.cache.num_blocks


def test_static_batching_gives_the_same_greedy_tokens(model: GPT) -> None:
    engine = StaticBatchingEngine(TorchStep(model), batch_size=4, max_wait_s=0)
    lengths = [5, 20, 1, 12]
    handles = [
        engine.submit(GenerationRequest(p, n)) for p, n in zip(PROMPTS, lengths, strict=True)
    ]
    engine.run_until_idle()
    assert [h.tokens for h in handles] == [
        greedy_no_cache(model, p, n) for p, n in zip(PROMPTS, lengths, strict=True)
    ]
    assert engine.stats.decode_passes == max(lengths) - 1  # the batch ran to its longest request


def test_cancellation_frees_the_blocks_and_ends_the_stream() -> None:
    engine = ContinuousBatchingEngine(CountingStep(), max_batch=2, block_size=4)
    keep = engine.submit(GenerationRequest(b"a", 40))
    drop = engine.submit(GenerationRequest(b"b" * 10, 40))
    for _ in range(3):
        engine.step()
    used_by_drop = len(engine.cache.tables[drop.id])
    free_before = engine.cache.free_blocks
    drop.cancel()
    engine.step()
    assert drop.finish_reason == "cancelled" and drop.id not in engine.cache.tables
    assert engine.cache.free_blocks == free_before + used_by_drop
    chunks = []
    while not drop.chunks.empty():
        chunks.append(drop.chunks.get())
    assert chunks[-1].finish_reason == "cancelled" and all(
        c.finish_reason is None for c in chunks[:-1]
    )
    engine.run_until_idle()
    assert keep.finish_reason == "length" and len(keep.tokens) == 40


def test_block_accounting_never_leaks_over_1000_random_requests() -> None:
    rng = np.random.default_rng(0)
    step = CountingStep()
    engine = ContinuousBatchingEngine(
        step, max_batch=8, num_blocks=40, block_size=4, prefill_chunk=16
    )
    handles = []
    for _ in range(1000):
        prompt = bytes(rng.integers(97, 123, size=int(rng.integers(1, 30))).tolist())
        stop = (bytes([int(rng.integers(97, 123))]),) if rng.random() < 0.3 else ()
        handles.append(engine.submit(GenerationRequest(prompt, int(rng.integers(1, 34)), stop)))
        for _ in range(int(rng.integers(0, 3))):
            engine.step()
            engine.cache.check()
            assert engine.cache.used_blocks <= engine.cache.num_blocks
        if rng.random() < 0.1:
            handles[int(rng.integers(len(handles)))].cancel()
    engine.run_until_idle()
    engine.cache.check()
    assert engine.cache.free_blocks == engine.cache.num_blocks and not engine.cache.tables
    reasons = {h.finish_reason for h in handles}
    assert all(h.done for h in handles) and reasons <= {"length", "stop", "cancelled"}
    assert {"length", "stop", "cancelled"} <= reasons
    for h in handles:
        assert len(h.tokens) <= h.request.max_new_tokens
        if h.finish_reason == "length":
            assert len(h.tokens) == h.request.max_new_tokens


def test_stop_sequence_ends_the_request_and_is_not_streamed() -> None:
    engine = ContinuousBatchingEngine(CountingStep(), max_batch=2)
    # CountingStep continues "a" with "bcdefg..."; "de" must stop it after "bc".
    handle = engine.submit(GenerationRequest(b"a", 30, stop=(b"de", b"zz")))
    engine.run_until_idle()
    assert handle.finish_reason == "stop" and bytes(handle.output) == b"bc"
    streamed = b""
    while not handle.chunks.empty():
        streamed += handle.chunks.get().data
    assert streamed == b"bc"  # "d" was held back until it proved to start the stop sequence


def test_admission_waits_for_blocks_and_limits_are_enforced() -> None:
    step = CountingStep()
    engine = ContinuousBatchingEngine(step, max_batch=4, num_blocks=4, block_size=4, max_queue=2)
    first = engine.submit(GenerationRequest(b"a", 15))  # needs all 4 blocks
    second = engine.submit(GenerationRequest(b"b", 3))
    with pytest.raises(QueueFull):
        engine.submit(GenerationRequest(b"c", 3))
    engine.step()
    assert [s.handle for s in engine.running] == [first]  # second waits for blocks
    engine.run_until_idle()
    assert second.finish_reason == "length"
    with pytest.raises(ValueError, match="exceeds"):
        engine.submit(GenerationRequest(b"a" * 60, 10))


def test_paged_gather_returns_what_was_appended() -> None:
    config = GPTConfig(n_layer=2, n_head=2, d_model=4, max_positions=32)
    cache = PagedKVCache(config, num_blocks=12, block_size=3)
    rng = np.random.default_rng(1)
    written = {}
    for seq_id, length in ((1, 7), (2, 2), (3, 11)):
        cache.reserve(seq_id, length)
        keys = rng.standard_normal((2, 2, length, 2)).astype(np.float32)
        cache.append(seq_id, keys[:, :, :4], keys[:, :, :4] + 1)
        cache.append(seq_id, keys[:, :, 4:], keys[:, :, 4:] + 1)
        written[seq_id] = keys
    past, lengths = cache.gather([3, 1, 2])
    assert lengths.tolist() == [11, 7, 2] and past[0].shape == (3, 2, 12, 2)  # 4 blocks of 3
    for row, seq_id in enumerate((3, 1, 2)):
        n = lengths[row]
        for layer in range(2):
            np.testing.assert_array_equal(past[2 * layer][row, :, :n], written[seq_id][layer])
            np.testing.assert_array_equal(
                past[2 * layer + 1][row, :, :n], written[seq_id][layer] + 1
            )
    with pytest.raises(OutOfBlocks):
        cache.append(2, np.zeros((2, 2, 2, 2), np.float32), np.zeros((2, 2, 2, 2), np.float32))
    assert cache.release(3) == 4
    cache.check()


def test_a_failing_model_ends_requests_with_error_and_frees_blocks() -> None:
    class FailsOnThirdPass(CountingStep):
        calls = 0

        def __call__(self, *args):
            self.calls += 1
            if self.calls == 3:
                raise RuntimeError("model exploded")
            return super().__call__(*args)

    engine = ContinuousBatchingEngine(FailsOnThirdPass(), max_batch=2, block_size=4)
    handles = [
        engine.submit(GenerationRequest(b"a", 10)),
        engine.submit(GenerationRequest(b"b", 10)),
    ]
    engine.step()
    with pytest.raises(RuntimeError, match="exploded"):
        for _ in range(3):
            engine.step()
    assert [h.finish_reason for h in handles] == ["error", "error"]
    assert engine.cache.free_blocks == engine.cache.num_blocks
    later = engine.submit(GenerationRequest(b"c", 5))  # the engine keeps serving
    engine.run_until_idle()
    assert later.finish_reason == "length" and bytes(later.output) == b"defgh"
    static = StaticBatchingEngine(FailsOnThirdPass(), batch_size=2, max_wait_s=0)
    batch = [static.submit(GenerationRequest(b"a", 10)), static.submit(GenerationRequest(b"b", 10))]
    with pytest.raises(RuntimeError, match="exploded"):
        static.step()
    assert [h.finish_reason for h in batch] == ["error", "error"]
