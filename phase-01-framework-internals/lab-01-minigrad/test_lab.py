"""Lab 01 acceptance suite: minigrad against PyTorch (the oracle).

1. gradient checks, one or more per Function subclass, vs torch and vs finite differences
2. a 2-layer MLP on load_digits, trained in minigrad and torch from the same weights
3. engine semantics: no_grad, accumulation, retain_graph, version counter, deep chains
4. second order: create_graph, Hessian-vector products, gradgradcheck

Run: ``python test_lab.py`` (in this folder) or ``pytest test_lab.py``.
"""

from __future__ import annotations

import sys

import minigrad
import minigrad.nn.functional as F
import numpy as np
import pytest
import torch
from minigrad import rules
from minigrad.cases import GRAD_CASES, GRADGRAD_CASES, SECOND_ORDER_CASES, TOL
from minigrad.digits_mlp import (
    curve_relative_difference,
    initial_weights,
    load_digits_split,
    train_minigrad,
    train_torch,
)
from minigrad.testing import (
    compare_with_torch,
    make_inputs,
    primitives_in_graph,
    relative_error,
    requires_grad,
    second_order_with_torch,
)


# ----------------------------------------------------------------------------- 1. gradients
@pytest.mark.parametrize(
    "expr,specs,positive", [c[1:] for c in GRAD_CASES], ids=[c[0] for c in GRAD_CASES]
)
def test_gradient_matches_torch_and_finite_differences(expr, specs, positive):
    result = compare_with_torch(expr, *specs, positive=positive)
    assert result.output_error < TOL, f"forward differs from torch: {result.output_error:.3g}"
    assert max(result.grad_errors) < TOL, f"gradients differ from torch: {result.grad_errors}"
    assert result.gradcheck_passed


def test_every_primitive_has_a_gradient_check():
    """The cases above exercise every registered Function subclass (IndexBackward and SumTo
    run inside first-order backward; their own backward is checked in the second-order part)."""

    covered: set[str] = set()
    for _, expr, specs, positive in GRAD_CASES:
        arrays = make_inputs(specs, 0, positive)
        xs = [
            minigrad.Tensor(a, requires_grad=requires_grad(s))
            for a, s in zip(arrays, specs, strict=True)
        ]
        covered |= primitives_in_graph(expr(F, *xs))
    missing = set(rules.PRIMITIVES) - covered - {"IndexBackward", "SumTo"}
    assert not missing, f"primitives without a gradient check: {sorted(missing)}"
    assert len(covered) >= 15


