"""minigrad.func against torch.func, primitive by primitive (float64, 1e-10 relative).

Every GRAD_CASES expression (they cover every primitive; test_lab checks that) runs through
vmap, jvp, jacrev, jacfwd, hessian and vmap(grad) in both libraries on the same inputs.
"""

from __future__ import annotations

import minigrad
import minigrad.nn.functional as mF
import numpy as np
import pytest
import torch
import torch.func as tf
import torch.nn.functional as tF
from minigrad import func as mf
from minigrad import rules
from minigrad_harness.scenarios import GRAD_CASES
from minigrad_harness.testing import make_inputs, relative_error, requires_grad

TOL = 1e-10
BATCH = 3
# Cases whose expression has no torch.func path, and why (each is still run in minigrad).
NO_TORCH_PATH: dict[str, str] = {}


def _setup(expr, specs, positive, seed=0):
    arrays = make_inputs(specs, seed, positive)
    diff = [i for i, s in enumerate(specs) if requires_grad(s)]

    def make(lib, F):  # noqa: N803
        consts = [lib.tensor(a) for a in arrays]

        def f(*xs):
            full = list(consts)
            for i, x in zip(diff, xs, strict=True):
                full[i] = x
            return expr(F, *full)

        return f

    return arrays, diff, make(minigrad, mF), make(torch, tF)


def _close(m, t, what):
    m = m.data if isinstance(m, minigrad.Tensor) else np.asarray(m)
    t = t.detach().numpy() if isinstance(t, torch.Tensor) else np.asarray(t)
    err = relative_error(m, t)
    assert err < TOL, f"{what}: relative error {err:.3g} against torch.func"


CASES = [c for c in GRAD_CASES if c[0] not in NO_TORCH_PATH]
IDS = [c[0] for c in CASES]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_jvp_jacrev_jacfwd_match_torch_func(case):
    _, expr, specs, positive = case
    arrays, diff, fm, ft = _setup(expr, specs, positive)
    xs = [arrays[i] for i in diff]
    rng = np.random.default_rng(1)
    ts = [rng.standard_normal(x.shape) for x in xs]
    out, tout = mf.jvp(fm, tuple(minigrad.tensor(x) for x in xs), tuple(map(minigrad.tensor, ts)))
    t_out, t_tout = tf.jvp(ft, tuple(map(torch.tensor, xs)), tuple(map(torch.tensor, ts)))
    _close(out, t_out, "jvp primal")
    _close(tout, t_tout, "jvp tangent")
    argnums = tuple(range(len(xs)))
    for name, m_jac, t_jac in (("jacrev", mf.jacrev, tf.jacrev), ("jacfwd", mf.jacfwd, tf.jacfwd)):
        mj = m_jac(fm, argnums)(*map(minigrad.tensor, xs))
        tj = t_jac(ft, argnums)(*map(torch.tensor, xs))
        for a, b in zip(mj, tj, strict=True):
            _close(a, b, name)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_vmap_hessian_and_per_example_grad_match_torch_func(case):
    _, expr, specs, positive = case
    arrays, diff, fm, ft = _setup(expr, specs, positive)
    rng = np.random.default_rng(2)
    batch = [make_inputs(specs, s, positive) for s in range(BATCH)]
    xs_b = [np.stack([b[i] for b in batch]) for i in diff]
    mv = mf.vmap(fm)(*map(minigrad.tensor, xs_b))
    tv = tf.vmap(ft)(*map(torch.tensor, xs_b))
    _close(mv, tv, "vmap")
    u = rng.standard_normal(tv.shape[1:])

    def scalar(lib, f):
        return lambda *xs: (f(*xs) * lib.tensor(u)).sum()

    m_s, t_s = scalar(minigrad, fm), scalar(torch, ft)
    mg = mf.vmap(mf.grad(m_s))(*map(minigrad.tensor, xs_b))
    tg = tf.vmap(tf.grad(t_s))(*map(torch.tensor, xs_b))
    _close(mg, tg, "vmap(grad)")
    xs = [arrays[i] for i in diff]
    mh = mf.hessian(m_s)(*map(minigrad.tensor, xs))
    th = tf.hessian(t_s)(*map(torch.tensor, xs))
    _close(mh, th, "hessian")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_vmap_with_unbatched_inputs_matches_torch_func(case):
    """One input mapped (along its last dim), the others shared (in_axes None): the rules'
    mixed batched/unbatched paths (broadcasting, matmul ranks, masks)."""
    _, expr, specs, positive = case
    arrays, diff, fm, ft = _setup(expr, specs, positive)
    xs = [arrays[i] for i in diff]
    for mapped in {0, len(xs) - 1}:
        batch = np.stack([xs[mapped] + 0.1 * k for k in range(BATCH)], axis=-1)
        args = list(xs)
        args[mapped] = batch
        axes = tuple(-1 if i == mapped else None for i in range(len(xs)))
        m = mf.vmap(fm, in_axes=axes)(*map(minigrad.tensor, args))
        t = tf.vmap(ft, in_dims=axes)(*map(torch.tensor, args))
        _close(m, t, f"vmap with input {mapped} mapped")
        # and the gradient w.r.t. the mapped input alone (a zero tangent for the others)
        u = np.random.default_rng(3).standard_normal(t.shape[1:] if t.ndim else ())
        m = mf.vmap(mf.grad(lambda *a, u=u: (fm(*a) * minigrad.tensor(u)).sum(), mapped), axes)(
            *map(minigrad.tensor, args)
        )
        t = tf.vmap(tf.grad(lambda *a, u=u: (ft(*a) * torch.tensor(u)).sum(), mapped), axes)(
            *map(torch.tensor, args)
        )
        _close(m, t, f"vmap(grad) w.r.t. mapped input {mapped}")


def test_every_primitive_has_vmap_jvp_and_lower_rules():
    import minigrad.func.stablehlo  # noqa: F401  (loads the built-in lowering rules)

    assert rules.missing("vmap") == []
    assert rules.missing("jvp") == []
    assert rules.missing("lower") == []
    # transpose rules exist exactly for the linear ops that jvp rules apply to tangents
    assert {"Add", "Mul", "MatMul", "Sum", "Gather", "Index"} <= set(
        p.__name__ for p in rules.RULES["transpose"]
    )
