"""Question 1: the swish Function in torch (and in minigrad, against torch)."""

import warnings

import minigrad
import minigrad.nn.functional as minigrad_functional
import numpy as np
import pytest
import torch
from fundamentals.swish import Swish, SwishFunction, SwishMLP, swish
from fundamentals.swish_minigrad import SwishModule
from fundamentals.swish_minigrad import swish as minigrad_swish
from minigrad_harness.testing import compare_with_torch, second_order_with_torch
from torch.utils._python_dispatch import TorchDispatchMode


def _double(values, requires_grad=True):
    return torch.tensor(values, dtype=torch.float64, requires_grad=requires_grad)


def test_gradcheck_and_gradgradcheck_in_double_precision():
    x = torch.randn(32, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    x = (x * 4).requires_grad_()
    assert torch.autograd.gradcheck(swish, (x,), eps=1e-6, atol=1e-6, rtol=1e-4)
    assert torch.autograd.gradgradcheck(swish, (x,), eps=1e-6, atol=1e-6, rtol=1e-4)


def test_backward_matches_the_analytic_formula():
    x = _double([-3.0, -0.5, 0.0, 0.5, 3.0])
    swish(x).sum().backward()
    s = torch.sigmoid(x.detach())
    torch.testing.assert_close(x.grad, s + x.detach() * s * (1 - s), rtol=1e-12, atol=0)


def test_agrees_with_builtin_silu_values_gradients_and_second_derivatives():
    x = torch.linspace(-30, 30, 601, dtype=torch.float64, requires_grad=True)
    ours = swish(x)
    (ours_grad,) = torch.autograd.grad(ours.sum(), x, create_graph=True)
    (ours_second,) = torch.autograd.grad(ours_grad.sum(), x)
    ref = torch.nn.functional.silu(x)
    (ref_grad,) = torch.autograd.grad(ref.sum(), x, create_graph=True)
    (ref_second,) = torch.autograd.grad(ref_grad.sum(), x)
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ours_grad, ref_grad, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(ours_second, ref_second, rtol=1e-10, atol=1e-12)


class _CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func.overloadpacket))
        return func(*args, **(kwargs or {}))


def test_backward_reuses_the_saved_sigmoid_instead_of_recomputing_it():
    x = _double([0.3, -1.2, 2.0])
    y = swish(x)
    saved_x, saved_s = y.grad_fn.saved_tensors
    torch.testing.assert_close(saved_s, torch.sigmoid(x.detach()))
    with _CountOps() as forward_ops:
        swish(x.detach())
    with _CountOps() as backward_ops:
        y.sum().backward()
    assert any("sigmoid" in op for op in forward_ops.ops)
    assert not any("sigmoid" in op for op in backward_ops.ops), backward_ops.ops


def test_module_inside_a_network_passes_gradcheck():
    torch.manual_seed(0)
    model = SwishMLP(in_features=4, hidden=6, out_features=3).double()
    assert any(isinstance(m, Swish) for m in model.modules())
    inputs = torch.randn(5, 4, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(model, (inputs,))
    model(inputs).pow(2).sum().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.parameters())


