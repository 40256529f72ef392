"""The engine's bookkeeping: version counters, views, leaf .grad memory, user Function checks,
create_graph accumulation, grad() w.r.t. non-leaves, saved outputs without reference cycles."""

from __future__ import annotations

import minigrad
import minigrad.nn.functional as F
import numpy as np
import pytest
import torch
from minigrad import rules
from minigrad_harness.scenarios import Swish


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


def test_in_place_change_of_a_saved_tensor_is_detected():
    x = minigrad.tensor([1.0, 2.0], requires_grad=True)
    w = minigrad.tensor([3.0, 4.0])
    y = (x * w).sum()
    w.add_(1.0)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


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
