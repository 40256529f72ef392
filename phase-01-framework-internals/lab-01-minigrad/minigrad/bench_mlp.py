"""One MLP training step three ways: minigrad, hand-written NumPy (the floor), torch eager.

The network is Linear(h, h) -> ReLU -> Linear(h, 10) -> cross-entropy on a (batch, h) input,
updated with plain SGD. The timing loop interleaves the three variants in short blocks so that
load from other processes hits them alike; figures are medians of single steps.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

import minigrad
import minigrad.nn.functional as F
from minigrad import nn, optim

N_CLASSES = 10
LR = 0.01


def _problem(batch: int, hidden: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, hidden)).astype(np.float32)
    y = rng.integers(0, N_CLASSES, batch)
    bound1, bound2 = 1 / np.sqrt(hidden), 1 / np.sqrt(hidden)
    weights = {
        "0.weight": rng.uniform(-bound1, bound1, (hidden, hidden)).astype(np.float32),
        "0.bias": rng.uniform(-bound1, bound1, hidden).astype(np.float32),
        "2.weight": rng.uniform(-bound2, bound2, (N_CLASSES, hidden)).astype(np.float32),
        "2.bias": rng.uniform(-bound2, bound2, N_CLASSES).astype(np.float32),
    }
    return x, y, weights


def numpy_step_fn(batch: int, hidden: int) -> Callable[[], float]:
    """The same step written out by hand: what any NumPy-based engine must at least do."""
    x, y, w = _problem(batch, hidden)
    w1, b1, w2, b2 = (w[k].copy() for k in ("0.weight", "0.bias", "2.weight", "2.bias"))
    rows = np.arange(batch)

    def step() -> float:
        h = x @ w1.T
        h += b1
        a = np.maximum(h, 0)
        logits = a @ w2.T
        logits += b2
        shifted = logits - logits.max(axis=1, keepdims=True)
        e = np.exp(shifted)
        s = e.sum(axis=1, keepdims=True)
        loss = (np.log(s[:, 0]) - shifted[rows, y]).sum() / batch
        e /= s
        e[rows, y] -= 1
        e *= 1.0 / batch  # d loss / d logits
        dw2 = e.T @ a
        db2 = e.sum(axis=0)
        da = e @ w2
        dh = da * (h > 0)
        dw1 = dh.T @ x
        db1 = dh.sum(axis=0)
        for p, g in ((w1, dw1), (b1, db1), (w2, dw2), (b2, db2)):
            p -= LR * g  # in place, as the optimizers do
        return loss

    return step


def minigrad_step_fn(batch: int, hidden: int) -> Callable[[], float]:
    x_np, y_np, w = _problem(batch, hidden)
    model = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, N_CLASSES))
    model.load_state_dict(w)
    opt = optim.SGD(model.parameters(), lr=LR)
    x, y = minigrad.Tensor(x_np), minigrad.Tensor(y_np)

    def step() -> float:
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.data

    return step


def torch_step_fn(batch: int, hidden: int) -> Callable[[], float]:
    import torch

    x_np, y_np, w = _problem(batch, hidden)
    model = torch.nn.Sequential(
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, N_CLASSES)
    )
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in w.items()})
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)

    def step() -> float:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


@dataclass
class BenchRow:
    batch: int
    hidden: int
    minigrad_ms: float
    numpy_ms: float
    torch_ms: float

    @property
    def vs_numpy(self) -> float:
        return self.minigrad_ms / self.numpy_ms

    @property
    def vs_torch(self) -> float:
        return self.minigrad_ms / self.torch_ms

    def as_dict(self) -> dict[str, float]:
        return {
            "batch": self.batch,
            "hidden": self.hidden,
            "minigrad_ms": self.minigrad_ms,
            "numpy_ms": self.numpy_ms,
            "torch_ms": self.torch_ms,
            "minigrad_over_numpy": self.vs_numpy,
            "minigrad_over_torch": self.vs_torch,
        }


def bench_size(
    batch: int, hidden: int, budget_s: float = 5.0, max_rounds: int = 500, block: int = 10
) -> BenchRow:
    """Median step time of each variant. Each round runs a block of ``block`` steps of every
    variant in turn (each step timed on its own), so slow phases of a shared machine hit all
    three alike while each variant still runs with its own data warm in cache."""
    fns = {
        "minigrad": minigrad_step_fn(batch, hidden),
        "numpy": numpy_step_fn(batch, hidden),
        "torch": torch_step_fn(batch, hidden),
    }
    for fn in fns.values():  # warm-up: allocations, BLAS thread start, torch dispatch caches
        for _ in range(3):
            fn()
    times: dict[str, list[float]] = {k: [] for k in fns}
    start = time.perf_counter()
    rounds = 0
    while rounds < max_rounds and (rounds < 3 or time.perf_counter() - start < budget_s):
        for name, fn in fns.items():
            for _ in range(block):
                t0 = time.perf_counter()
                fn()
                times[name].append(time.perf_counter() - t0)
        rounds += 1
    med = {k: float(np.median(v)) * 1e3 for k, v in times.items()}
    return BenchRow(batch, hidden, med["minigrad"], med["numpy"], med["torch"])
