"""Where minigrad behaves as torch does beyond plain gradients: error messages, dims and
comparisons, NaN routing, dtype promotion, empty tensors."""

from __future__ import annotations

import minigrad
import minigrad.nn.functional as F
import numpy as np
import pytest
import torch


def test_clear_errors_on_bad_input():
    a, b = minigrad.tensor(np.ones((3, 4))), minigrad.tensor(np.ones((5,)))
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(5,\)"):
        a + b
    with pytest.raises(ValueError, match=r"\(3, 4\).*\(5,\)"):
        a @ b
    x = minigrad.tensor(np.ones((2, 3)), requires_grad=True)
    with pytest.raises(RuntimeError, match="only for scalar outputs.*shape \\(2, 3\\)"):
        (x * 2).backward()
    with pytest.raises(RuntimeError, match=r"gradient has shape \(3,\).*\(2, 3\)"):
        (x * 2).backward(np.ones(3))
    with pytest.raises(RuntimeError, match="only floating-point"):
        minigrad.tensor([1, 2], requires_grad=True)
    with pytest.raises(ValueError, match="target shape"):
        F.cross_entropy(x, np.array([0, 1, 2]))
    assert minigrad.tensor([1.0, 2.0]).dtype == np.float32
    assert minigrad.tensor(np.zeros(2)).dtype == np.float64


def test_sigmoid_keeps_relative_accuracy_in_the_negative_tail():
    for dtype, v in [(np.float32, -20.0), (np.float64, -40.0), (np.float64, -700.0)]:
        ours = minigrad.tensor(np.array([v, -v], dtype=dtype)).sigmoid().data
        ref = torch.sigmoid(torch.tensor([v, -v], dtype=getattr(torch, dtype.__name__))).numpy()
        np.testing.assert_allclose(ours, ref, rtol=1e-6 if dtype == np.float32 else 1e-14)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        np.testing.assert_array_equal(minigrad.tensor([-1000.0, 1000.0]).sigmoid().data, [0, 1])


def test_dims_comparisons_and_truth_value_like_torch():
    x = minigrad.tensor(np.ones((2, 3)))
    for bad in (lambda: x.permute(0, 3), lambda: x.unsqueeze(3), lambda: x.unsqueeze(-4),
                lambda: x.transpose(0, 2), lambda: x.sum(dim=-3)):  # fmt: skip
        with pytest.raises(IndexError, match="Dimension out of range"):
            bad()
    assert x.unsqueeze(2).shape == (2, 3, 1) and x.unsqueeze(-3).shape == (1, 2, 3)
    assert x.permute(-1, 0).shape == (3, 2)
    t = minigrad.tensor([1.0, 2.0])
    ref = torch.tensor([1.0, 2.0])
    for op in ("__eq__", "__ne__", "__ge__", "__le__", "__gt__", "__lt__"):
        np.testing.assert_array_equal(getattr(t, op)(1.0), getattr(ref, op)(1.0).numpy())
    np.testing.assert_array_equal(t == minigrad.tensor([1.0, 0.0]), [True, False])
    assert {t: 1}[t] == 1  # still hashable by identity
    with pytest.raises(RuntimeError, match="ambiguous"):
        bool(minigrad.tensor([0.0, 0.0]))
    assert bool(minigrad.tensor([2.0])) and not bool(minigrad.tensor(0.0))


def test_max_without_dim_routes_the_gradient_to_nan_like_torch():
    for values in ([1.0, np.nan, 2.0], [1.0, np.nan, np.nan], [3.0, 1.0, 3.0]):
        for method in ("max", "amax"):  # amax leaves the gradient nan everywhere (torch)
            x = minigrad.tensor(np.array(values), requires_grad=True)
            xt = torch.tensor(values, dtype=torch.float64, requires_grad=True)
            getattr(x, method)().backward()
            getattr(xt, method)().backward()
            np.testing.assert_array_equal(x.grad.data, xt.grad.numpy(), err_msg=method)


F32 = [0.5, 1.5, 2.0]


