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
            minigrad.Tensor(a, requires_grad=not isinstance(s, np.ndarray))
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


def test_fused_attention_custom_backward_matches_torch():
    from minigrad.attention import scaled_dot_product_attention

    rng = np.random.default_rng(3)
    arrays = [rng.standard_normal(s) for s in [(2, 5, 4), (2, 6, 4), (2, 6, 3)]]
    ours = [minigrad.Tensor(a.copy(), requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = scaled_dot_product_attention(*ours)
    ref = torch.nn.functional.scaled_dot_product_attention(*theirs)
    upstream = rng.standard_normal(ref.shape)
    out.backward(upstream)
    ref.backward(torch.from_numpy(upstream))
    assert type(out.grad_fn).__name__ == "FusedAttentionBackward"  # one node, not six
    assert relative_error(out.data, ref.detach().numpy()) < TOL
    for m, t in zip(ours, theirs, strict=True):
        assert relative_error(m.grad.data, t.grad.numpy()) < TOL
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


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))
