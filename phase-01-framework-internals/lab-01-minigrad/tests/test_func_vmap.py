"""vmap's semantics (torch.func's): in_axes/out_axes, pytrees, nesting, user Functions,
randomness, and the compositions vmap(grad), vmap(jvp), jacfwd(jacrev), grad(grad)."""

from __future__ import annotations

import importlib
import warnings

import minigrad
import minigrad.nn.functional as mF
import numpy as np
import pytest
import torch
import torch.func as tf
from minigrad import func as mf
from minigrad_harness.scenarios import Swish
from minigrad_harness.testing import relative_error

TOL = 1e-10
rng = np.random.default_rng(0)


def close(m, t, tol=TOL):
    t = t.detach().numpy() if isinstance(t, torch.Tensor) else t
    assert relative_error(m.data, t) < tol


def test_in_axes_none_and_nonzero_and_out_axes():
    x, w = rng.standard_normal((4, 3, 5)), rng.standard_normal((4, 2))

    def f(lib):
        return lambda x, w: x.sum(0).tanh()[:2] * w[0]

    m = mf.vmap(f(minigrad), in_axes=(2, None), out_axes=1)(minigrad.tensor(x), minigrad.tensor(w))
    t = tf.vmap(f(torch), in_dims=(2, None), out_dims=1)(torch.tensor(x), torch.tensor(w))
    assert m.shape == tuple(t.shape) == (2, 5)
    close(m, t)


def test_pytrees_in_and_out():
    params = {"w": rng.standard_normal((3, 2)), "b": rng.standard_normal(2)}
    xs = [rng.standard_normal((6, 3)), rng.standard_normal((6, 3))]

    def f(p, pair):
        y = (pair[0] + pair[1]) @ p["w"] + p["b"]
        return {"y": y, "n": (y * y).sum()}

    m_params = {k: minigrad.tensor(v) for k, v in params.items()}
    t_params = {k: torch.tensor(v) for k, v in params.items()}
    m = mf.vmap(f, in_axes=({"w": None, "b": None}, 0))(m_params, [minigrad.tensor(x) for x in xs])
    t = tf.vmap(f, in_dims=({"w": None, "b": None}, 0))(t_params, [torch.tensor(x) for x in xs])
    close(m["y"], t["y"])
    close(m["n"], t["n"])


def test_nested_vmap_is_an_outer_product():
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((5, 4))
    inner = mf.vmap(lambda x, y: (x * y).sum(), in_axes=(None, 0))
    m = mf.vmap(inner, in_axes=(0, None))(minigrad.tensor(a), minigrad.tensor(b))
    close(m, a @ b.T)


def test_user_function_without_batching_rule_loops_with_one_warning():
    x = rng.standard_normal((4, 3))
    importlib.import_module("minigrad.func.vmap")._warned.discard(Swish)  # a fresh process
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out1 = mf.vmap(Swish.apply)(minigrad.tensor(x))
        out2 = mf.vmap(Swish.apply)(minigrad.tensor(x))
    named = [w for w in caught if "Swish" in str(w.message)]
    assert len(named) == 1  # once, not once per call
    expected = x / (1 + np.exp(-x))
    assert relative_error(out1.data, expected) < TOL and relative_error(out2.data, expected) < TOL


def test_randomness_error_and_same():
    x = minigrad.tensor(rng.standard_normal((4, 6)))
    with pytest.raises(RuntimeError, match="randomness='same'"):
        mf.vmap(lambda v: mF.dropout(v, 0.5))(x)
    with pytest.raises(RuntimeError, match="randn"):
        mf.vmap(lambda v: v + minigrad.randn(6, dtype=np.float64))(x)
    out = mf.vmap(lambda v: mF.dropout(v, 0.5), randomness="same")(x)
    kept = (out.data != 0) == (out.data[0] != 0)  # one mask for every example
    assert kept.all()


def test_data_dependent_branch_and_shape_are_clear_errors():
    x = minigrad.tensor(rng.standard_normal(5))
    with pytest.raises(mf.TracingError, match="data-dependent"):
        mf.vmap(lambda v: v * 2 if v.sum() > 0 else v)(minigrad.tensor(rng.standard_normal((2, 5))))
    with pytest.raises(mf.TracingError, match="Index"):
        mf.grad(lambda v: v[v > 0].sum())(x)


def _torch_and_minigrad(fn_m, fn_t, *arrays):
    return fn_m(*map(minigrad.tensor, arrays)), fn_t(*map(torch.tensor, arrays))


