"""minigrad.func on the lab's digits MLP (64-64-10, ReLU, cross-entropy), float64, against
torch.func: per-sample gradients (vmap(grad)), vmap, jvp, jacrev, jacfwd, hessian."""

from __future__ import annotations

import minigrad
import minigrad.nn.functional as mF
import numpy as np
import pytest
import torch
import torch.func as tf
import torch.nn.functional as tF
from minigrad import func as mf
from minigrad_harness.digits_mlp import initial_weights, load_digits_split
from minigrad_harness.testing import relative_error

TOL = 1e-10


def mlp(F, p, x):  # noqa: N803
    h = F.relu(F.linear(x, p["0.weight"], p["0.bias"]))
    return F.linear(h, p["2.weight"], p["2.bias"])


def loss(F, p, x, y):  # noqa: N803
    return F.cross_entropy(mlp(F, p, x), y)


@pytest.fixture(scope="module")
def problem():
    data = load_digits_split()
    x, y = data.x_train[:64].astype(np.float64), data.y_train[:64]
    w = {k: v.astype(np.float64) for k, v in initial_weights().items()}
    m = ({k: minigrad.tensor(v) for k, v in w.items()}, minigrad.tensor(x), minigrad.tensor(y))
    t = ({k: torch.tensor(v) for k, v in w.items()}, torch.tensor(x), torch.tensor(y))
    return m, t


def close(m, t, what):
    err = relative_error(m.data, t.detach().numpy())
    assert err < TOL, f"{what}: {err:.3g}"


def test_per_sample_gradients_match_torch_func(problem):
    (mp, mx, my), (tp, tx, ty) = problem

    def per_example(F, lib):  # noqa: N803
        return lambda p, x, y: loss(F, p, x[None], y[None])

    m = mf.vmap(mf.grad(per_example(mF, minigrad)), in_axes=(None, 0, 0))(mp, mx, my)
    t = tf.vmap(tf.grad(per_example(tF, torch)), in_dims=(None, 0, 0))(tp, tx, ty)
    for k in tp:
        assert m[k].shape == (64,) + tuple(tp[k].shape)
        close(m[k], t[k], f"per-sample gradient of {k}")
    # and their mean is the full-batch gradient
    full = mf.grad(lambda p: loss(mF, p, mx, my))(mp)
    for k in tp:
        assert relative_error(m[k].data.mean(0), full[k].data) < 1e-9


def test_vmap_jvp_jacobians_and_hessian_match_torch_func(problem):
    (mp, mx, my), (tp, tx, ty) = problem
    close(mf.vmap(lambda x: mlp(mF, mp, x))(mx), tf.vmap(lambda x: mlp(tF, tp, x))(tx), "vmap")
    tangent = np.random.default_rng(0).standard_normal(tx.shape)
    mo, mt = mf.jvp(lambda x: mlp(mF, mp, x), (mx,), (minigrad.tensor(tangent),))
    to, tt = tf.jvp(lambda x: mlp(tF, tp, x), (tx,), (torch.tensor(tangent),))
    close(mo, to, "jvp primal")
    close(mt, tt, "jvp tangent")
    x4m, x4t = mx[:4], tx[:4]
    for name, mj, tj in (("jacrev", mf.jacrev, tf.jacrev), ("jacfwd", mf.jacfwd, tf.jacfwd)):
        close(mj(lambda x: mlp(mF, mp, x))(x4m), tj(lambda x: mlp(tF, tp, x))(x4t), name)

    def loss_of(F, p, x, y):  # noqa: N803
        return lambda b: loss(F, {**p, "2.bias": b}, x, y)

    mh = mf.hessian(loss_of(mF, mp, mx, my))(mp["2.bias"])
    th = tf.hessian(loss_of(tF, tp, tx, ty))(tp["2.bias"])
    close(mh, th, "hessian w.r.t. the output bias")
