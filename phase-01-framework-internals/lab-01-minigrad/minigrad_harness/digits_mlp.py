"""The lab's main job: a 2-layer MLP on scikit-learn's digits, trained full-batch in minigrad
and, from the very same initial weights, in PyTorch (the oracle)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import minigrad
import minigrad.nn.functional as F
import numpy as np
from minigrad import nn, optim

HIDDEN = 64
STEPS = 100
LR = 0.5


@dataclass
class DigitsData:
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


@dataclass
class TrainResult:
    losses: list[float]
    test_accuracy: float


@contextmanager
def single_threaded() -> Iterator[None]:
    """One BLAS / torch thread: these matrices are small, and on a shared machine extra threads
    only wait for cores (a multi-threaded run here was 3x slower)."""
    import torch
    from threadpoolctl import threadpool_limits

    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with threadpool_limits(1):
            yield
    finally:
        torch.set_num_threads(prev)


def load_digits_split(seed: int = 0, test_fraction: float = 0.2) -> DigitsData:
    """The 1,797 8x8 digits (pixels scaled to [0, 1]), shuffled, 80/20 train/held-out."""
    from sklearn.datasets import load_digits

    x, y = load_digits(return_X_y=True)
    order = np.random.default_rng(seed).permutation(len(x))
    x = (x[order] / 16.0).astype(np.float32)
    y = y[order].astype(np.int64)
    n_test = int(round(len(x) * test_fraction))
    return DigitsData(x[n_test:], y[n_test:], x[:n_test], y[:n_test])


def initial_weights(
    n_in: int = 64, hidden: int = HIDDEN, n_out: int = 10, seed: int = 0
) -> dict[str, np.ndarray]:
    """torch.nn.Linear's default init, drawn once so both libraries start identically."""
    rng = np.random.default_rng(seed)
    b1, b2 = 1 / np.sqrt(n_in), 1 / np.sqrt(hidden)
    return {
        "0.weight": rng.uniform(-b1, b1, (hidden, n_in)).astype(np.float32),
        "0.bias": rng.uniform(-b1, b1, hidden).astype(np.float32),
        "2.weight": rng.uniform(-b2, b2, (n_out, hidden)).astype(np.float32),
        "2.bias": rng.uniform(-b2, b2, n_out).astype(np.float32),
    }


def train_minigrad(
    data: DigitsData, weights: dict[str, np.ndarray], steps: int = STEPS, lr: float = LR
) -> TrainResult:
    n_in, hidden = weights["0.weight"].shape[1], weights["0.weight"].shape[0]
    model = nn.Sequential(nn.Linear(n_in, hidden), nn.ReLU(), nn.Linear(hidden, 10))
    model.load_state_dict(weights)
    opt = optim.SGD(model.parameters(), lr=lr)
    x, y = minigrad.tensor(data.x_train), minigrad.tensor(data.y_train)
    with single_threaded():
        losses = _train_loop_minigrad(model, opt, x, y, steps)
    with minigrad.no_grad():
        pred = model(minigrad.tensor(data.x_test)).argmax(dim=1).numpy()
    return TrainResult(losses, float((pred == data.y_test).mean()))


def _train_loop_minigrad(model, opt, x, y, steps: int) -> list[float]:
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def train_torch(
    data: DigitsData, weights: dict[str, np.ndarray], steps: int = STEPS, lr: float = LR
) -> TrainResult:
    import torch

    n_in, hidden = weights["0.weight"].shape[1], weights["0.weight"].shape[0]
    model = torch.nn.Sequential(
        torch.nn.Linear(n_in, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, 10)
    )
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in weights.items()})
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    x, y = torch.from_numpy(data.x_train), torch.from_numpy(data.y_train)
    losses = []
    with single_threaded():
        for _ in range(steps):
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            losses.append(loss.item())
    with torch.no_grad():
        pred = model(torch.from_numpy(data.x_test)).argmax(dim=1).numpy()
    return TrainResult(losses, float((pred == data.y_test).mean()))


def curve_relative_difference(a: list[float], b: list[float]) -> float:
    a_, b_ = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a_ - b_) / np.abs(b_)))
