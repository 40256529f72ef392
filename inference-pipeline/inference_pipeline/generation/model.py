"""A small GPT-style decoder-only Transformer whose KV cache is an explicit input and output.

``forward(tokens, positions, attention_mask, past)`` takes the new tokens of each row, their
absolute positions, a mask over ``past + new`` key slots and the past keys/values of every
layer, and returns the logits of the new tokens and the keys/values *of the new tokens only*.
The past is read in place, never concatenated or copied out: the caller owns the cache and
writes the new keys/values into it, so a pass costs a read of the past, not a copy of it
(which made a decode pass's cost grow ~3x faster with the past's length). One function serves
both prefill (many new tokens, empty past) and decode (one new token, long past), so there is
one graph to export, test and quantize.

The vocabulary is bytes (256 symbols): no tokenizer file to ship, every UTF-8 text is
representable, and a byte stream is what the server streams back.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
from torch import nn
from torch.nn import functional as F

VOCAB_SIZE = 256
# Added to the score of a masked key. Finite (not -inf) so that a fully masked row (a padded
# query) gives a uniform softmax instead of NaN; exp(-1e9) is exactly 0 in float32.
MASKED_SCORE = -1e9


@dataclass(frozen=True)
class GPTConfig:
    n_layer: int = 4
    n_head: int = 4
    # Width 128, not 256: a few minutes of one shared CPU core see ~5M bytes, and at that data
    # budget the smaller model reaches a lower loss (the 256-wide one stalled near 2.5 nats).
    d_model: int = 128
    max_positions: int = 256
    vocab_size: int = VOCAB_SIZE

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_head

    def to_dict(self) -> dict[str, int]:
        return asdict(self)

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"GPTConfig.{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_head:
            raise ValueError(f"d_model={self.d_model} is not divisible by n_head={self.n_head}")


TINY_CONFIG = GPTConfig(n_layer=2, n_head=2, d_model=32, max_positions=128)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.n_head = config.n_head
        self.head_dim = config.head_dim
        self.qkv = nn.Linear(config.d_model, 3 * config.d_model)
        self.proj = nn.Linear(config.d_model, config.d_model)

    def forward(
        self, x: torch.Tensor, bias: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        batch, new, width = x.shape
        q, k, v = self.qkv(x).split(width, dim=2)
        # [B, T, C] -> [B, H, T, D]
        q = q.view(batch, new, self.n_head, self.head_dim).transpose(1, 2)
        k = k.view(batch, new, self.n_head, self.head_dim).transpose(1, 2)
        v = v.view(batch, new, self.n_head, self.head_dim).transpose(1, 2)
        if self.training:  # training windows have no past and no padding: the fused kernel
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.proj(y.transpose(1, 2).reshape(batch, new, width)), k, v
        # Scores against the past and against the new keys, side by side: one softmax over
        # past + new slots, as if the keys were concatenated, without materializing that.
        past = past_k.shape[2]
        scores = torch.cat([q @ past_k.transpose(-2, -1), q @ k.transpose(-2, -1)], dim=-1)
        weights = (scores / math.sqrt(self.head_dim) + bias).softmax(dim=-1)
        y = weights[..., :past] @ past_v + weights[..., past:] @ v
        y = y.transpose(1, 2).reshape(batch, new, width)
        return self.proj(y), k, v


class Block(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(config.d_model)
        self.attn = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, 4 * config.d_model),
            nn.GELU(approximate="tanh"),
            nn.Linear(4 * config.d_model, config.d_model),
        )

    def forward(
        self, x: torch.Tensor, bias: torch.Tensor, past_k: torch.Tensor, past_v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        attended, new_k, new_v = self.attn(self.ln1(x), bias, past_k, past_v)
        x = x + attended
        return x + self.mlp(self.ln2(x)), new_k, new_v


def attention_bias(attention_mask: torch.Tensor, new_tokens: int) -> torch.Tensor:
    """[B, 1, T, P+T] additive scores: key j is visible to new token i when the mask allows it
    and j is not a later new token (causal within the new tokens; the past is all earlier)."""
    total = attention_mask.shape[1]
    past = total - new_tokens
    query = torch.arange(new_tokens, device=attention_mask.device).unsqueeze(1) + past
    key = torch.arange(total, device=attention_mask.device).unsqueeze(0)
    visible = (key <= query).unsqueeze(0) & (attention_mask.unsqueeze(1) > 0)
    zero = torch.zeros((), dtype=torch.float32, device=attention_mask.device)
    return torch.where(visible, zero, zero + MASKED_SCORE).unsqueeze(1)


class GPT(nn.Module):
    def __init__(self, config: GPTConfig) -> None:
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.d_model)
        self.position_embedding = nn.Embedding(config.max_positions, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layer))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.head.weight = self.token_embedding.weight  # tied, as in GPT-2
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear | nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def empty_past(self, batch: int) -> list[torch.Tensor]:
        """Per layer: key then value, each [B, H, 0, D]."""
        c = self.config
        return [torch.zeros(batch, c.n_head, 0, c.head_dim) for _ in range(2 * c.n_layer)]

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor,
        attention_mask: torch.Tensor,
        *past: torch.Tensor,
    ) -> tuple[torch.Tensor, ...]:
        """tokens, positions: int64 [B, T]; attention_mask: int64 [B, P+T] (1 = a real key);
        past: 2 * n_layer float32 tensors [B, H, P, D] (key, value of layer 0, then layer 1...).
        Returns (logits [B, T, V], new key 0, new value 0, ...), each [B, H, T, D]: the keys
        and values of the new tokens (the caller appends them to its cache)."""
        x = self.token_embedding(tokens) + self.position_embedding(positions)
        bias = attention_bias(attention_mask, tokens.shape[1])
        new_kv: list[torch.Tensor] = []
        for i, block in enumerate(self.blocks):
            x, new_k, new_v = block(x, bias, past[2 * i], past[2 * i + 1])
            new_kv += [new_k, new_v]
        return (self.head(self.ln_f(x)), *new_kv)

    def logits_no_cache(self, tokens: torch.Tensor) -> torch.Tensor:
        """Plain causal forward over whole sequences [B, T] (training and the no-cache oracle)."""
        batch, length = tokens.shape
        positions = torch.arange(length).expand(batch, length)
        mask = torch.ones(batch, length, dtype=torch.int64)
        return self(tokens, positions, mask, *self.empty_past(batch))[0]

    def loss(self, tokens: torch.Tensor) -> torch.Tensor:
        """Next-byte cross-entropy (nats per byte) over [B, T+1] windows."""
        logits = self.logits_no_cache(tokens[:, :-1])
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), tokens[:, 1:].reshape(-1))


@torch.no_grad()
def greedy_no_cache(model: GPT, prompt: bytes, max_new_tokens: int) -> list[int]:
    """The oracle: greedy decoding that re-runs the whole sequence for every new byte."""
    if not prompt or len(prompt) + max_new_tokens > model.config.max_positions:
        raise ValueError(
            f"prompt of {len(prompt)} bytes + {max_new_tokens} new must be within 1.."
            f"{model.config.max_positions} positions"
        )
    tokens = list(prompt)
    out: list[int] = []
    for _ in range(max_new_tokens):
        logits = model.logits_no_cache(torch.tensor([tokens]))
        out.append(int(logits[0, -1].argmax()))
        tokens.append(out[-1])
    return out
