"""The benchmarked MLP training step, written once per library from the same weights.

The network is Linear(h, h) -> ReLU -> Linear(h, 10) -> cross-entropy on a (batch, h) input,
updated with plain SGD. Each ``*_step_fn(batch, hidden)`` returns a no-argument callable that
runs one step (forward, loss, gradients, update; parameters carried from step to step) and
returns the loss, finished: JAX's asynchronous results are waited for.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import minigrad
import minigrad.nn.functional as F
import numpy as np
from minigrad import func as mf
from minigrad import nn, optim

N_CLASSES = 10
LR = 0.01


def problem(batch: int, hidden: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, dict]:
    """Input (float32), labels (int64) and torch-initialised weights, named as in torch."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, hidden)).astype(np.float32)
    y = rng.integers(0, N_CLASSES, batch)
    bound = 1 / np.sqrt(hidden)
    weights = {
        "0.weight": rng.uniform(-bound, bound, (hidden, hidden)).astype(np.float32),
        "0.bias": rng.uniform(-bound, bound, hidden).astype(np.float32),
        "2.weight": rng.uniform(-bound, bound, (N_CLASSES, hidden)).astype(np.float32),
        "2.bias": rng.uniform(-bound, bound, N_CLASSES).astype(np.float32),
    }
    return x, y, weights


def numpy_step_fn(batch: int, hidden: int) -> Callable[[], float]:
    """The same step written out by hand: what any NumPy-based engine must at least do."""
    x, y, w = problem(batch, hidden)
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
    """Eager minigrad: nn modules, loss.backward(), optim.SGD."""
    x_np, y_np, w = problem(batch, hidden)
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


def torch_step_fn(batch: int, hidden: int) -> Callable[[], Any]:
    """torch eager: the same modules, backward() and SGD."""
    import torch

    x_np, y_np, w = problem(batch, hidden)
    model = torch.nn.Sequential(
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, N_CLASSES)
    )
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in w.items()})
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    x, y = torch.from_numpy(x_np), torch.from_numpy(y_np)

    def step() -> Any:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss.detach()

    return step


def mlp(F: Any, p: dict, x: Any) -> Any:  # noqa: N803  (either library's functional namespace)
    h = F.relu(F.linear(x, p["0.weight"], p["0.bias"]))
    return F.linear(h, p["2.weight"], p["2.bias"])


def sgd_step(params: dict, x: Any, y: Any) -> tuple:
    """The functional step minigrad.func compiles: (loss, updated parameters)."""

    def loss(p: dict) -> Any:
        return F.cross_entropy(mlp(F, p, x), y)

    grads, value = mf.grad_and_value(loss)(params)
    return value, {k: params[k] - LR * grads[k] for k in params}


def minigrad_jit_step_fn(batch: int, hidden: int) -> tuple[Callable[[], Any], Callable]:
    """jit(sgd_step) and the jitted function (its ``cache`` holds the compiled entry). The
    first call of the step compiles."""
    x_np, y_np, w = problem(batch, hidden)
    state = {"p": {k: minigrad.tensor(v.copy()) for k, v in w.items()}}
    x, y = minigrad.tensor(x_np), minigrad.tensor(y_np)
    jitted = mf.jit(sgd_step)

    def step() -> Any:
        loss, state["p"] = jitted(state["p"], x, y)
        return loss

    return step, jitted


def jax_loss(p: dict, x: Any, y: Any) -> Any:
    """The same network and mean cross-entropy in jax.numpy."""
    import jax
    import jax.numpy as jnp

    h = jax.nn.relu(x @ p["0.weight"].T + p["0.bias"])
    logits = h @ p["2.weight"].T + p["2.bias"]
    picked = jnp.take_along_axis(logits, y[:, None], axis=1)[:, 0]
    return jnp.mean(jax.nn.logsumexp(logits, axis=1) - picked)


def jax_step_fn(batch: int, hidden: int, jit: bool) -> Callable[[], Any]:
    """The step in JAX: value_and_grad and the SGD update, op by op (``jit=False``: every
    primitive dispatched on its own) or compiled whole by ``jax.jit``. Arrays live on JAX's
    CPU device (placed once); labels are int32 (JAX's default integer width)."""
    import jax
    import jax.numpy as jnp

    x_np, y_np, w = problem(batch, hidden)

    def step_fn(p: dict, x: Any, y: Any) -> tuple:
        value, grads = jax.value_and_grad(jax_loss)(p, x, y)
        return value, {k: p[k] - LR * grads[k] for k in p}

    compiled = jax.jit(step_fn) if jit else step_fn
    state = {"p": {k: jnp.asarray(v) for k, v in w.items()}}
    x, y = jnp.asarray(x_np), jnp.asarray(y_np.astype(np.int32))

    def step() -> Any:
        loss, state["p"] = compiled(state["p"], x, y)
        return jax.block_until_ready((loss, state["p"]))[0]

    return step