def test_no_overflow_at_large_magnitudes():
    x = _double([-1000.0, -100.0, 100.0, 1000.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        y = swish(x)
        (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
        (h,) = torch.autograd.grad(g.sum(), x)
    for t in (y, g, h):
        assert torch.isfinite(t).all(), t
    torch.testing.assert_close(
        y, _double([-0.0, -100 * torch.sigmoid(_double(-100.0)).item(), 100.0, 1000.0], False)
    )
    torch.testing.assert_close(g, _double([0.0, 0.0, 1.0, 1.0], False), atol=1e-40, rtol=1e-12)


def test_bad_input_is_refused_clearly():
    with pytest.raises(TypeError, match="floating-point"):
        swish(torch.tensor([1, 2, 3]))
    with pytest.raises(TypeError, match="torch.Tensor"):
        swish(np.ones(3))


def test_function_apply_is_the_same_as_the_helper():
    x = _double([0.1, 0.2])
    y, s = SwishFunction.apply(x)  # s = sigmoid(x), the non-differentiable saved output
    torch.testing.assert_close(y, swish(x))
    torch.testing.assert_close(s, torch.sigmoid(x))
    assert not s.requires_grad


# torch.func's forward-mode rules call torch.jit.script internally, which warns in torch 2.13.
@pytest.mark.filterwarnings("ignore:.*torch.jit.script.*:DeprecationWarning")
def test_torch_func_transforms_match_silu():
    # setup_context style + generate_vmap_rule + jvp: grad, vmap, jacrev, jacfwd and hessian
    # (forward-over-reverse) all work and agree with F.silu.
    silu = torch.nn.functional.silu
    x = torch.randn(6, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    batch = torch.randn(4, 6, dtype=torch.float64, generator=torch.Generator().manual_seed(1))

    def ours(t):
        return swish(t).sum()

    def ref(t):
        return silu(t).sum()

    cases = [
        (torch.func.grad, x),
        (torch.func.hessian, x),
        (lambda f: torch.func.jacrev(torch.func.jacrev(f)), x),
        (lambda f: torch.func.vmap(torch.func.grad(f)), batch),
    ]
    for transform, arg in cases:
        torch.testing.assert_close(
            transform(ours)(arg), transform(ref)(arg), rtol=1e-12, atol=1e-12
        )
    torch.testing.assert_close(torch.func.vmap(swish)(batch), silu(batch), rtol=0, atol=1e-15)
    torch.testing.assert_close(torch.func.jacfwd(swish)(x), torch.func.jacfwd(silu)(x))


# ------------------------------------------------------------------------------- minigrad
# minigrad.testing.compare_with_torch runs one expression in both libraries on the same
# float64 inputs and compares outputs and gradients (and runs minigrad.gradcheck); the
# expression picks each library's swish from the functional module it is handed.


def _pick(functional, x, torch_side):
    return minigrad_swish(x) if functional is minigrad_functional else torch_side(x)


def _swish_in(functional, x):
    return _pick(functional, x, torch_side=swish)


@pytest.mark.parametrize("shape", [(7,), (3, 5)])
def test_minigrad_swish_agrees_with_our_torch_swish(shape):
    result = compare_with_torch(_swish_in, shape, seed=3)
    assert result.gradcheck_passed
    assert result.max_error < 1e-10, result


def test_minigrad_swish_agrees_with_torch_silu_to_second_order():
    def against_silu(functional, x):
        return _pick(functional, x, torch_side=torch.nn.functional.silu)

    assert compare_with_torch(against_silu, (4, 6), seed=5).max_error < 1e-10
    assert second_order_with_torch(against_silu, (4, 6), seed=6) < 1e-8


def test_minigrad_swish_keeps_relative_accuracy_in_the_negative_tail():
    """Far left, swish and its derivative are tiny but not zero: torch's silu gets them to the
    last bits, and so must we (1 - almost-1 cancellation would lose them all)."""
    values = np.array([-10.0, -20.0, -30.0, -40.0, -100.0])
    x = minigrad.tensor(values.copy(), requires_grad=True)
    minigrad_swish(x).backward(np.ones(values.shape))
    xt = torch.tensor(values, requires_grad=True)
    yt = torch.nn.functional.silu(xt)
    yt.backward(torch.ones(values.shape, dtype=torch.float64))
    np.testing.assert_allclose(minigrad_swish(x).data, yt.detach().numpy(), rtol=1e-13)
    np.testing.assert_allclose(x.grad.data, xt.grad.numpy(), rtol=1e-13)


def test_minigrad_gradcheck_and_gradgradcheck():
    x = minigrad.tensor(np.random.default_rng(2).standard_normal(10) * 4, requires_grad=True)
    assert minigrad.gradcheck(minigrad_swish, (x,))
    assert minigrad.gradgradcheck(minigrad_swish, (x,))


def test_minigrad_swish_saves_the_sigmoid():
    x = minigrad.tensor(np.array([0.3, -1.2, 2.0]), requires_grad=True)
    y = minigrad_swish(x)
    saved_x, saved_s = y.grad_fn.saved_tensors
    np.testing.assert_allclose(saved_s.data, torch.sigmoid(torch.from_numpy(x.data)).numpy())


def test_minigrad_swish_has_no_overflow_at_1000():
    x = minigrad.tensor(np.array([-1000.0, -100.0, 100.0, 1000.0]), requires_grad=True)
    with np.errstate(all="raise"), warnings.catch_warnings():
        warnings.simplefilter("error")
        y = minigrad_swish(x)
        (g,) = minigrad.grad(y.sum(), [x], create_graph=True)
        (h,) = minigrad.grad(g.sum(), [x])
    for t in (y, g, h):
        assert np.isfinite(t.data).all()
    np.testing.assert_allclose(g.data, [0.0, 0.0, 1.0, 1.0], atol=1e-30)
    np.testing.assert_allclose(y.data[[0, 2, 3]], [0.0, 100.0, 1000.0])


def test_minigrad_swish_module_and_bad_input():
    layer = SwishModule()
    x = minigrad.tensor(np.array([1.0, -2.0]), requires_grad=True)
    layer(x).sum().backward()
    s = 1 / (1 + np.exp(-x.data))
    np.testing.assert_allclose(x.grad.data, s + x.data * s * (1 - s), rtol=1e-12)
    with pytest.raises(TypeError, match="floating-point"):
        minigrad_swish(minigrad.tensor(np.array([1, 2])))
    with pytest.raises(TypeError, match="minigrad.Tensor"):
        minigrad_swish(torch.ones(2))


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))


def _third_derivative_torch(fn, values):
    x = _double(values)
    (g,) = torch.autograd.grad(fn(x).sum(), x, create_graph=True)
    (h,) = torch.autograd.grad(g.sum(), x, create_graph=True)
    (t,) = torch.autograd.grad(h.sum(), x)
    return t


def test_third_derivative_is_exact_not_silently_dropped():
    """Past the analytic second derivative, autograd differentiates the rebuilt expression:
    the third derivative equals silu's (before, the swish part of it silently came out 0)."""
    values = [-3.0, -0.5, 0.0, 0.5, 2.0]

    def plus_cube(t, act):
        return act(t) + t**3  # the cube keeps the graph alive even if swish's part were lost

    expected = _third_derivative_torch(lambda t: plus_cube(t, torch.nn.functional.silu), values)
    ours = _third_derivative_torch(lambda t: plus_cube(t, swish), values)
    torch.testing.assert_close(ours, expected, rtol=1e-10, atol=1e-12)

    x = minigrad.tensor(np.array(values), requires_grad=True)
    (g,) = minigrad.autograd.grad(plus_cube(x, minigrad_swish).sum(), x, create_graph=True)
    (h,) = minigrad.autograd.grad(g.sum(), x, create_graph=True)
    (t,) = minigrad.autograd.grad(h.sum(), x)
    np.testing.assert_allclose(t.data, expected.numpy(), rtol=1e-10, atol=1e-12)