FLOAT32_CASES = [
    ("mul_numpy_f64_scalar", lambda x, lib: x * np.float64(2.0)),
    ("div_numpy_sqrt", lambda x, lib: x / np.sqrt(4.0)),
    ("mul_0dim_f64_tensor", lambda x, lib: x * lib.tensor(np.float64(0.5))),
    ("add_0dim_f64_tensor", lambda x, lib: lib.tensor(np.float64(0.5)) + x),
    ("rpow", lambda x, lib: 2**x),
    ("rpow_numpy_scalar", lambda x, lib: np.float64(2.0) ** x),
    ("pow_numpy_scalar", lambda x, lib: x ** np.float64(3.0)),
    ("mul_int_tensor", lambda x, lib: lib.tensor([1, 2, 3]) * x),
    ("div_by_int_tensor", lambda x, lib: x / lib.tensor([1, 2, 4])),
]


@pytest.mark.parametrize("expr", [c[1] for c in FLOAT32_CASES], ids=[c[0] for c in FLOAT32_CASES])
def test_float32_graphs_stay_float32_like_torch(expr):
    """NumPy 2 promotes float32 with a NumPy float64 scalar, a 0-dim float64 array or an int64
    array to float64; torch keeps float32 (scalars and 0-dim tensors are weak, float beats
    int). Outputs and gradients, first order and create_graph, must have torch's dtypes."""
    x = minigrad.tensor(np.array(F32, dtype=np.float32), requires_grad=True)
    xt = torch.tensor(F32, requires_grad=True)
    y, yt = expr(x, minigrad), expr(xt, torch)
    assert y.dtype == np.float32 and yt.dtype == torch.float32
    np.testing.assert_allclose(y.data, yt.detach().numpy(), rtol=1e-6)
    (g,) = minigrad.grad((y * y).sum(), x, create_graph=True)
    (gt,) = torch.autograd.grad((yt * yt).sum(), xt, create_graph=True)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g.data, gt.detach().numpy(), rtol=1e-5)
    (h,) = minigrad.grad(g.sum(), x)  # the recorded backward stays float32 as well
    (ht,) = torch.autograd.grad(gt.sum(), xt)
    assert h.dtype == np.float32
    np.testing.assert_allclose(h.data, ht.numpy(), rtol=1e-5, atol=1e-6)
    y = expr(x, minigrad)  # the second-order grad above freed the graph
    (y * y).sum().backward(create_graph=True)
    assert x.grad.dtype == np.float32


def test_mixed_dtype_gradients_come_back_in_each_inputs_dtype():
    x = minigrad.tensor(np.array(F32, dtype=np.float32), requires_grad=True)
    s = minigrad.tensor(np.float64(0.5), requires_grad=True)
    xt = torch.tensor(F32, requires_grad=True)
    st = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    for create_graph in (False, True):
        x.grad = s.grad = xt.grad = st.grad = None
        y, yt = (x * s + s).sum(), (xt * st + st).sum()
        assert y.dtype == np.float32 and yt.dtype == torch.float32
        y.backward(create_graph=create_graph)
        yt.backward(create_graph=create_graph)
        assert (x.grad.dtype, s.grad.dtype) == (np.float32, np.float64)
        np.testing.assert_allclose(s.grad.data, st.grad.detach().numpy(), rtol=1e-6)
        np.testing.assert_allclose(x.grad.data, xt.grad.detach().numpy(), rtol=1e-6)
    i = minigrad.tensor([1, 2, 3])
    assert (i / 2).dtype == (torch.tensor([1, 2, 3]) / 2).numpy().dtype == np.float32
    assert (i * 0.5).dtype == np.float32 and (i * 2).dtype == np.int64
    assert (i * minigrad.tensor(np.float64(0.5))).dtype == np.float64  # as torch: 0-dim float
    y = minigrad.tensor(np.array(F32, dtype=np.float32), requires_grad=True) * 3
    z = minigrad.tensor(np.ones(3), requires_grad=True)
    (y.double() * z).sum().backward()  # a float64 gradient reaches y's float32 graph ...
    assert y.grad_fn.next_edges[0].grad.dtype == np.float32  # ... and is cast back (Cast)


NO_TARGETS = np.zeros(0, np.int64)


