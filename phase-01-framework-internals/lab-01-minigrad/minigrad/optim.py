"""``minigrad.optim``: SGD (momentum, weight decay) and Adam, updating parameters in place."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from minigrad.tensor import Tensor


class Optimizer:
    def __init__(self, params: Iterable[Tensor], lr: float) -> None:
        self.params = list(params)
        if not self.params:
            raise ValueError("optimizer got an empty parameter list")
        if lr < 0:  # lr = 0 is allowed, as in torch (a frozen schedule step, a dry run)
            raise ValueError(f"invalid learning rate: {lr} (must be >= 0)")
        self.lr = lr

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    def step(self) -> None:
        raise NotImplementedError


class SGD(Optimizer):
    """torch.optim.SGD without dampening/nesterov: buf = μ·buf + g; p -= lr·buf."""

    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr)
        self.momentum, self.weight_decay = momentum, weight_decay
        self.buffers: list[np.ndarray | None] = [None] * len(self.params)

    def step(self) -> None:
        lr, mu, wd = self.lr, self.momentum, self.weight_decay
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            g = p.grad.data
            if wd:
                g = g + wd * p.data
            if mu:
                buf = self.buffers[i]
                if buf is None:
                    buf = self.buffers[i] = g.copy()
                else:
                    buf *= mu
                    buf += g
                g = buf
            p.data -= lr * g
            p._version_counter[0] += 1  # an in-place update: graphs that saved p must notice


class Adam(Optimizer):
    def __init__(
        self,
        params: Iterable[Tensor],
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(params, lr)
        self.betas, self.eps, self.weight_decay = betas, eps, weight_decay
        self.m = [np.zeros_like(p.data) for p in self.params]
        self.v = [np.zeros_like(p.data) for p in self.params]
        # One step count per parameter, as torch: a parameter that first gets a gradient at
        # step 5 has had one update, so its bias correction is that of step 1.
        self.steps = [0] * len(self.params)

    def step(self) -> None:
        b1, b2 = self.betas
        for i, (p, m, v) in enumerate(zip(self.params, self.m, self.v, strict=True)):
            if p.grad is None:  # no gradient: no update and no step counted (torch)
                continue
            self.steps[i] += 1
            c1, c2 = 1 - b1 ** self.steps[i], 1 - b2 ** self.steps[i]
            g = p.grad.data
            if self.weight_decay:
                g = g + self.weight_decay * p.data
            m *= b1
            m += (1 - b1) * g
            v *= b2
            v += (1 - b2) * g * g
            p.data -= self.lr * (m / c1) / (np.sqrt(v / c2) + self.eps)
            p._version_counter[0] += 1
