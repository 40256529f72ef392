"""Temperature / top-k / top-p sampling with a seed."""

from __future__ import annotations

import numpy as np
import pytest
from inference_pipeline.generation.engine import ContinuousBatchingEngine
from inference_pipeline.generation.model import GPTConfig
from inference_pipeline.generation.requests import GenerationRequest
from inference_pipeline.generation.sampling import SamplingParams, sample_next, sample_rows


class FixedDistributionStep:
    """A fake model whose next-token logits depend on the last token only."""

    config = GPTConfig(n_layer=1, n_head=1, d_model=2, max_positions=128)

    def __call__(self, tokens, positions, attention_mask, past):
        table = np.random.default_rng(7).normal(0.0, 2.0, (256, 256)).astype(np.float32)
        new_kv = [np.zeros((*tokens.shape[:1], 1, tokens.shape[1], 2), np.float32) for _ in past]
        return table[tokens], new_kv


def run(requests: list[GenerationRequest]) -> list[list[int]]:
    engine = ContinuousBatchingEngine(FixedDistributionStep(), max_num_seqs=4)
    handles = [engine.submit(r) for r in requests]
    engine.run_until_idle()
    return [h.tokens for h in handles]


def test_seeded_sampling_is_reproducible_even_when_batched_differently() -> None:
    params = SamplingParams(temperature=1.0, top_k=50, top_p=0.9, seed=123)
    alone = run([GenerationRequest(b"Once", 40, sampling=params)])[0]
    others = [
        GenerationRequest(b"x" * n, 30, sampling=SamplingParams(1.0, seed=n)) for n in (3, 9, 20)
    ]
    batched = run([*others, GenerationRequest(b"Once", 40, sampling=params)])[-1]
    assert batched == alone
    other_seed = run([GenerationRequest(b"Once", 40, sampling=SamplingParams(1.0, 50, 0.9, 124))])[
        0
    ]
    assert other_seed != alone


def test_frequencies_follow_the_softmax_at_temperature_one() -> None:
    logits = np.array([2.0, 1.0, 0.0, -1.0], dtype=np.float32)
    rng = np.random.default_rng(0)
    draws = [sample_next(logits, SamplingParams(temperature=1.0), rng) for _ in range(20000)]
    expected = np.exp(logits) / np.exp(logits).sum()
    observed = np.bincount(draws, minlength=4) / len(draws)
    np.testing.assert_allclose(observed, expected, atol=0.01)


def test_top_k_and_top_p_cut_the_support() -> None:
    logits = np.array([3.0, 2.9, 2.8, 0.0, -1.0], dtype=np.float32)
    rng = np.random.default_rng(0)
    top2 = {sample_next(logits, SamplingParams(1.0, top_k=2), rng) for _ in range(500)}
    assert top2 == {0, 1}
    # probabilities ~ [.35, .32, .29, .02, .01]: the nucleus of 0.6 is the first two tokens
    nucleus = {sample_next(logits, SamplingParams(1.0, top_p=0.6), rng) for _ in range(500)}
    assert nucleus == {0, 1}
    assert {sample_next(logits, SamplingParams(5.0, top_k=1), rng) for _ in range(50)} == {0}
    assert sample_next(logits, SamplingParams(0.0), rng) == 0  # temperature 0 is greedy


@pytest.mark.parametrize(
    "kwargs", [{"temperature": -1.0}, {"top_k": -2}, {"top_p": 0.0}, {"top_p": 1.5}]
)
def test_bad_sampling_parameters_are_refused(kwargs) -> None:
    with pytest.raises(ValueError):
        SamplingParams(**kwargs)


def test_sampling_a_block_of_rows_equals_sampling_each_row() -> None:
    """Greedy rows (ties included: the first maximum wins) and seeded sampled rows mixed in one
    call give what ``sample_next`` gives row by row, and draw the same numbers from each
    row's generator."""
    rng = np.random.default_rng(5)
    logits = rng.normal(0.0, 3.0, (12, 256)).astype(np.float32)
    logits[3, [10, 200]] = logits[3].max() + 1.0  # a tie
    params = [SamplingParams(temperature=0.0 if i % 3 else 0.8, top_k=i % 4 * 10, seed=i)
              for i in range(12)]  # fmt: skip
    block_rngs = [np.random.default_rng(i) for i in range(12)]
    alone_rngs = [np.random.default_rng(i) for i in range(12)]
    block = sample_rows(logits, params, block_rngs)
    alone = [sample_next(row, p, g) for row, p, g in zip(logits, params, alone_rngs, strict=True)]
    assert block == alone and block[3] == 10
    assert block[1] == int(np.argmax(logits[1]))
    assert [g.random() for g in block_rngs] == [g.random() for g in alone_rngs]
