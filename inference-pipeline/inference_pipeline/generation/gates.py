"""Gates for the exported generator.

1. Cache equality: greedy generation through ONNX Runtime *with* the KV cache must equal greedy
   generation in eager PyTorch *without* any cache, token for token, on every prompt.
2. INT8: on held-out text, the dynamic-INT8 graph's next-token choice must agree with fp32's
   on at least ``MIN_INT8_AGREEMENT`` of positions (teacher forcing, so one early difference
   does not count twice), and its perplexity may rise by at most ``MAX_INT8_PPL_INCREASE``.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from inference_pipeline.gates import GateResult
from inference_pipeline.generation.model import GPT, greedy_no_cache
from inference_pipeline.generation.runtime import StepFunction, empty_past, greedy_with_cache

MIN_INT8_AGREEMENT = 0.95  # share of held-out positions where INT8 picks fp32's argmax
MAX_INT8_PPL_INCREASE = 0.02  # relative perplexity increase allowed for INT8


def eval_prompts(text: np.ndarray, count: int, max_len: int, seed: int = 0) -> list[bytes]:
    """``count`` held-out snippets whose lengths spread evenly over 1..max_len bytes."""
    rng = np.random.default_rng(seed)
    lengths = np.linspace(1, max_len, count).round().astype(int)
    rng.shuffle(lengths)
    starts = rng.integers(0, len(text) - max_len - 1, size=count)
    return [bytes(text[s : s + n]) for s, n in zip(starts, lengths, strict=True)]


def cache_equality_gate(
    model: GPT,
    step: StepFunction,
    prompts: list[bytes],
    max_new_tokens: int,
    progress: Callable[[str], None] = lambda _: None,
) -> GateResult:
    mismatched: list[str] = []
    for i, prompt in enumerate(prompts):
        reference = greedy_no_cache(model, prompt, max_new_tokens)
        cached = greedy_with_cache(step, prompt, max_new_tokens)
        if cached != reference:
            first = next(
                j for j, (a, b) in enumerate(zip(cached, reference, strict=True)) if a != b
            )
            mismatched.append(f"prompt {i} ({len(prompt)} bytes) differs at token {first}")
        if (i + 1) % 10 == 0:
            progress(f"  cache equality: {i + 1}/{len(prompts)} prompts")
    equal = len(prompts) - len(mismatched)
    return GateResult.compare(
        f"greedy with KV cache ({type(step).__name__}) == PyTorch without cache "
        f"({max_new_tokens} tokens), identical prompts",
        equal,
        len(prompts),
        ">=",
        "; ".join(mismatched[:5]),
    )


def teacher_forced(step: StepFunction, text: np.ndarray, windows: int, width: int):
    """(per-position log-likelihood of the true next byte, argmax choice) over held-out windows."""
    starts = np.linspace(0, len(text) - width - 2, windows).astype(np.int64)
    rows = np.stack([text[s : s + width + 1] for s in starts]).astype(np.int64)
    inputs, targets = rows[:, :-1], rows[:, 1:]
    positions = np.broadcast_to(np.arange(width), inputs.shape).copy()
    mask = np.ones_like(inputs)
    logits, _ = step(inputs, positions, mask, empty_past(step.config, len(rows)))
    logits = logits.astype(np.float64)
    top = logits.max(axis=-1, keepdims=True)
    log_probs = logits - top - np.log(np.exp(logits - top).sum(axis=-1, keepdims=True))
    true_ll = np.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    return true_ll, logits.argmax(axis=-1)


def int8_gates(
    fp32: StepFunction, int8: StepFunction, text: np.ndarray, windows: int = 32, width: int = 128
) -> tuple[GateResult, GateResult, dict[str, float]]:
    ll32, pick32 = teacher_forced(fp32, text, windows, width)
    ll8, pick8 = teacher_forced(int8, text, windows, width)
    agreement = float((pick32 == pick8).mean())
    ppl32, ppl8 = math.exp(-ll32.mean()), math.exp(-ll8.mean())
    increase = ppl8 / ppl32 - 1
    figures = {
        "ppl_fp32": ppl32,
        "ppl_int8": ppl8,
        "agreement": agreement,
        "ppl_increase": increase,
    }
    return (
        GateResult.compare(
            "INT8 next-token agreement with fp32 (held-out)",
            agreement,
            MIN_INT8_AGREEMENT,
            ">=",
            f"{pick32.size} positions",
        ),
        GateResult.compare(
            "INT8 perplexity increase (held-out)",
            increase,
            MAX_INT8_PPL_INCREASE,
            "<=",
            f"fp32 {ppl32:.3f} -> int8 {ppl8:.3f}",
        ),
        figures,
    )
