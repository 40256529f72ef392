"""Question 1 (PyTorch half): a custom autograd Function for swish, y = x · sigmoid(x).

Forward saves x and s = sigmoid(x); backward reuses s instead of recomputing it:

    dy/dx   = s + x·s·(1 − s)
    d²y/dx² = s·(1 − s)·(2 + x·(1 − 2s))

Double backward: tensors computed *inside* forward (like s) are not connected to the autograd
graph, so a backward written with plain torch ops on s would give a wrong second derivative
under ``create_graph=True``. Instead backward itself is a Function, :class:`SwishGrad`,
whose own backward holds the analytic second derivative; ``gradgradcheck`` verifies it.

``torch.sigmoid`` is already overflow-free, so x = ±1000 gives y = 1000 / −0 and gradients
1 / 0 without inf or NaN. The minigrad half lives in :mod:`fundamentals.swish_minigrad`.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.autograd.function import FunctionCtx


def swish_derivative(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """dy/dx of swish given x and s = sigmoid(x)."""
    return s + x * s * (1 - s)


def swish_second_derivative(x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """d²y/dx² of swish given x and s = sigmoid(x)."""
    return s * (1 - s) * (2 + x * (1 - 2 * s))


class SwishFunction(torch.autograd.Function):
    """y = x · sigmoid(x) with a hand-written backward.

    Written in the ``setup_context`` style (forward takes no ctx) with ``generate_vmap_rule``,
    so it also works under torch.func (grad, vmap, jacrev, hessian), which refuses Functions
    whose forward takes ctx. To keep s = sigmoid(x) for backward, forward returns it as a
    second, non-differentiable output; :func:`swish` hands back only y.
    """

    generate_vmap_rule = True  # forward and backward are plain torch ops: vmap can batch them

    @staticmethod
    def forward(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = torch.sigmoid(x)
        return x * s, s

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple, output: tuple) -> None:
        (x,) = inputs
        _, s = output
        ctx.mark_non_differentiable(s)
        # Save s so backward does not pay for a second sigmoid; save_for_backward (rather than
        # ctx.s = s) lets autograd detect in-place modification of x before backward runs.
        ctx.save_for_backward(x, s)
        ctx.save_for_forward(x, s)  # for jvp (forward mode: torch.func.jacfwd, hessian)

    @staticmethod
    def backward(
        ctx: FunctionCtx, grad_output: torch.Tensor, _grad_s: torch.Tensor | None
    ) -> torch.Tensor | None:
        if not ctx.needs_input_grad[0]:
            return None
        x, s = ctx.saved_tensors
        # A Function (not inline torch ops) so that create_graph=True records a node whose
        # backward knows the true second derivative.
        return SwishGrad.apply(grad_output, x, s)

    @staticmethod
    def jvp(ctx: FunctionCtx, x_tangent: torch.Tensor) -> tuple[torch.Tensor, None]:
        x, s = ctx.saved_tensors
        return swish_derivative(x, s) * x_tangent, None  # s is marked non-differentiable


class SwishGrad(torch.autograd.Function):
    """grad_input = grad_output · dy/dx, differentiable in grad_output and x (double backward)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(grad_output: torch.Tensor, x: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        return grad_output * swish_derivative(x, s)

    @staticmethod
    def setup_context(ctx: FunctionCtx, inputs: tuple, output: torch.Tensor) -> None:
        grad_output, x, s = inputs
        ctx.save_for_backward(grad_output, x, s)
        ctx.save_for_forward(grad_output, x, s)

    @staticmethod
    def backward(
        ctx: FunctionCtx, grad_grad_input: torch.Tensor
    ) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        grad_output, x, s = ctx.saved_tensors
        if torch.is_grad_enabled():
            # create_graph=True: a third derivative will differentiate what we return, and the
            # saved s is a constant to autograd. Rebuild it from x with a recorded op so every
            # higher order is exact (the first backward still reuses the saved s).
            s = torch.sigmoid(x)
        grad_wrt_grad_output = (
            grad_grad_input * swish_derivative(x, s) if ctx.needs_input_grad[0] else None
        )
        grad_wrt_x = (
            grad_grad_input * grad_output * swish_second_derivative(x, s)
            if ctx.needs_input_grad[1]
            else None
        )
        return grad_wrt_grad_output, grad_wrt_x, None

    @staticmethod
    def jvp(
        ctx: FunctionCtx,
        grad_output_tangent: torch.Tensor | None,
        x_tangent: torch.Tensor | None,
        _s_tangent: torch.Tensor | None,
    ) -> torch.Tensor:
        # d[g · y'(x)] = dg · y'(x) + g · y''(x) · dx; s follows x, as in backward.
        grad_output, x, s = ctx.saved_tensors
        out = torch.zeros_like(grad_output)
        if grad_output_tangent is not None:
            out = out + grad_output_tangent * swish_derivative(x, s)
        if x_tangent is not None:
            out = out + grad_output * swish_second_derivative(x, s) * x_tangent
        return out


def swish(x: torch.Tensor) -> torch.Tensor:
    """Functional form: ``SwishFunction.apply(x)``."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"swish expects a torch.Tensor, got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"swish needs a floating-point tensor, got dtype {x.dtype}")
    y, _ = SwishFunction.apply(x)
    return y


class Swish(nn.Module):
    """The Function as a layer, so it can sit inside nn.Sequential like nn.SiLU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return swish(x)


class SwishMLP(nn.Module):
    """A small network that uses the custom activation: Linear → Swish → Linear."""

    def __init__(self, in_features: int = 4, hidden: int = 8, out_features: int = 3) -> None:
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(in_features, hidden), Swish(), nn.Linear(hidden, out_features)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)


def check_swish_torch(seed: int = 0) -> dict[str, float | bool]:
    """gradcheck / gradgradcheck in float64, agreement with F.silu, behaviour at x = ±1000."""
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(16, dtype=torch.float64, generator=generator, requires_grad=True)
    results: dict[str, float | bool] = {
        "gradcheck": torch.autograd.gradcheck(swish, (x,), eps=1e-6, atol=1e-6, rtol=1e-4),
        "gradgradcheck": torch.autograd.gradgradcheck(swish, (x,), eps=1e-6, atol=1e-6),
    }
    model = SwishMLP().double()
    inputs = torch.randn(5, 4, dtype=torch.float64, generator=generator, requires_grad=True)
    results["module_gradcheck"] = torch.autograd.gradcheck(model, (inputs,))

    wide = torch.linspace(-20, 20, 401, dtype=torch.float64, requires_grad=True)
    ours = swish(wide)
    (ours_grad,) = torch.autograd.grad(ours.sum(), wide)
    ref = nn.functional.silu(wide)
    (ref_grad,) = torch.autograd.grad(ref.sum(), wide)
    results["max_abs_diff_vs_silu"] = (ours - ref).abs().max().item()
    results["max_abs_grad_diff_vs_silu"] = (ours_grad - ref_grad).abs().max().item()

    extreme = torch.tensor([-1000.0, 1000.0], dtype=torch.float64, requires_grad=True)
    y = swish(extreme)
    (g,) = torch.autograd.grad(y.sum(), extreme)
    results["finite_at_1000"] = bool(torch.isfinite(y).all() and torch.isfinite(g).all())
    results["grad_at_minus_1000"] = g[0].item()
    results["grad_at_plus_1000"] = g[1].item()
    return results
