"""Benchmarks of minigrad.func (run by ``python -m minigrad bench`` after the step table).

1. Per-sample gradients of the digits-sized MLP (64-64-10, batch 64, float32): vmap(grad)
   against a Python loop of grad calls (the same transformation, one example at a time),
   torch.func's vmap(grad), jit(vmap(grad)), and JAX's vmap(grad) eager and under jax.jit.
2. Compile time and cache behaviour of jit on the training step: the first call (trace,
   lower to StableHLO, XLA compile, run) against later calls, a second shape compiling once,
   and jax.jit's first call beside it.
3. Where one jit call's time goes (signature walk and cache lookup, input buffers, the
   executable's launch and run, output views, rebuilding the output tree), each part timed
   on its own against the whole call; and how many Python functions one cache-hit call runs
   (the training step's and jit(vmap(grad))'s), counted, not timed.

Every variant runs in this one process, interleaved in short blocks (timing.py), and the
figures are medians of single calls from this run only: the machine is shared.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from typing import Any

import minigrad
import minigrad.nn.functional as F
import numpy as np
from minigrad import func as mf
from minigrad.func.jit import signature
from minigrad.tensor import Tensor

from minigrad_harness.mlp_step import jax_loss, mlp, problem, sgd_step
from minigrad_harness.timing import interleaved_medians, print_table


def per_sample_fns(batch: int = 64) -> dict[str, Callable[[], Any]]:
    import jax
    import jax.numpy as jnp
    import torch
    import torch.func as tf

    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 64)).astype(np.float32)
    y = rng.integers(0, 10, batch)
    shapes = {"0.weight": (64, 64), "0.bias": (64,), "2.weight": (10, 64), "2.bias": (10,)}
    w = {k: (rng.standard_normal(s) * 0.1).astype(np.float32) for k, s in shapes.items()}
    mp = {k: minigrad.tensor(v) for k, v in w.items()}
    tp = {k: torch.from_numpy(v.copy()) for k, v in w.items()}
    jp = {k: jnp.asarray(v) for k, v in w.items()}
    mx, my = minigrad.tensor(x), minigrad.tensor(y)
    tx, ty = torch.from_numpy(x), torch.from_numpy(y)
    jx, jy = jnp.asarray(x), jnp.asarray(y.astype(np.int32))

    def one(p, xi, yi):
        return F.cross_entropy(mlp(F, p, xi[None]), yi[None])

    def one_torch(p, xi, yi):
        return torch.nn.functional.cross_entropy(mlp(torch.nn.functional, p, xi[None]), yi[None])

    def one_jax(p, xi, yi):
        return jax_loss(p, xi[None], yi[None])

    grad_one = mf.grad(one)
    per_sample = mf.vmap(grad_one, in_axes=(None, 0, 0))
    jitted = mf.jit(per_sample)
    torch_ps = tf.vmap(tf.grad(one_torch), in_dims=(None, 0, 0))
    jax_ps = jax.vmap(jax.grad(one_jax), in_axes=(None, 0, 0))
    jax_ps_jit = jax.jit(jax_ps)
    return {
        "vmap(grad)": lambda: per_sample(mp, mx, my),
        "loop of grad": lambda: [grad_one(mp, mx[i], my[i]) for i in range(batch)],
        "torch.func vmap(grad)": lambda: torch_ps(tp, tx, ty),
        "jit(vmap(grad))": lambda: jitted(mp, mx, my),
        "jax vmap(grad) eager": lambda: jax.block_until_ready(jax_ps(jp, jx, jy)),
        "jax.jit(vmap(grad))": lambda: jax.block_until_ready(jax_ps_jit(jp, jx, jy)),
    }


# calls per interleaved block: the compiled variants run 50 in a row (after a slow eager
# variant the first few calls find cold caches, 2-3x slower; a loop over batches would
# not), the others 2
PER_SAMPLE_BLOCKS = {
    "vmap(grad)": 2,
    "loop of grad": 2,
    "torch.func vmap(grad)": 2,
    "jit(vmap(grad))": 50,
    "jax vmap(grad) eager": 2,
    "jax.jit(vmap(grad))": 50,
}


def per_sample_table(
    ps: dict[str, float], faults: dict[str, float] | None = None
) -> tuple[list[str], list[list[object]]]:
    """The per-sample table's header and rows; with ``faults`` (minor page faults per call,
    from interleaved_medians) a column of them."""
    header = ["variant", "median ms", "/ vmap(grad)", "/ jax.jit"]
    if faults is not None:
        header.append("page faults / call")
    rows = []
    for name, ms in ps.items():
        row: list[object] = [name, ms, ms / ps["vmap(grad)"], ms / ps["jax.jit(vmap(grad))"]]
        if faults is not None:
            row.append(f"{faults[name]:.1f}")
        rows.append(row)
    return header, rows


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def cache_behaviour(shapes: tuple = ((64, 128), (256, 128))) -> dict:
    """One jit(sgd_step) called at shape A, A, B, B, A: each call's ms and the cache size
    after it (a new signature compiles once; a known one is a lookup); the first call's parts
    (trace, lower, XLA compile) from its cache entry; jax.jit's first and second call."""
    import jax
    import jax.numpy as jnp

    jitted = mf.jit(sgd_step)
    inputs = {}
    for batch, hidden in shapes:
        x, y, w = problem(batch, hidden)
        inputs[(batch, hidden)] = (
            {k: minigrad.tensor(v) for k, v in w.items()},
            minigrad.tensor(x),
            minigrad.tensor(y),
        )
    a, b = shapes
    calls = []
    for shape in (a, a, b, b, a):
        seconds = _timed(lambda s=shape: jitted(*inputs[s]))
        calls.append({"shape": shape, "ms": seconds * 1e3, "cache_entries": len(jitted.cache)})
    entry = jitted.cache[signature(inputs[a])[0]]
    first = {
        "trace_s": entry.trace_seconds,
        "lower_s": entry.lower_seconds,
        "compile_s": entry.compile_seconds,
    }

    def jax_step(p, x, y):
        value, grads = jax.value_and_grad(jax_loss)(p, x, y)
        return value, {k: p[k] - 0.01 * grads[k] for k in p}

    jstep = jax.jit(jax_step)
    x, y, w = problem(*a)
    jargs = ({k: jnp.asarray(v) for k, v in w.items()}, jnp.asarray(x), jnp.asarray(y))
    jax_calls = [_timed(lambda: jax.block_until_ready(jstep(*jargs))) * 1e3 for _ in range(2)]
    return {"calls": calls, "first_call_parts": first, "jax_jit_first_and_second_ms": jax_calls}