@pytest.mark.parametrize(
    "expr,shape",
    [
        (lambda F, x: F.softmax(x, dim=-1), (3, 0)),
        (lambda F, x: F.log_softmax(x, dim=1), (3, 0)),
        (lambda F, x: x.max(dim=1)[0], (0, 3)),
        (lambda F, x: x.amax(dim=1), (0, 3)),
        (lambda F, x: F.cross_entropy(x, _target(F, NO_TARGETS)), (0, 4)),  # nan, as torch
        (lambda F, x: F.cross_entropy(x, _target(F, NO_TARGETS), reduction="sum"), (0, 4)),
    ],
    ids=["softmax", "log_softmax", "max_dim", "amax_dim", "cross_entropy", "cross_entropy_sum"],
)
def test_empty_tensors_like_torch(expr, shape):
    x = minigrad.tensor(np.zeros(shape), requires_grad=True)
    xt = torch.zeros(shape, dtype=torch.float64, requires_grad=True)
    y, yt = expr(F, x), expr(torch.nn.functional, xt)
    assert y.shape == tuple(yt.shape)
    np.testing.assert_array_equal(y.data, yt.detach().numpy())
    y.backward(np.ones(y.shape))
    yt.backward(torch.ones(yt.shape, dtype=torch.float64))
    np.testing.assert_array_equal(x.grad.data, xt.grad.numpy())
    with pytest.raises(ValueError, match="reduction dim 0 has size 0"):
        minigrad.tensor(np.zeros((0, 3))).max(dim=0)


def _target(lib_f, t):
    return torch.from_numpy(t) if lib_f is torch.nn.functional else t


def test_matmul_refuses_mixed_dtypes_like_torch():
    a32 = np.ones((2, 3), np.float32)
    b64 = np.ones((3, 2))
    with pytest.raises(RuntimeError, match="same dtype"):
        torch.from_numpy(a32) @ torch.from_numpy(b64)
    with pytest.raises(RuntimeError, match="same dtype, but got: float32 != float64"):
        minigrad.tensor(a32, requires_grad=True) @ minigrad.tensor(b64)
    layer = minigrad.nn.Linear(3, 2)  # float32 weights, as torch.nn.Linear
    with pytest.raises(RuntimeError, match="same dtype"):
        layer(minigrad.tensor(np.ones((1, 3))))  # a float64 input
    assert layer(minigrad.tensor(a32[:1])).dtype == np.float32


@pytest.mark.parametrize("op", ["exp", "log", "tanh", "sigmoid", "sqrt", "rsqrt"])
def test_float_unary_ops_of_integer_tensors_give_float32_like_torch(op):
    for dtype in (np.int64, np.int32, np.bool_):
        a = np.array([1, 2, 0]).astype(dtype)
        ours = (
            minigrad.rsqrt(minigrad.tensor(a))
            if op == "rsqrt"
            else getattr(minigrad.tensor(a), op)()
        )
        theirs = getattr(torch.tensor(a), op)()
        assert ours.dtype == np.float32 and theirs.dtype == torch.float32, dtype
        with np.errstate(divide="ignore"):
            np.testing.assert_allclose(ours.data, theirs.numpy(), rtol=1e-6)


def test_zero_variance_std_and_fully_ignored_cross_entropy_have_torchs_zero_gradient():
    # sqrt's backward at 0 is inf, and inf * 0 is nan; torch's std and nll_loss give 0 there
    x = np.random.default_rng(4).standard_normal((2, 3))
    constant_rows = np.array([[2.0, 2.0, 2.0], [0.5, 0.5, 0.5]])
    cases = [
        (lambda m, a: a.std(dim=0, correction=0), x[:1]),
        (lambda m, a: m.std(a, dim=1, keepdim=True) * 3, constant_rows),
        (lambda m, a: m.nn.functional.cross_entropy(a, m.tensor(np.array([-100, -100]))), x),
    ]
    for f, data in cases:
        outs, grads = [], []
        for lib in (minigrad, torch):
            a = lib.tensor(data, requires_grad=True)
            out = f(lib, a)
            out.sum().backward()
            outs.append(np.asarray(out.detach().numpy() if lib is torch else out.data))
            grads.append(a.grad.numpy() if lib is torch else a.grad.data)
        np.testing.assert_array_equal(outs[0], outs[1])  # nan where torch has nan
        assert np.all(np.isfinite(grads[1]))
        np.testing.assert_allclose(grads[0], grads[1], rtol=1e-12, atol=1e-15)
    # but valid rows whose class weights sum to 0 give nan gradients in torch, and here
    for lib in (minigrad, torch):
        a = lib.tensor(x, requires_grad=True)
        w = lib.tensor(np.array([1.0, 0.0, 2.0]))
        lib.nn.functional.cross_entropy(a, lib.tensor(np.array([1, 1])), weight=w).backward()
        assert np.all(np.isnan(np.asarray(a.grad.data if lib is minigrad else a.grad)))
