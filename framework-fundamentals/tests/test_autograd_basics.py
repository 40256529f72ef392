"""Question 2: requires_grad, the recorded graph, backward — in torch and in minigrad."""

import pytest
import torch
from fundamentals import autograd_basics as ab


def test_worked_example_gives_26_in_torch():
    result = ab.worked_example_torch(4.0)
    assert result.y == 56.0  # 3·16 + 8
    assert result.dydx == 26.0  # 6·4 + 2
    # The order backward() ran the graph: the add, its two products, the pow, the leaf once.
    assert result.graph == [
        "AddBackward0",
        "MulBackward0",
        "MulBackward0",
        "PowBackward0",
        "AccumulateGrad",
    ]


def test_backward_order_is_a_dependency_order_not_breadth_first():
    # Two branches of different depth: breadth-first would list Exp before Cos and put the
    # leaf's AccumulateGrad before Sin, which feeds it; the engine runs a node only after
    # every node that feeds it a gradient.
    x = torch.tensor(0.3, requires_grad=True)
    order = ab.backward_order(x.exp() * x + x.sin().cos().tanh())
    assert order[0] == "AddBackward0" and order[-1] == "AccumulateGrad"
    assert order.count("AccumulateGrad") == 1
    assert order.index("TanhBackward0") < order.index("CosBackward0") < order.index("SinBackward0")
    assert order.index("MulBackward0") < order.index("ExpBackward0")
    assert x.grad is not None  # backward really ran


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


def test_backward_order_refuses_an_untracked_tensor():
    with pytest.raises(ValueError, match="grad_fn"):
        ab.backward_order(torch.tensor(1.0))


def test_minigrad_order_is_the_order_its_engine_runs(monkeypatch):
    import minigrad

    x = minigrad.tensor(0.3, requires_grad=True)
    y = x.exp() * x + x.tanh().exp() * x.sigmoid()
    predicted = ab.minigrad_backward_order(y)
    # Record the real calls: wrap the backward of every primitive in the graph.
    ran: list[str] = []
    classes, stack = set(), [y.grad_fn]
    while stack:
        node = stack.pop()
        classes.add(node._fn)
        stack.extend(
            n for n in node.next_edges if n is not None and not isinstance(n, minigrad.Tensor)
        )
    for cls in classes:
        original = cls.backward

        def recording(ctx, grad, original=original):
            ran.append(type(ctx).__name__)
            return original(ctx, grad)

        monkeypatch.setattr(cls, "backward", staticmethod(recording))
    y.backward()
    assert ran == [name for name in predicted if name != "AccumulateGrad"]
    assert predicted.count("AccumulateGrad") == 4  # one per edge into x


def test_worked_example_gives_26_in_minigrad_with_the_same_graph_shape():
    ours = ab.worked_example_minigrad(4.0)
    theirs = ab.worked_example_torch(4.0)
    assert (ours.y, ours.dydx) == (56.0, 26.0)
    # The same nodes in the same order; minigrad adds into the leaf once per edge instead of
    # running one AccumulateGrad.
    ours_ops = [n for n in ours.graph if n != "AccumulateGrad"]
    assert ours_ops == [n.removesuffix("0") for n in theirs.graph if n != "AccumulateGrad"]
    assert ours.graph.count("AccumulateGrad") == 2 and theirs.graph.count("AccumulateGrad") == 1


def test_minigrad_accumulates_and_needs_gradient_for_vectors():
    assert ab.accumulate_gradients_minigrad() == (26.0, 52.0)
    message, grad, no_grad_tracks, detached_tracks = ab.nonscalar_and_tracking_minigrad()
    assert "scalar" in message
    assert grad == [8.0, 14.0, 20.0]
    assert not no_grad_tracks and not detached_tracks


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))