def per_call_breakdown(batch: int = 64, hidden: int = 128, n: int = 2000) -> dict[str, float]:
    """Median µs of each part of a jitted step's call, each part timed on its own in a loop,
    beside the median of whole calls (interleaved with the parts)."""
    x, y, w = problem(batch, hidden)
    jitted = mf.jit(sgd_step)
    state = {"p": {k: minigrad.tensor(v) for k, v in w.items()}}
    mx, my = minigrad.tensor(x), minigrad.tensor(y)
    jitted(state["p"], mx, my)  # compiles
    entry = next(iter(jitted.cache.values()))
    exe = entry.executable
    parts: dict[str, list[float]] = {
        k: [] for k in ("signature", "lookup", "inputs", "launch", "outputs", "tree", "call")
    }
    clock = time.perf_counter
    for _ in range(n):
        args = (state["p"], mx, my)
        t0 = clock()
        key, arrays = signature(args)
        t1 = clock()
        jitted.cache.get(key)
        t2 = clock()
        buffers = exe.buffers_for(arrays)
        t3 = clock()
        results = exe.launch(buffers)
        t4 = clock()
        outs = exe.outputs(results)
        t5 = clock()
        _, state["p"] = entry.build([Tensor._wrap(o) for o in outs])
        t6 = clock()
        _, state["p"] = jitted(state["p"], mx, my)
        t7 = clock()
        for k, dt in zip(
            parts, (t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t6 - t5, t7 - t6), strict=True
        ):
            parts[k].append(dt)
    return {k: float(np.median(v)) * 1e6 for k, v in parts.items()}


