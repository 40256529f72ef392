"""Next-token choice: greedy, or temperature / top-k / top-p (nucleus) sampling with a seed."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 0.0  # 0 = greedy
    top_k: int = 0  # 0 = no top-k cut
    top_p: float = 1.0  # 1 = no nucleus cut
    seed: int | None = None

    def __post_init__(self) -> None:
        if not (math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if not (0.0 < self.top_p <= 1.0):
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")


def sample_next(logits: np.ndarray, params: SamplingParams, rng: np.random.Generator) -> int:
    """One token id from a [V] logits row."""
    if params.temperature == 0.0:
        return int(np.argmax(logits))
    scaled = logits.astype(np.float64) / params.temperature
    order = np.argsort(-scaled, kind="stable")
    if params.top_k:
        order = order[: params.top_k]
    probs = np.exp(scaled[order] - scaled[order[0]])
    probs /= probs.sum()
    if params.top_p < 1.0:
        # Smallest prefix whose mass reaches top_p (always at least the best token).
        keep = int(np.searchsorted(np.cumsum(probs), params.top_p)) + 1
        order, probs = order[:keep], probs[:keep] / probs[:keep].sum()
    pick = int(np.searchsorted(np.cumsum(probs), rng.random(), side="right"))
    return int(order[min(pick, len(order) - 1)])


def sample_rows(
    logits: np.ndarray, params: list[SamplingParams], rngs: list[np.random.Generator]
) -> list[int]:
    """One token id per row of [N, V] logits (row i with ``params[i]``, ``rngs[i]``): the
    greedy rows' tokens come from one argmax over the block, equal to ``sample_next`` row by
    row (both take the first maximum)."""
    greedy = logits.argmax(axis=-1).tolist()
    if all(p.temperature == 0.0 for p in params):
        return greedy
    return [
        best if p.temperature == 0.0 else sample_next(row, p, rng)
        for best, row, p, rng in zip(greedy, logits, params, rngs, strict=True)
    ]
