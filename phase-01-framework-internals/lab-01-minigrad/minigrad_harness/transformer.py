"""A 2-layer, 4-head character-level Transformer, trained 50 steps with Adam in minigrad and in
torch from the same initial weights: the loss curves must agree within 1e-5 relative.

One model definition serves both libraries (``build_model(lib)``): minigrad has torch's names
for everything it uses (nn.Embedding, nn.LayerNorm, nn.GELU, nn.Dropout, nn.ModuleList, split,
transpose, reshape, F.scaled_dot_product_attention(is_causal=True), optim.Adam). The text is
a fixed note shipped with the harness (data/autodiff_notes.txt); float64, dropout 0, so the
curves can be compared tightly.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from minigrad_harness.digits_mlp import single_threaded

TEXT = Path(__file__).resolve().parent / "data" / "autodiff_notes.txt"
CONFIG = dict(d_model=32, n_head=4, n_layer=2, block=32, batch=8, steps=50, lr=3e-3, seed=0)


def library(name: str) -> SimpleNamespace:
    """The few top-level names the model needs, from ``minigrad`` or ``torch``."""
    if name == "torch":
        import torch

        return SimpleNamespace(
            name="torch", nn=torch.nn, F=torch.nn.functional, optim=torch.optim,
            arange=torch.arange, tensor=lambda a: torch.from_numpy(np.ascontiguousarray(a)),
        )  # fmt: skip
    import minigrad

    return SimpleNamespace(
        name="minigrad", nn=minigrad.nn, F=minigrad.nn.functional, optim=minigrad.optim,
        arange=minigrad.arange, tensor=minigrad.tensor,
    )  # fmt: skip


def build_model(lib: SimpleNamespace, vocab: int, cfg: dict[str, Any]) -> Any:
    nn, F = lib.nn, lib.F
    d, heads = cfg["d_model"], cfg["n_head"]

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln1 = nn.LayerNorm(d, dtype=np_or_torch_f64(lib))
            self.qkv = nn.Linear(d, 3 * d, dtype=np_or_torch_f64(lib))
            self.out = nn.Linear(d, d, dtype=np_or_torch_f64(lib))
            self.ln2 = nn.LayerNorm(d, dtype=np_or_torch_f64(lib))
            self.fc = nn.Linear(d, 4 * d, dtype=np_or_torch_f64(lib))
            self.gelu = nn.GELU()
            self.proj = nn.Linear(4 * d, d, dtype=np_or_torch_f64(lib))
            self.drop = nn.Dropout(0.0)

        def forward(self, x: Any) -> Any:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
            q, k, v = (z.reshape(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.drop(self.out(y.transpose(1, 2).reshape(b, t, d)))
            return x + self.drop(self.proj(self.gelu(self.fc(self.ln2(x)))))

    class CharTransformer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.tok = nn.Embedding(vocab, d, dtype=np_or_torch_f64(lib))
            self.pos = nn.Embedding(cfg["block"], d, dtype=np_or_torch_f64(lib))
            self.blocks = nn.ModuleList([Block() for _ in range(cfg["n_layer"])])
            self.ln_f = nn.LayerNorm(d, dtype=np_or_torch_f64(lib))
            self.head = nn.Linear(d, vocab, dtype=np_or_torch_f64(lib))

        def forward(self, ids: Any) -> Any:
            x = self.tok(ids) + self.pos(lib.arange(ids.shape[1]))
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    return CharTransformer()


def np_or_torch_f64(lib: SimpleNamespace) -> Any:
    if lib.name == "torch":
        import torch

        return torch.float64
    return np.float64


@dataclass
class TransformerRun:
    losses: list[float]
    seconds: float
    n_params: int


def load_text() -> tuple[np.ndarray, int]:
    text = TEXT.read_text(encoding="utf-8")
    chars = sorted(set(text))
    lookup = {c: i for i, c in enumerate(chars)}
    return np.array([lookup[c] for c in text], dtype=np.int64), len(chars)


def batches(data: np.ndarray, cfg: dict[str, Any]) -> list[tuple[np.ndarray, np.ndarray]]:
    """The same random windows for both libraries: inputs and next-character targets."""
    rng = np.random.default_rng(cfg["seed"])
    out = []
    for _ in range(cfg["steps"]):
        starts = rng.integers(0, len(data) - cfg["block"] - 1, cfg["batch"])
        x = np.stack([data[s : s + cfg["block"]] for s in starts])
        y = np.stack([data[s + 1 : s + cfg["block"] + 1] for s in starts])
        out.append((x, y))
    return out


def initial_weights(vocab: int, cfg: dict[str, Any]) -> dict[str, np.ndarray]:
    """Drawn once by minigrad's initialisation (seeded), then given to both libraries."""
    import minigrad

    minigrad.manual_seed(cfg["seed"])
    return build_model(library("minigrad"), vocab, cfg).state_dict()


def train(name: str, weights: dict[str, np.ndarray], cfg: dict[str, Any] = CONFIG):
    lib = library(name)
    data, vocab = load_text()
    model = build_model(lib, vocab, cfg)
    if name == "torch":
        model.load_state_dict({k: lib.tensor(v.copy()) for k, v in weights.items()})
    else:
        model.load_state_dict(weights)
    opt = lib.optim.Adam(list(model.parameters()), lr=cfg["lr"])
    losses = []
    t0 = time.perf_counter()
    for x, y in batches(data, cfg):
        opt.zero_grad()
        logits = model(lib.tensor(x))
        loss = lib.F.cross_entropy(logits.reshape(-1, vocab), lib.tensor(y.reshape(-1)))
        loss.backward()
        opt.step()
        losses.append(float(loss.item()))
    n_params = sum(int(np.prod(p.shape)) for p in model.parameters())
    return TransformerRun(losses, time.perf_counter() - t0, n_params)


def compare(cfg: dict[str, Any] = CONFIG) -> tuple[TransformerRun, TransformerRun, float]:
    """Train in both libraries from the same weights; the largest relative loss difference."""
    _, vocab = load_text()
    weights = initial_weights(vocab, cfg)
    with single_threaded():  # small matrices: extra threads only wait for a shared core
        ours, theirs = train("minigrad", weights, cfg), train("torch", weights, cfg)
    a, b = np.asarray(ours.losses), np.asarray(theirs.losses)
    return ours, theirs, float(np.max(np.abs(a - b) / np.abs(b)))
