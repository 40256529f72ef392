"""Question 2: requires_grad, the recorded graph, backward — in torch and in minigrad."""

import pytest
import torch
from fundamentals import autograd_basics as ab


def test_worked_example_gives_26_in_torch():
    result = ab.worked_example_torch(4.0)
    assert result.y == 56.0  # 3·16 + 8
    assert result.dydx == 26.0  # 6·4 + 2
    # The graph recorded by the forward pass: add of two products, a pow, and the leaf.
    assert result.graph[0] == "AddBackward0"
    assert result.graph.count("MulBackward0") == 2
    assert "PowBackward0" in result.graph
    assert result.graph[-1] == "AccumulateGrad"


@pytest.mark.parametrize("x_value", [-2.5, 0.0, 1.0, 7.0])
def test_derivative_is_6x_plus_2_everywhere(x_value):
    assert ab.worked_example_torch(x_value).dydx == pytest.approx(6 * x_value + 2)


def test_nonscalar_output_needs_an_explicit_gradient():
    assert "scalar" in ab.nonscalar_backward_error()
    assert ab.nonscalar_backward_with_gradient() == [8.0, 14.0, 20.0]


def test_no_grad_and_detach_stop_tracking():
    facts = ab.stop_tracking()
    assert facts.tracked_grad_fn == "AddBackward0"
    assert facts.no_grad_requires_grad is False and facts.no_grad_grad_fn is None
    assert facts.detach_requires_grad is False
    assert facts.detach_shares_storage  # detach is a view on the same memory, not a copy


def test_gradients_accumulate_until_zeroed():
    facts = ab.accumulate_gradients()
    assert (facts.after_first, facts.after_second, facts.after_zero_and_third) == (26.0, 52.0, 26.0)
    assert "retain_graph=True" in facts.second_backward_error


def test_backward_graph_refuses_an_untracked_tensor():
    with pytest.raises(ValueError, match="grad_fn"):
        ab.backward_graph(torch.tensor(1.0))


def test_worked_example_gives_26_in_minigrad_with_the_same_graph_shape():
    ours = ab.worked_example_minigrad(4.0)
    theirs = ab.worked_example_torch(4.0)
    assert (ours.y, ours.dydx) == (56.0, 26.0)
    assert ours.graph[-1] == "AccumulateGrad"
    assert len(ours.graph) == len(theirs.graph)  # add, two muls, pow, the leaf


def test_minigrad_accumulates_and_needs_gradient_for_vectors():
    assert ab.accumulate_gradients_minigrad() == (26.0, 52.0)
    message, grad, no_grad_tracks, detached_tracks = ab.nonscalar_and_tracking_minigrad()
    assert "scalar" in message
    assert grad == [8.0, 14.0, 20.0]
    assert not no_grad_tracks and not detached_tracks


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))
