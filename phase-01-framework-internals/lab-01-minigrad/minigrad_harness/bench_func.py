"""Benchmarks of minigrad.func (run by ``python -m minigrad bench`` after the eager table).

1. Per-sample gradients of the digits-sized MLP (64-64-10, batch 64, float32): vmap(grad)
   against a Python loop of grad calls (the same transformation, one example at a time),
   against torch.func's vmap(grad), and jit(vmap(grad)).
2. The MLP training step (loss, gradients, SGD update) compiled by jit (StableHLO -> XLA)
   against the hand-written NumPy step and torch eager, at (64, 128) and (1024, 1024);
   XLA's compile time is reported separately.

Every variant runs in this one process, interleaved in short blocks (see bench.bench_size),
and the figures are medians of single calls from this run only: the machine is shared.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import minigrad
import minigrad.nn.functional as F
import numpy as np
from minigrad import func as mf

from minigrad_harness.bench import (
    LR,
    _problem,
    interleaved_medians,
    numpy_step_fn,
    torch_step_fn,
)


def _mlp(F, p, x):  # noqa: N803  (either library's functional namespace)
    h = F.relu(F.linear(x, p["0.weight"], p["0.bias"]))
    return F.linear(h, p["2.weight"], p["2.bias"])


def per_sample_fns(batch: int = 64) -> dict[str, Callable[[], Any]]:
    import torch
    import torch.func as tf

    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 64)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    shapes = {"0.weight": (64, 64), "0.bias": (64,), "2.weight": (10, 64), "2.bias": (10,)}
    w = {k: (rng.standard_normal(s) * 0.1).astype(np.float32) for k, s in shapes.items()}
    mp = {k: minigrad.tensor(v) for k, v in w.items()}
    tp = {k: torch.from_numpy(v.copy()) for k, v in w.items()}
    mx, my, tx, ty = (
        minigrad.tensor(x),
        minigrad.tensor(y),
        torch.from_numpy(x),
        torch.from_numpy(y),
    )

    def one(p, xi, yi):
        return F.cross_entropy(_mlp(F, p, xi[None]), yi[None])

    def one_torch(p, xi, yi):
        return torch.nn.functional.cross_entropy(_mlp(torch.nn.functional, p, xi[None]), yi[None])

    grad_one = mf.grad(one)
    per_sample = mf.vmap(grad_one, in_axes=(None, 0, 0))
    jitted = mf.jit(per_sample)
    torch_ps = tf.vmap(tf.grad(one_torch), in_dims=(None, 0, 0))
    return {
        "vmap(grad)": lambda: per_sample(mp, mx, my),
        "loop of grad": lambda: [grad_one(mp, mx[i], my[i]) for i in range(batch)],
        "torch.func vmap(grad)": lambda: torch_ps(tp, tx, ty),
        "jit(vmap(grad))": lambda: jitted(mp, mx, my),
    }


def _sgd_step(params: dict, x: Any, y: Any) -> tuple:
    def loss(p: dict) -> Any:
        return F.cross_entropy(_mlp(F, p, x), y)

    grads, value = mf.grad_and_value(loss)(params)
    return value, {k: params[k] - LR * grads[k] for k in params}


def jit_step_fn(batch: int, hidden: int) -> tuple[Callable[[], Any], float]:
    """The jitted training step (parameters carried from step to step) and its compile time."""
    x_np, y_np, w = _problem(batch, hidden)
    state = {"p": {k: minigrad.tensor(v.copy()) for k, v in w.items()}}
    x, y = minigrad.tensor(x_np), minigrad.tensor(y_np)
    step = mf.jit(_sgd_step)
    step(state["p"], x, y)  # compiles
    compile_s = next(iter(step.cache.values())).compile_seconds

    def run() -> Any:
        loss, state["p"] = step(state["p"], x, y)
        return loss

    return run, compile_s


def bench_jit_step(batch: int, hidden: int, budget_s: float, max_rounds: int, block: int) -> dict:
    jit_fn, compile_s = jit_step_fn(batch, hidden)
    fns = {
        "jit": jit_fn,
        "numpy": numpy_step_fn(batch, hidden),
        "torch": torch_step_fn(batch, hidden),
    }
    med = interleaved_medians(fns, budget_s, max_rounds, block)
    return {
        "batch": batch,
        "hidden": hidden,
        "compile_s": compile_s,
        **{f"{k}_ms": v for k, v in med.items()},
    }


def run_all(quick: bool, threads: int = 1) -> dict:
    """Both benchmarks; prints the tables and returns the figures."""
    import tensorflow as tf

    # XLA's CPU executables run on TensorFlow's intra-op pool: the same thread count as the
    # NumPy and torch baselines (settable only before TensorFlow starts its runtime)
    try:
        tf.config.threading.set_intra_op_parallelism_threads(threads)
        tf.config.threading.set_inter_op_parallelism_threads(threads)
    except RuntimeError:
        pass  # already initialised in this process
    budget = 1.0 if quick else 4.0
    ps = interleaved_medians(per_sample_fns(), budget, max_rounds=200, block=2)
    print("\nPer-sample gradients, digits MLP (64-64-10), batch 64, float32, median ms")
    base = ps["vmap(grad)"]
    for name, ms in ps.items():
        print(f"{name:>24} | {ms:9.3f} ms | {ms / base:6.2f}x vmap(grad)")
    rows = [
        bench_jit_step(64, 128, budget, max_rounds=300, block=10),
        bench_jit_step(1024, 1024, budget * 2, max_rounds=20, block=2),
    ]
    print("\nMLP training step: jit (StableHLO -> XLA) vs hand NumPy vs torch eager, median ms")
    cols = f"{'jit':>8} | {'NumPy':>8} | {'torch':>8} | {'NumPy/jit':>9}"
    print(f"{'(batch, hidden)':>16} | {cols} | compile s")
    for r in rows:
        print(
            f"{str((r['batch'], r['hidden'])):>16} | {r['jit_ms']:8.3f} | "
            f"{r['numpy_ms']:8.3f} | {r['torch_ms']:8.3f} | {r['numpy_ms'] / r['jit_ms']:8.2f}x | "
            f"{r['compile_s']:.2f}"
        )
    loop_ratio = ps["loop of grad"] / ps["vmap(grad)"]
    return {"per_sample_ms": ps, "vmap_over_loop_speedup": loop_ratio, "jit_step": rows}
