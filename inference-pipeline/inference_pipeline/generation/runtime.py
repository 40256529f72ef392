"""Step functions: one forward pass over new tokens with an explicit KV cache, in NumPy terms.

A step function takes ``tokens``/``positions`` int64 [B, T], ``attention_mask`` int64 [B, P+T]
and ``past`` (2 * n_layer float32 arrays [B, H, P, D]) and returns logits float32 [B, T, V] and
the new tokens' keys/values [B, H, T, D] (the caller appends them to its cache). The engines
are written against this signature, so the same engine drives eager PyTorch, ONNX Runtime
(fp32 or INT8) or a fake model in tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import numpy as np
import torch

from inference_pipeline.generation.export import input_names
from inference_pipeline.generation.model import GPT, GPTConfig


class StepFunction(Protocol):
    config: GPTConfig

    def __call__(
        self,
        tokens: np.ndarray,
        positions: np.ndarray,
        attention_mask: np.ndarray,
        past: list[np.ndarray],
    ) -> tuple[np.ndarray, list[np.ndarray]]: ...


class TorchStep:
    """Eager PyTorch (the reference)."""

    def __init__(self, model: GPT) -> None:
        self.model = model.eval()
        self.config = model.config

    @torch.no_grad()
    def __call__(self, tokens, positions, attention_mask, past):
        outputs = self.model(
            torch.from_numpy(np.ascontiguousarray(tokens, dtype=np.int64)),
            torch.from_numpy(np.ascontiguousarray(positions, dtype=np.int64)),
            torch.from_numpy(np.ascontiguousarray(attention_mask, dtype=np.int64)),
            *(torch.from_numpy(np.ascontiguousarray(p, dtype=np.float32)) for p in past),
        )
        return outputs[0].numpy(), [t.numpy() for t in outputs[1:]]


class OrtStep:
    """ONNX Runtime on CPU, one session (prefill and decode share the graph)."""

    def __init__(self, onnx_path: Path, config: GPTConfig, threads: int = 2) -> None:
        from inference_pipeline.runtime import make_session

        self.session = make_session(onnx_path, threads)
        self.config = config
        self.names = input_names(config)

    def __call__(self, tokens, positions, attention_mask, past):
        feeds = dict(zip(self.names, (tokens, positions, attention_mask, *past), strict=True))
        outputs = self.session.run(None, feeds)
        return outputs[0], outputs[1:]


def empty_past(config: GPTConfig, batch: int) -> list[np.ndarray]:
    shape = (batch, config.n_head, 0, config.head_dim)
    return [np.zeros(shape, dtype=np.float32) for _ in range(2 * config.n_layer)]


def greedy_with_cache(step: StepFunction, prompt: bytes, max_new_tokens: int) -> list[int]:
    """Greedy decoding: one prefill pass over the prompt, then one pass per new byte that feeds
    only that byte and the growing cache."""
    if not prompt or len(prompt) + max_new_tokens > step.config.max_positions:
        raise ValueError(
            f"prompt of {len(prompt)} bytes + {max_new_tokens} new must be within 1.."
            f"{step.config.max_positions} positions"
        )
    tokens = np.array([list(prompt)], dtype=np.int64)
    positions = np.arange(len(prompt), dtype=np.int64)[None]
    past = empty_past(step.config, 1)
    out: list[int] = []
    for _ in range(max_new_tokens):
        mask = np.ones((1, positions[0, -1] + 1), dtype=np.int64)
        logits, new = step(tokens, positions, mask, past)
        past = [np.concatenate([p, n], axis=2) for p, n in zip(past, new, strict=True)]
        out.append(int(logits[0, -1].argmax()))
        tokens = np.array([[out[-1]]], dtype=np.int64)
        positions = positions[:, -1:] + 1
    return out
