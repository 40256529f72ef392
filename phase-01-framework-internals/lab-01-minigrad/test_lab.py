"""Lab 01 acceptance suite (the spec's checks): minigrad against PyTorch (the oracle).

1. gradient checks, one or more per Function subclass, vs torch and vs finite differences
2. a 2-layer MLP on load_digits, trained 100 steps in minigrad and torch from the same weights:
   the loss falls at every step
3. the engine: no_grad, accumulation, retain_graph, a 10,000-op chain, cycles
4. second order (create_graph), gradgradcheck, and a custom backward for fused attention

Every other test lives in tests/, one file per topic. Run: ``python test_lab.py`` (in this
folder) or ``pytest test_lab.py``.
"""

from __future__ import annotations

import sys

import minigrad
import minigrad.nn.functional as F
import numpy as np
import pytest
import torch
from minigrad import rules
from minigrad_harness.digits_mlp import (
    curve_relative_difference,
    initial_weights,
    load_digits_split,
    train_minigrad,
    train_torch,
)
from minigrad_harness.scenarios import (
    GRAD_CASES,
    GRADGRAD_CASES,
    SECOND_ORDER_CASES,
    TOL,
    Swish,
    SwishSavingSigmoid,
)
from minigrad_harness.testing import (
    attention_matches_torch,
    compare_with_torch,
    make_inputs,
    primitives_in_graph,
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
    """The cases above exercise every registered Function subclass (IndexBackward, SumTo and
    ScatterAdd run inside first-order backward; their own backward is checked in the
    second-order part, as is Dropout, whose random mask torch cannot reproduce)."""

    covered: set[str] = set()
    for _, expr, specs, positive in GRAD_CASES:
        arrays = make_inputs(specs, 0, positive)
        xs = [
            minigrad.Tensor(a, requires_grad=requires_grad(s))
            for a, s in zip(arrays, specs, strict=True)
        ]
        covered |= primitives_in_graph(expr(F, *xs))
    # Compare and FirstMax make boolean masks for minigrad.func's rules: nothing to differentiate
    masks = {n for n, p in rules.PRIMITIVES.items() if not getattr(p, "differentiable", True)}
    exempt = {"IndexBackward", "SumTo", "ScatterAdd", "Dropout"} | masks
    missing = set(rules.PRIMITIVES) - covered - exempt
    assert not missing, f"primitives without a gradient check: {sorted(missing)}"
    assert len(covered) >= 15


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
    from minigrad.nn.functional import scaled_dot_product_attention

    _, out = attention_matches_torch([(2, 5, 4), (2, 6, 4), (2, 6, 3)], seed=3)
    assert type(out.grad_fn).__name__ == "FusedAttentionBackward"  # one node, not six
    rng = np.random.default_rng(3)
    small = [minigrad.Tensor(rng.standard_normal(s), requires_grad=True) for s in [(3, 2)] * 3]
    assert minigrad.gradcheck(scaled_dot_product_attention, small)
    assert minigrad.gradgradcheck(scaled_dot_product_attention, small)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))