class Swish(minigrad.Function):
    """x * sigmoid(x), written exactly like a torch.autograd.Function."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x.sigmoid()

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        # Recomputed from the saved *input*, so create_graph differentiates through it.
        s = x.sigmoid()
        return grad_output * (s + x * s * (1 - s))


class SwishSavingSigmoid(minigrad.Function):
    """Saves sigmoid(x) from forward: fine for first order, but that tensor was made under
    no_grad, so it is a constant to create_graph and the second derivative comes out wrong
    (in torch too). gradgradcheck must catch it."""

    @staticmethod
    def forward(ctx, x):
        s = x.sigmoid()
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    def backward(ctx, grad_output):
        x, s = ctx.saved_tensors
        return grad_output * (s + x * s * (1 - s))


def test_custom_function_like_torch():
    x = minigrad.tensor(np.random.default_rng(0).standard_normal(6), requires_grad=True)
    assert type(x.data) is np.ndarray and x.dtype == np.float64
    assert minigrad.gradcheck(Swish.apply, (x,))
    assert minigrad.gradgradcheck(Swish.apply, (x,))
    y = Swish.apply(x)
    assert type(y.grad_fn).__name__ == "SwishBackward"
    xt = torch.tensor(x.data, requires_grad=True)
    y.backward(np.ones(6))
    torch.nn.functional.silu(xt).backward(torch.ones(6))
    assert np.max(np.abs(x.grad.data - xt.grad.numpy())) < 1e-12

    assert minigrad.gradcheck(SwishSavingSigmoid.apply, (x,))
    with pytest.raises(minigrad.GradcheckError):
        minigrad.gradgradcheck(SwishSavingSigmoid.apply, (x,))


def test_rule_table_hook_beside_each_op():
    """A new per-primitive rule kind plugs in without touching the engine."""
    kind = "test-flops"

    @rules.register(kind, minigrad.ops.MatMul)
    def matmul_flops(a_shape, b_shape):
        return 2 * a_shape[0] * a_shape[1] * b_shape[1]

    assert rules.get(kind, minigrad.ops.MatMul)((3, 4), (4, 5)) == 120
    assert "Add" in rules.missing(kind)
    with pytest.raises(NotImplementedError, match="no 'test-flops' rule.*Add"):
        rules.get(kind, minigrad.ops.Add)
    del rules.RULES[kind]


# ----------------------------------------------------------------------------- 2. MLP
@pytest.fixture(scope="module")
def digits_runs():
    data = load_digits_split()
    weights = initial_weights()
    return train_minigrad(data, weights), train_torch(data, weights)


def test_mlp_loss_decreases_every_step(digits_runs):
    ours, _ = digits_runs
    assert len(ours.losses) == 100
    steps_up = [i for i in range(1, 100) if not ours.losses[i] < ours.losses[i - 1]]
    assert not steps_up, f"loss did not decrease at steps {steps_up}"


def test_mlp_held_out_accuracy(digits_runs):
    ours, _ = digits_runs
    assert ours.test_accuracy >= 0.90


def test_mlp_matches_torch_curve(digits_runs):
    ours, theirs = digits_runs
    assert curve_relative_difference(ours.losses, theirs.losses) < 1e-5


@pytest.mark.parametrize(
    "make_opts",
    [
        lambda lib, ps: lib.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
        lambda lib, ps: lib.Adam(ps, lr=0.05, weight_decay=0.01),
    ],
    ids=["sgd_momentum_wd", "adam"],
)
def test_optimizers_match_torch(make_opts):
    data, weights = load_digits_split(), initial_weights(hidden=16)
    x, y = data.x_train[:64].astype(np.float64), data.y_train[:64]
    f64 = np.float64
    ours = minigrad.nn.Sequential(
        minigrad.nn.Linear(64, 16, dtype=f64),
        minigrad.nn.ReLU(),
        minigrad.nn.Linear(16, 10, dtype=f64),
    )
    ours.load_state_dict(weights)
    theirs = torch.nn.Sequential(torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))
    theirs.load_state_dict({k: torch.tensor(v, dtype=torch.float64) for k, v in weights.items()})
    theirs.double()
    opt_ours = make_opts(minigrad.optim, list(ours.parameters()))
    opt_theirs = make_opts(torch.optim, list(theirs.parameters()))
    for _ in range(5):
        for model, opt, lib_x, lib_y, lib_f in (
            (ours, opt_ours, minigrad.tensor(x), minigrad.tensor(y), F),
            (theirs, opt_theirs, torch.tensor(x), torch.tensor(y), torch.nn.functional),
        ):
            opt.zero_grad()
            lib_f.cross_entropy(model(lib_x), lib_y).backward()
            opt.step()
    state = theirs.state_dict()
    for name, value in ours.state_dict().items():
        assert np.max(np.abs(value - state[name].numpy())) < 1e-10, name


# ----------------------------------------------------------------------------- 3. engine
def test_no_grad_builds_no_graph():
    x = minigrad.tensor([1.0, 2.0], requires_grad=True)
    with minigrad.no_grad():
        y = (x * x).exp().sum()
        with minigrad.enable_grad():
            z = x * 2
    assert y.grad_fn is None and not y.requires_grad
    assert z.grad_fn is not None
    assert (x * 2).grad_fn is not None


def test_leaves_accumulate_across_backward_calls():
    x = minigrad.tensor([1.0, -2.0, 3.0], requires_grad=True)
    (x * x).sum().backward()
    (x * 3).sum().backward()
    np.testing.assert_allclose(x.grad.data, 2 * x.data + 3)
    y = x * x  # the same leaf reached through two paths in one graph
    (y + x).sum().backward()
    np.testing.assert_allclose(x.grad.data, 2 * (2 * x.data) + 3 + 1)


def test_second_backward_through_freed_graph_says_retain_graph():
    x = minigrad.tensor([1.0, 2.0], requires_grad=True)
    y = (x.tanh() * x).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="retain_graph=True"):
        y.backward()
    z = (x.tanh() * x).sum()
    z.backward(retain_graph=True)
    z.backward()  # allowed: the graph was retained
    # three successful backward calls in all, each adding tanh(x) + x (1 - tanh(x)^2)
    expected = 3 * (np.tanh(x.data) + x.data * (1 - np.tanh(x.data) ** 2))
    np.testing.assert_allclose(x.grad.data, expected, rtol=1e-6)


def test_chain_of_10000_ops_backpropagates():
    x = minigrad.tensor(1.0, dtype=np.float64, requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y * 1.0001
    assert sys.getrecursionlimit() < 10_000  # a recursive walk would have failed
    y.backward()
    np.testing.assert_allclose(x.grad.item(), 1.0001**10_000, rtol=1e-10)


def test_a_cycle_is_reported_not_silently_dropped():
    a = minigrad.tensor([1.0], requires_grad=True)
    b = a * 2
    c = b * 3
    b.grad_fn.next_edges = (c.grad_fn, None)  # only possible by tampering
    with pytest.raises(RuntimeError, match="cycle"):
        c.backward()


def test_in_place_change_of_a_saved_tensor_is_detected():
    x = minigrad.tensor([1.0, 2.0], requires_grad=True)
    w = minigrad.tensor([3.0, 4.0])
    y = (x * w).sum()
    w.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


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


def test_leaf_grads_never_share_memory():
    """Add hands its incoming gradient to both inputs; each leaf must still own its .grad,
    and a leaf used as the root must not alias the caller's gradient array (as torch)."""
    a, b, c = (
        minigrad.tensor(np.array(v), requires_grad=True)
        for v in ([1.0, 2.0], [3.0, 4.0], [2.0, 2.0])
    )
    ((a + b) * c).sum().backward()
    for p in (a, b):
        p.grad.mul_(0.5)  # per-parameter in-place clipping
    np.testing.assert_array_equal(a.grad.data, [1.0, 1.0])
    np.testing.assert_array_equal(b.grad.data, [1.0, 1.0])
    x = minigrad.tensor(np.array([1.0, 2.0]), requires_grad=True)
    seed = np.array([5.0, 5.0])
    x.backward(seed)
    seed[:] = 0
    np.testing.assert_array_equal(x.grad.data, [5.0, 5.0])
    y = minigrad.tensor(np.ones((2, 3)), requires_grad=True)
    upstream = np.ones(6)
    y.reshape(6).backward(upstream)  # Reshape's backward is a view of the upstream gradient
    assert not np.shares_memory(y.grad.data, upstream)