def python_calls(fn: Callable[[], Any]) -> int:
    """How many Python functions one call of ``fn`` runs, ``fn``'s own frame not counted
    (``sys.setprofile`` sees every Python-level call; C functions are not counted). ``fn``
    is called once before, so a jitted function's compile is not in the count."""
    fn()
    count = 0

    def profile(frame: Any, event: str, arg: Any) -> None:
        nonlocal count
        count += event == "call"

    previous = sys.getprofile()
    sys.setprofile(profile)
    try:
        fn()
    finally:
        sys.setprofile(previous)
    return count - 1


def jit_python_calls(per_sample: Callable[[], Any]) -> dict[str, int]:
    """``python_calls`` of a cache-hit call of jit(sgd_step) at (64, 128), its parameters fed
    back from the previous step, and of the jitted per-sample gradients."""
    x, y, w = problem(64, 128)
    jitted = mf.jit(sgd_step)
    state = {"p": {k: minigrad.tensor(v) for k, v in w.items()}}
    mx, my = minigrad.tensor(x), minigrad.tensor(y)
    _, state["p"] = jitted(state["p"], mx, my)  # compiles; the parameters are outputs now

    def step() -> Any:
        _, state["p"] = jitted(state["p"], mx, my)

    return {"jit(sgd_step)": python_calls(step), "jit(vmap(grad))": python_calls(per_sample)}


def run_all(quick: bool) -> dict:
    """The three benchmarks; prints the tables and returns the figures."""
    budget = 1.0 if quick else 4.0
    ps_fns = per_sample_fns()
    faults: dict[str, float] = {}
    ps = interleaved_medians(
        ps_fns, budget, max_rounds=200, block=PER_SAMPLE_BLOCKS, faults_per_call=faults
    )
    print()
    print_table(
        "Per-sample gradients, digits MLP (64-64-10), batch 64, float32, median ms",
        *per_sample_table(ps, faults),
    )
    cache = cache_behaviour()
    print("\njit(sgd_step) compile and cache: calls in order, ms, cache entries after the call")
    for c in cache["calls"]:
        print(f"  {str(c['shape']):>12}  {c['ms']:10.3f} ms  entries {c['cache_entries']}")
    parts = cache["first_call_parts"]
    print(
        f"  first call: trace {parts['trace_s'] * 1e3:.1f} ms, lower {parts['lower_s'] * 1e3:.1f} "
        f"ms, XLA compile {parts['compile_s'] * 1e3:.1f} ms; jax.jit first / second call "
        + " / ".join(f"{ms:.3f}" for ms in cache["jax_jit_first_and_second_ms"])
        + " ms"
    )
    breakdown = per_call_breakdown(n=500 if quick else 3000)
    print("\nOne jit(sgd_step) call at (64, 128), median µs per part (each timed on its own)")
    for k, us in breakdown.items():
        print(f"  {k:>10}  {us:8.1f} µs")
    calls = jit_python_calls(ps_fns["jit(vmap(grad))"])
    print(
        "  Python functions run by one cache-hit call: "
        + ", ".join(f"{name} {n}" for name, n in calls.items())
    )
    loop_ratio = ps["loop of grad"] / ps["vmap(grad)"]
    return {
        "per_sample_ms": ps,
        "per_sample_page_faults_per_call": faults,
        "vmap_over_loop_speedup": loop_ratio,
        "cache": cache,
        "per_call_us": breakdown,
        "python_calls_per_call": calls,
    }
