"""The report's minigrad.func part: per-sample gradients against torch.func, the rule tables,
a printed IR and StableHLO text, and (without --quick) the jitted training step and what
XLA made of it."""

from __future__ import annotations

import re

import minigrad
import minigrad.nn.functional as F
import numpy as np
from minigrad import func as mf
from minigrad import rules
from phase01_common.report import Check

from minigrad_harness.digits_mlp import initial_weights, load_digits_split
from minigrad_harness.testing import relative_error


def mlp_loss(F, p, x, y):  # noqa: N803  (either library's functional namespace)
    h = F.relu(F.linear(x, p["0.weight"], p["0.bias"]))
    return F.cross_entropy(F.linear(h, p["2.weight"], p["2.bias"]), y)


def small_example() -> tuple[str, str]:
    """The IR of grad(f) for f(w) = sum(tanh(w) * w), and f's StableHLO (float32)."""
    f = lambda w: (w.tanh() * w).sum()  # noqa: E731
    ir = mf.make_ir(mf.grad(f))(np.ones(3))
    text = mf.to_stablehlo(f)(np.ones(3, np.float32))
    return str(ir), text


def per_sample_check() -> tuple[Check, float]:
    import torch
    import torch.func as tf
    import torch.nn.functional as tF

    data = load_digits_split()
    x, y = data.x_train[:64].astype(np.float64), data.y_train[:64]
    w = {k: v.astype(np.float64) for k, v in initial_weights().items()}

    def one(F, lib):  # noqa: N803
        return lambda p, xi, yi: mlp_loss(F, p, xi[None], yi[None])

    mp = {k: minigrad.tensor(v) for k, v in w.items()}
    tp = {k: torch.tensor(v) for k, v in w.items()}
    m = mf.vmap(mf.grad(one(F, minigrad)), in_dims=(None, 0, 0))(
        mp, minigrad.tensor(x), minigrad.tensor(y)
    )
    t = tf.vmap(tf.grad(one(tF, torch)), in_dims=(None, 0, 0))(tp, torch.tensor(x), torch.tensor(y))
    err = max(relative_error(m[k].data, t[k].numpy()) for k in w)
    check = Check(
        "per-sample gradients of the digits MLP (vmap(grad), batch 64) equal torch.func's",
        err < 1e-10,
        f"max rel. err {err:.1e} (limit 1e-10)",
    )
    return check, err


def rule_checks() -> list[Check]:
    import minigrad.func.stablehlo  # noqa: F401  (registers the lowering rules)

    checks = []
    for kind in ("vmap", "jvp", "lower"):
        missing = rules.missing(kind)
        checks.append(
            Check(
                f"every primitive has a {kind!r} rule",
                not missing,
                f"{len(rules.PRIMITIVES) - len(missing)}/{len(rules.PRIMITIVES)}",
                ", ".join(missing),
            )
        )
    return checks


def jit_step_check() -> tuple[Check, str]:
    """The jitted MLP training step against eager minigrad (float32), and XLA's fusions."""
    data = load_digits_split()
    x, y = minigrad.tensor(data.x_train), minigrad.tensor(data.y_train)
    params = {k: minigrad.tensor(v) for k, v in initial_weights().items()}

    def step(p, x, y):
        grads, loss = mf.grad_and_value(lambda q: mlp_loss(F, q, x, y))(p)
        return loss, {k: p[k] - 0.5 * grads[k] for k in p}

    jitted = mf.jit(step)
    loss, new = jitted(params, x, y)
    e_loss, e_new = step(params, x, y)
    err = max(
        float(np.max(np.abs(new[k].data - e_new[k].data)) / np.max(np.abs(e_new[k].data)))
        for k in params
    )
    err = max(err, abs(float(loss.data) - float(e_loss.data)) / abs(float(e_loss.data)))
    entry = next(iter(jitted.cache.values()))
    hlo = entry.optimized_hlo()
    entry_lines = hlo[hlo.index("ENTRY") :].splitlines()
    fusions = [ln.split("=")[0].strip() for ln in entry_lines if " fusion(" in ln]
    dots = sum(1 for ln in entry_lines if re.search(r" dot\(", ln))
    summary = (
        f"IR: {len(entry.ir.eqns)} equations -> StableHLO: {entry.text.count('stablehlo.')} ops "
        f"-> XLA optimized HLO: {dots} dot(s) + {len(fusions)} fusion(s): {', '.join(fusions)}\n"
        f"XLA compile time {entry.compile_seconds:.2f} s (trace {entry.trace_seconds:.2f} s, "
        f"lower {entry.lower_seconds:.2f} s)"
    )
    check = Check(
        "jit(training step) (StableHLO run by XLA on PJRT) equals eager minigrad, float32",
        err < 1e-5,
        f"max rel. err {err:.1e} (limit 1e-5)",
    )
    return check, summary