def test_compositions_agree_with_torch_func():
    x, v = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))

    f_m = lambda x: (x.tanh() * x).sum()  # noqa: E731
    f_t = lambda x: (torch.tanh(x) * x).sum()  # noqa: E731
    # jacfwd(jacrev(f)) is the Hessian
    m, t = _torch_and_minigrad(mf.jacfwd(mf.jacrev(f_m)), tf.jacfwd(tf.jacrev(f_t)), x)
    close(m, t)
    # vmap(jvp(...)): a batch of directional derivatives
    g_m = lambda t_: mf.jvp(lambda y: y.tanh() * y, (minigrad.tensor(x[0]),), (t_,))[1]  # noqa: E731
    g_t = lambda t_: tf.jvp(lambda y: torch.tanh(y) * y, (torch.tensor(x[0]),), (t_,))[1]  # noqa: E731
    m, t = _torch_and_minigrad(mf.vmap(g_m), tf.vmap(g_t), v)
    close(m, t)
    # grad(grad(f)) on a scalar
    s = np.array(0.7)
    m, t = _torch_and_minigrad(
        mf.grad(mf.grad(lambda y: y.tanh() * y.exp())),
        tf.grad(tf.grad(lambda y: torch.tanh(y) * torch.exp(y))),
        s,
    )
    close(m, t)


def test_grad_argnums_and_has_aux():
    x, w = rng.standard_normal(3), rng.standard_normal(3)

    def f(lib):
        def loss(x, w):
            y = (x * w).sum()
            return y * y, y

        return loss

    (gx, gw), aux = mf.grad(f(minigrad), argnums=(0, 1), has_aux=True)(
        minigrad.tensor(x), minigrad.tensor(w)
    )
    (tx, tw), taux = tf.grad(f(torch), argnums=(0, 1), has_aux=True)(
        torch.tensor(x), torch.tensor(w)
    )
    close(gx, tx)
    close(gw, tw)
    close(aux, taux)
    with pytest.raises(RuntimeError, match="one-element"):
        mf.grad(lambda x: x * 2)(minigrad.tensor(x))