@pytest.mark.parametrize(
    "make_view",
    [lambda w: w[0], lambda w: w[:, 1], lambda w: w[0].expand(3, 2), lambda w: w.T],
    ids=["index_int", "index_slice", "expand", "transpose"],
)
def test_in_place_change_through_a_view_is_detected(make_view):
    x = minigrad.tensor(np.ones(2), requires_grad=True)
    w = minigrad.tensor(np.arange(4.0).reshape(2, 2))
    y = (x * make_view(w)).sum()
    w.mul_(10.0)  # the view saved by Mul shares w's memory, so its version moved too
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


def test_copies_do_not_share_the_version_counter():
    """NumPy copies for a reshape of a non-contiguous array and for integer-array indexing;
    changing such a copy in place must not invalidate tensors saved from its source."""
    x = minigrad.tensor(np.ones(12), requires_grad=True)
    w = minigrad.tensor(np.arange(12.0).reshape(3, 4))
    y = (x * w.reshape(12)).sum()
    w.T.reshape(12).mul_(2.0)
    w[np.array([0, 2])].mul_(2.0)
    y.backward()  # no error: w itself never changed
    np.testing.assert_array_equal(x.grad.data, np.arange(12.0))


class RowGrad(minigrad.Function):
    """A buggy user Function: backward returns shape (3,) for a (2, 3) input."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return (g * 2).sum(0)


@pytest.mark.parametrize("make_input", [lambda x: x, lambda x: x.exp()], ids=["leaf", "non_leaf"])
def test_wrong_gradient_shape_from_a_user_function_is_an_error(make_input):
    x = minigrad.tensor(np.zeros((2, 3)), requires_grad=True)
    with pytest.raises(RuntimeError, match=r"RowGrad.*shape \(3,\).*\(2, 3\)"):
        RowGrad.apply(make_input(x)).backward(np.ones((2, 3)))


def test_sigmoid_keeps_relative_accuracy_in_the_negative_tail():
    for dtype, v in [(np.float32, -20.0), (np.float64, -40.0), (np.float64, -700.0)]:
        ours = minigrad.tensor(np.array([v, -v], dtype=dtype)).sigmoid().data
        ref = torch.sigmoid(torch.tensor([v, -v], dtype=getattr(torch, dtype.__name__))).numpy()
        np.testing.assert_allclose(ours, ref, rtol=1e-6 if dtype == np.float32 else 1e-14)
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        np.testing.assert_array_equal(minigrad.tensor([-1000.0, 1000.0]).sigmoid().data, [0, 1])


def test_a_module_used_twice_is_one_set_of_parameters():
    lin = minigrad.nn.Linear(2, 2, dtype=np.float64, rng=np.random.default_rng(0))
    model = minigrad.nn.Sequential(lin, minigrad.nn.ReLU(), lin)
    tl = torch.nn.Linear(2, 2).double()
    reference = torch.nn.Sequential(tl, torch.nn.ReLU(), tl)
    with torch.no_grad():
        tl.weight.copy_(torch.from_numpy(lin.weight.data))
        tl.bias.copy_(torch.from_numpy(lin.bias.data))
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias"]
    assert len(list(model.parameters())) == len(list(reference.parameters())) == 2
    assert list(model.state_dict()) == list(reference.state_dict())  # both keys, as torch
    model.load_state_dict(model.state_dict())
    x = np.array([[1.0, 2.0], [3.0, -1.0]])
    opt, opt_t = (
        minigrad.optim.SGD(model.parameters(), lr=0.1),
        torch.optim.SGD(reference.parameters(), lr=0.1),
    )
    model(minigrad.tensor(x)).sum().backward()
    reference(torch.tensor(x)).sum().backward()
    opt.step()
    opt_t.step()  # one update per parameter, not two
    np.testing.assert_allclose(lin.weight.data, tl.weight.detach().numpy(), rtol=1e-12)


def test_gradcheck_on_non_contiguous_and_0dim_inputs():
    base = np.random.default_rng(0).standard_normal((4, 3))
    x = minigrad.Tensor(base.T, requires_grad=True)  # a transposed view: not C-contiguous
    assert minigrad.gradcheck(lambda t: t.tanh(), (x,))
    np.testing.assert_array_equal(x.data, base.T)  # perturbations undone
    assert minigrad.gradcheck(
        lambda t: t.tanh(), (minigrad.Tensor(np.array(0.3), requires_grad=True),)
    )


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


def test_optimizers_accept_a_zero_learning_rate():
    p = minigrad.nn.Parameter(np.ones(2))
    for make in (minigrad.optim.SGD, minigrad.optim.Adam):
        make([p], lr=0.0)
        with pytest.raises(ValueError, match="learning rate"):
            make([p], lr=-0.1)


def test_optimizers_skip_none_grads_and_count_adam_steps_per_parameter():
    """q gets no gradient for two steps: it must not move, and its first Adam update must use
    the bias correction of step 1, not of step 3 (torch keeps one step count per parameter)."""
    rng = np.random.default_rng(0)
    w0, v0 = rng.standard_normal(3), rng.standard_normal(3)
    for name, kw in [("Adam", {"lr": 0.1}), ("SGD", {"lr": 0.1, "momentum": 0.9})]:
        results = []
        for lib, make in (
            (minigrad, minigrad.nn.Parameter),
            (torch, lambda a: torch.nn.Parameter(torch.tensor(a))),
        ):
            p, q = make(w0.copy()), make(v0.copy())
            opt = getattr(lib.optim, name)([p, q], **kw)
            for step in range(4):
                opt.zero_grad()
                loss = (p * p).sum() if step < 2 else (p * p).sum() + (q * q * q).sum()
                loss.backward()
                opt.step()
            results.append([np.asarray(t.detach().numpy()) for t in (p, q)])
        for ours, theirs in zip(*results, strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=1e-12, err_msg=name)


# torch warns that backward(create_graph=True) makes a parameter <-> grad cycle: known, intended.
@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True:UserWarning")
def test_create_graph_gives_each_leaf_its_own_grad():
    """Add hands one gradient to both inputs, and a leaf used as the root gets the seed:
    under create_graph too, each .grad must be a private, writeable copy (as torch clones),
    and stay differentiable."""
    a, b = (minigrad.tensor(np.array(v), requires_grad=True) for v in ([1.0, 2.0], [3.0, 4.0]))
    (a + b).sum().backward(create_graph=True)
    assert a.grad is not b.grad and not np.shares_memory(a.grad.data, b.grad.data)
    with minigrad.no_grad():
        a.grad.mul_(0.5)  # clipping one gradient must not touch the other
    np.testing.assert_array_equal(b.grad.data, [1.0, 1.0])
    x = minigrad.tensor(np.array([1.0, 2.0]), requires_grad=True)
    seed = minigrad.tensor(np.array([5.0, 5.0]))
    x.backward(seed, create_graph=True)
    seed.zero_()
    np.testing.assert_array_equal(x.grad.data, [5.0, 5.0])
    w = minigrad.tensor(np.array([0.5, -1.5]), requires_grad=True)
    wt = torch.tensor([0.5, -1.5], dtype=torch.float64, requires_grad=True)
    (w**3).sum().backward(create_graph=True)
    (wt**3).sum().backward(create_graph=True)
    (h,) = minigrad.grad(w.grad.sum(), w)
    (ht,) = torch.autograd.grad(wt.grad.sum(), wt)
    np.testing.assert_allclose(h.data, ht.numpy(), rtol=1e-12)


def test_max_without_dim_routes_the_gradient_to_nan_like_torch():
    for values in ([1.0, np.nan, 2.0], [1.0, np.nan, np.nan], [3.0, 1.0, 3.0]):
        for method in ("max", "amax"):  # amax leaves the gradient nan everywhere (torch)
            x = minigrad.tensor(np.array(values), requires_grad=True)
            xt = torch.tensor(values, dtype=torch.float64, requires_grad=True)
            getattr(x, method)().backward()
            getattr(xt, method)().backward()
            np.testing.assert_array_equal(x.grad.data, xt.grad.numpy(), err_msg=method)


@pytest.mark.parametrize(
    "shapes",
    [
        [(2, 5, 4), (1, 6, 4), (1, 6, 3)],  # k and v shared by the whole batch
        [(2, 3, 5, 4), (2, 1, 6, 4), (2, 1, 6, 3)],  # one k/v head for three query heads
        [(1, 5, 4), (2, 6, 4), (2, 6, 3)],  # q broadcast
        [(2, 5, 4), (2, 0, 4), (2, 0, 3)],  # S = 0: zeros out, as torch
        [(2, 0, 4), (2, 6, 4), (2, 6, 3)],  # L = 0: empty out
    ],
    ids=["kv_batch", "kv_heads", "q_batch", "empty_keys", "empty_queries"],
)
def test_fused_attention_broadcast_and_empty_like_torch(shapes):
    from minigrad.attention import scaled_dot_product_attention

    arrays, _ = _attention_matches_torch(shapes, seed=4)
    if all(0 not in s for s in shapes):
        xs = [minigrad.Tensor(a[..., :2, :], requires_grad=True) for a in arrays]
        assert minigrad.gradgradcheck(scaled_dot_product_attention, xs)


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


def test_assigning_none_unregisters_a_parameter():
    lin = minigrad.nn.Linear(3, 2)
    ref = torch.nn.Linear(3, 2)
    lin.bias = None
    ref.bias = None
    assert [n for n, _ in lin.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert list(lin.state_dict()) == list(ref.state_dict())
    np.testing.assert_array_equal(
        lin(minigrad.tensor(np.ones((1, 3), np.float32))).data.shape, (1, 2)
    )
    with pytest.raises(TypeError, match="Parameter or None expected"):
        lin.weight = minigrad.tensor(np.ones((2, 3)))


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


def test_ops_saving_their_output_make_no_reference_cycle():
    """Exp, Tanh, Sigmoid, Softmax, LogSoftmax and Pow save their own output: the node keeps
    its data, not the output Tensor, so the output is freed as soon as it is dropped (no
    garbage-collector pass needed), and an in-place change of it is still detected."""
    import gc
    import weakref

    x = minigrad.tensor(np.array([0.5, -1.0]), requires_grad=True)
    makers = [
        lambda: x.exp(), lambda: x.tanh(), lambda: x.sigmoid(), lambda: F.softmax(x, dim=0),
        lambda: F.log_softmax(x, dim=0), lambda: x ** 2.0, lambda: Swish.apply(x) * 1,
    ]  # fmt: skip
    gc.disable()
    try:
        for make in makers:
            ref = weakref.ref(make())
            assert ref() is None
    finally:
        gc.enable()
    y = x.exp()
    with minigrad.no_grad():
        y.mul_(2.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.sum().backward()
    xt = torch.tensor([0.5, -1.0], dtype=torch.float64, requires_grad=True)
    (g,) = minigrad.grad(x.tanh().sum(), x, create_graph=True)  # the saved output, rebuilt
    (gt,) = torch.autograd.grad(xt.tanh().sum(), xt, create_graph=True)
    (h,) = minigrad.grad(g.sum(), x)
    (ht,) = torch.autograd.grad(gt.sum(), xt)
    np.testing.assert_allclose(h.data, ht.numpy(), rtol=1e-12)


# ----------------------------------------------------------------------------- 4. second order
@pytest.mark.parametrize(
    "expr,specs", [c[1:] for c in SECOND_ORDER_CASES], ids=[c[0] for c in SECOND_ORDER_CASES]
)
def test_second_order_matches_torch(expr, specs):
    assert second_order_with_torch(expr, *specs) < TOL


def test_x_cubed_second_and_third_derivative():
    x = minigrad.tensor([0.5, -1.5, 2.0], dtype=np.float64, requires_grad=True)
    (g,) = minigrad.grad((x**3).sum(), x, create_graph=True)
    (h,) = minigrad.grad(g.sum(), x, create_graph=True)
    (t,) = minigrad.grad(h.sum(), x)
    np.testing.assert_allclose(g.data, 3 * x.data**2)
    np.testing.assert_allclose(h.data, 6 * x.data)
    np.testing.assert_allclose(t.data, 6.0)


@pytest.mark.parametrize(
    "fn,shapes", [c[1:] for c in GRADGRAD_CASES], ids=[c[0] for c in GRADGRAD_CASES]
)
def test_gradgradcheck(fn, shapes):
    rng = np.random.default_rng(1)
    xs = [minigrad.Tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]
    assert minigrad.gradgradcheck(fn, xs)


def _attention_matches_torch(shapes, seed):
    """minigrad's fused attention against torch's SDPA on the same float64 inputs: output and
    every input's gradient within TOL. Returns the input arrays and minigrad's output."""
    from minigrad.attention import scaled_dot_product_attention

    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    ours = [minigrad.Tensor(a.copy(), requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = scaled_dot_product_attention(*ours)
    ref = torch.nn.functional.scaled_dot_product_attention(*theirs)
    upstream = rng.standard_normal(ref.shape)
    out.backward(upstream)
    ref.backward(torch.from_numpy(upstream))
    assert relative_error(out.data, ref.detach().numpy()) < TOL
    for m, t in zip(ours, theirs, strict=True):
        assert relative_error(m.grad.data, t.grad.numpy()) < TOL
    return arrays, out


def test_fused_attention_custom_backward_matches_torch():
    from minigrad.attention import scaled_dot_product_attention

    _, out = _attention_matches_torch([(2, 5, 4), (2, 6, 4), (2, 6, 3)], seed=3)
    assert type(out.grad_fn).__name__ == "FusedAttentionBackward"  # one node, not six
    rng = np.random.default_rng(3)
    small = [minigrad.Tensor(rng.standard_normal(s), requires_grad=True) for s in [(3, 2)] * 3]
    assert minigrad.gradcheck(scaled_dot_product_attention, small)
    assert minigrad.gradgradcheck(scaled_dot_product_attention, small)


def test_every_primitive_is_differentiated_twice():
    """gradgradcheck differentiates the first-derivative graphs: together they must contain
    every primitive, so each backward rule is also checked as a recorded computation."""
    rng = np.random.default_rng(0)
    covered: set[str] = set()
    for _, fn, shapes in GRADGRAD_CASES:
        xs = [minigrad.Tensor(rng.standard_normal(s), requires_grad=True) for s in shapes]
        y = fn(*xs)
        covered |= primitives_in_graph(y)
        for g in minigrad.grad(y, xs, np.ones(y.shape), create_graph=True):
            covered |= primitives_in_graph(g)
    assert not set(rules.PRIMITIVES) - covered


def test_gradcheck_catches_a_wrong_backward():
    class WrongSquare(minigrad.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * x  # should be 2 * g * x

    x = minigrad.Tensor(np.array([1.0, 2.0]), requires_grad=True)
    with pytest.raises(minigrad.GradcheckError, match="Jacobian mismatch"):
        minigrad.gradcheck(WrongSquare.apply, (x,))
    assert torch is not None  # torch is the oracle for everything above


def test_grad_wrt_a_non_leaf_runs_nothing_beyond_it():
    # torch.autograd.grad runs only the nodes between the outputs and the inputs: y's own node
    # (x * 3) is neither run nor freed, so a later backward through it still works.
    def run(lib, tensor):
        x = tensor([1.0, 2.0])
        y = x * 3.0
        (gy,) = lib.grad((y * y).sum(), y)  # retain_graph=False
        assert x.grad is None
        (y * 2.0).sum().backward()
        return np.asarray(gy.detach().numpy() if lib is torch.autograd else gy.data), x.grad

    gy_mg, xg_mg = run(minigrad, lambda v: minigrad.tensor(np.array(v), requires_grad=True))
    gy_t, xg_t = run(
        torch.autograd, lambda v: torch.tensor(v, dtype=torch.float64, requires_grad=True)
    )
    np.testing.assert_allclose(gy_mg, gy_t, rtol=1e-12)
    np.testing.assert_allclose(xg_mg.data, xg_t.numpy(), rtol=1e-12)


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


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))
