"""gradcheck / gradgradcheck themselves, and every primitive differentiated twice."""

from __future__ import annotations

import minigrad
import numpy as np
import pytest
import torch
from minigrad import rules
from minigrad_harness.scenarios import GRADGRAD_CASES
from minigrad_harness.testing import (
    attention_matches_torch,
    primitives_in_graph,
)


def test_gradcheck_on_non_contiguous_and_0dim_inputs():
    base = np.random.default_rng(0).standard_normal((4, 3))
    x = minigrad.Tensor(base.T, requires_grad=True)  # a transposed view: not C-contiguous
    assert minigrad.gradcheck(lambda t: t.tanh(), (x,))
    np.testing.assert_array_equal(x.data, base.T)  # perturbations undone
    assert minigrad.gradcheck(
        lambda t: t.tanh(), (minigrad.Tensor(np.array(0.3), requires_grad=True),)
    )


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
    from minigrad.nn.functional import scaled_dot_product_attention

    arrays, _ = attention_matches_torch(shapes, seed=4)
    if all(0 not in s for s in shapes):
        xs = [minigrad.Tensor(a[..., :2, :], requires_grad=True) for a in arrays]
        assert minigrad.gradgradcheck(scaled_dot_product_attention, xs)


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
    masks = {n for n, p in rules.PRIMITIVES.items() if not getattr(p, "differentiable", True)}
    assert not set(rules.PRIMITIVES) - covered - masks  # boolean masks have no derivative


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