def test_transformations_import_numpy_only():
    """TensorFlow is jit's optional dependency: importing minigrad.func must not load it."""
    import subprocess
    import sys

    code = (
        "import sys, minigrad, minigrad.func; "
        "print(sorted(m for m in ('tensorflow', 'torch', 'scipy', 'jax') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_hessian_over_two_arguments_is_output_major_like_torch():
    x, w = rng.standard_normal(3), rng.standard_normal(3)
    m = mf.hessian(lambda x, w: (x.tanh() * w * x).sum(), argnums=(0, 1))(
        minigrad.tensor(x), minigrad.tensor(w)
    )
    t = tf.hessian(lambda x, w: (torch.tanh(x) * w * x).sum(), argnums=(0, 1))(
        torch.tensor(x), torch.tensor(w)
    )
    for i in range(2):
        for j in range(2):
            close(m[i][j], t[i][j])


# Each op whose index / mask / target argument is mapped: the trace once froze these to the
# first example's value (``.data`` of the tracer), so vmap returned example 0's indices for
# every example. in_axes on a non-first dim as well.
_IX = rng.integers(0, 4, (3, 2, 5))
_X = rng.standard_normal((3, 4, 5))
_MAPPED_INDEX_CASES = {
    "gather": (lambda L: lambda a, i: L.gather(a, 1, i), (_X, _IX), (2, 2)),
    "gather_index_only": (lambda L: lambda a, i: L.gather(a, 1, i), (_X[:, :, 0], _IX), (None, 2)),
    "index_select": (
        lambda L: lambda a, i: L.index_select(a, 1, i),
        (_X, rng.integers(0, 4, (3, 5))),
        (2, 1),
    ),
    "embedding": (
        lambda L: lambda w, i: L.nn.functional.embedding(i, w),
        (_X[0], _IX[:, :, 0] % 4),
        (None, 1),
    ),
    "where": (lambda L: lambda c, a: L.where(c, a, 0.0), (_X > 0, _X[0]), (0, None)),
    "masked_fill": (lambda L: lambda a, m: a.masked_fill(m, -1.0), (_X[0], _X > 0), (None, 0)),
    "cross_entropy_none": (
        lambda L: lambda a, t: L.nn.functional.cross_entropy(a, t, reduction="none"),
        (_X, rng.integers(0, 4, (3, 5))),
        (2, 1),
    ),
    "cross_entropy_probs": (
        lambda L: lambda a, p: L.nn.functional.cross_entropy(a, p),
        (_X, np.abs(_X) / np.abs(_X).sum(1, keepdims=True)),
        (2, 2),
    ),
}


@pytest.mark.parametrize("name", list(_MAPPED_INDEX_CASES))
def test_vmap_and_vmap_grad_over_mapped_indices_masks_and_targets(name):
    make, args, axes = _MAPPED_INDEX_CASES[name]
    m_args = [minigrad.tensor(a) for a in args]
    t_args = [torch.tensor(a) for a in args]
    close(
        mf.vmap(make(minigrad), in_axes=axes)(*m_args), tf.vmap(make(torch), in_dims=axes)(*t_args)
    )
    argnum = 1 if name == "where" else 0  # the float input

    def m_loss(*a):
        return make(minigrad)(*a).sum()

    def t_loss(*a):
        return make(torch)(*a).sum()

    m = mf.vmap(mf.grad(m_loss, argnums=argnum), in_axes=axes)(*m_args)
    t = tf.vmap(tf.grad(t_loss, argnums=argnum), in_dims=axes)(*t_args)
    close(m, t)


def test_indexing_with_a_traced_tensor_inside_a_tuple_key_is_an_error_not_a_frozen_index():
    x, idx = (
        minigrad.tensor(rng.standard_normal((3, 4))),
        minigrad.tensor(np.array([[0, 1], [2, 3]])),
    )
    with pytest.raises(minigrad.tracing.TracingError, match="indexing with a traced tensor"):
        mf.vmap(lambda a, i: a[:, i], in_axes=(None, 0))(x, idx)


_ARG_EXTREMES = {
    "max_dim_indices": lambda a: a.max(0).indices,
    "max_keepdim_indices": lambda a: a.max(-1, keepdim=True)[1],
    "min_dim_indices": lambda a: a.min(0).indices,
    "argmax_all": lambda a: a.argmax(),
    "argmax_keepdim": lambda a: a.argmax(1, keepdim=True),
    "argmin_all": lambda a: a.argmin(),
}


@pytest.mark.parametrize("name", list(_ARG_EXTREMES))
def test_vmap_of_argmax_and_max_indices_is_per_example(name):
    # the indices were computed with NumPy from the traced example, so every example got
    # example 0's arg-max
    f, x = _ARG_EXTREMES[name], rng.standard_normal((3, 4, 5))
    for axis in (0, 2):
        m = mf.vmap(f, in_axes=axis)(minigrad.tensor(x))
        t = tf.vmap(f, in_dims=axis)(torch.tensor(x))
        assert m.dtype == np.int64 and np.array_equal(m.data, t.numpy()), axis


def test_jacrev_has_aux_like_torch_func():
    a, b = rng.standard_normal(3), rng.standard_normal(3)

    def f(lib):
        return lambda x, y: ((x.tanh() * y), {"double": x * 2})

    (jm, jm_y), aux_m = mf.jacrev(f(minigrad), argnums=(0, 1), has_aux=True)(
        minigrad.tensor(a), minigrad.tensor(b)
    )
    (jt, jt_y), aux_t = tf.jacrev(f(torch), argnums=(0, 1), has_aux=True)(
        torch.tensor(a), torch.tensor(b)
    )
    close(jm, jt)
    close(jm_y, jt_y)
    close(aux_m["double"], aux_t["double"])


def test_vmap_cross_entropy_with_ignored_labels_in_some_examples():
    # the path was chosen from the traced (first) example's labels
    x = rng.standard_normal((4, 3))
    labels = np.array([[0, 1, 2, 1], [0, -100, 2, -100]])

    def f(lib):
        return lambda a, t: lib.nn.functional.cross_entropy(a, t)

    m = mf.vmap(f(minigrad), in_axes=(None, 0))(minigrad.tensor(x), minigrad.tensor(labels))
    t = tf.vmap(f(torch), in_dims=(None, 0))(torch.tensor(x), torch.tensor(labels))
    close(m, t)


def test_in_place_ops_inside_transformations_are_recorded_like_torch_func():
    # they used to run NumPy on the traced example's array and record nothing: vmap/grad/jit
    # silently dropped the update
    x = rng.standard_normal((2, 3))

    def f(a):
        b = a * 2
        b += 1
        b.mul_(a)
        b /= 3
        return b

    close(mf.vmap(f)(minigrad.tensor(x)), tf.vmap(f)(torch.tensor(x)))
    g = mf.grad(lambda a: f(a).sum())(minigrad.tensor(x))
    close(g, tf.grad(lambda a: f(a).sum())(torch.tensor(x)))
    for refused in (lambda a: a[0].add_(1), lambda a: (a * 1).zero_()):
        with pytest.raises(minigrad.tracing.TracingError, match="inside a transformation"):
            mf.vmap(refused)(minigrad.tensor(x))


def test_detach_inside_vmap_and_jit_is_per_example_and_per_call():
    # detach returned a plain tensor of the traced example's values: a constant
    x = rng.standard_normal((2, 3))

    def f(a):
        return a.detach() * a.tanh()

    close(mf.vmap(f)(minigrad.tensor(x)), tf.vmap(f)(torch.tensor(x)))
    close(
        mf.vmap(mf.grad(lambda a: f(a).sum()))(minigrad.tensor(x)),
        tf.vmap(tf.grad(lambda a: f(a).sum()))(torch.tensor(x)),
    )
    close(
        mf.jvp(f, (minigrad.tensor(x),), (minigrad.tensor(x),))[1],
        tf.jvp(f, (torch.tensor(x),), (torch.tensor(x),))[1],
    )
