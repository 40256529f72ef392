"""Models and runs shared by the demo, the report section and the tests."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from concepts.compile_backend import MinigradBackend
from torch import nn


def digits_batch(
    n: int = 96, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor]:
    """The first ``n`` images of sklearn's ``load_digits`` (8×8, scaled to [0, 1]) and labels."""
    from sklearn.datasets import load_digits

    data = load_digits()
    x = torch.tensor(data.data[:n] / 16.0, dtype=dtype)
    y = torch.tensor(data.target[:n], dtype=torch.int64)
    return x, y


def digits_mlp(hidden: int = 32, seed: int = 0) -> nn.Module:
    """The digits MLP: 64 → hidden → 10 with ReLU, float64."""
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(64, hidden), nn.ReLU(), nn.Linear(hidden, 10)).double()


class SwishMLP(nn.Module):
    """64 → hidden → 10 with swish (``F.silu``): silu and silu_backward get decomposed."""

    def __init__(self, hidden: int = 32) -> None:
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(F.silu(self.fc1(x)))


class WithLoss(nn.Module):
    """model + cross-entropy as one module, so the compiled graph contains the loss too."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.model(x), y)


def swish_mlp(hidden: int = 32, seed: int = 1) -> nn.Module:
    torch.manual_seed(seed)
    return SwishMLP(hidden).double()


@dataclass
class CompiledVsEager:
    """One model run eagerly and compiled with minigrad_backend from the same weights."""

    max_output_diff: float
    max_grad_diff: float
    eager_losses: list[float]
    compiled_losses: list[float]
    backend: MinigradBackend

    @property
    def max_loss_diff(self) -> float:
        return max(abs(a - b) for a, b in zip(self.eager_losses, self.compiled_losses, strict=True))


def _max_grad_diff(a: nn.Module, b: nn.Module) -> float:
    return max(
        (pa.grad - pb.grad).abs().max().item()
        for pa, pb in zip(a.parameters(), b.parameters(), strict=True)
    )


def compiled_vs_eager(
    model: nn.Module,
    x: torch.Tensor,
    y: torch.Tensor,
    steps: int = 5,
    lr: float = 0.5,
    compile_loss: bool = False,
) -> CompiledVsEager:
    """Outputs and gradients of the first step, then ``steps`` SGD steps' losses, both ways.

    ``compile_loss=False``: the compiled model returns logits and the loss is eager torch, so
    its gradient enters AOTAutograd's backward graph (run by minigrad) as ``tangents_1``.
    ``compile_loss=True``: model and cross-entropy are one compiled graph (log_softmax and
    nll_loss decomposed too); the "output" compared is then the loss itself."""
    torch._dynamo.reset()
    eager, twin = model, copy.deepcopy(model)
    backend = MinigradBackend()
    compiled = torch.compile(
        WithLoss(twin) if compile_loss else twin, backend=backend, dynamic=False
    )
    opt_eager = torch.optim.SGD(eager.parameters(), lr=lr)
    opt_compiled = torch.optim.SGD(twin.parameters(), lr=lr)
    eager_losses, compiled_losses = [], []
    out_diff = grad_diff = 0.0
    for step in range(steps):
        opt_eager.zero_grad()
        opt_compiled.zero_grad()
        out_e = eager(x)
        loss_e = F.cross_entropy(out_e, y)
        if compile_loss:
            loss_c = compiled(x, y)
            out_e, out_c = loss_e, loss_c
        else:
            out_c = compiled(x)
            loss_c = F.cross_entropy(out_c, y)
        loss_e.backward()
        loss_c.backward()
        if step == 0:
            out_diff = (out_e - out_c).abs().max().item()
            grad_diff = _max_grad_diff(eager, twin)
        eager_losses.append(loss_e.item())
        compiled_losses.append(loss_c.item())
        opt_eager.step()
        opt_compiled.step()
    torch._dynamo.reset()
    return CompiledVsEager(out_diff, grad_diff, eager_losses, compiled_losses, backend)
