"""Question 1 (minigrad half): the same swish Function written for Lab 01's ``minigrad``.

minigrad mirrors ``torch.autograd.Function``: ``forward(ctx, x)`` receives the NumPy-backed
``minigrad.Tensor`` (grad recording is off inside it), ``ctx.save_for_backward`` keeps what
backward needs, and ``backward(ctx, grad_output)`` returns the gradient as a Tensor. As in the
torch version, backward delegates to a second Function so that ``create_graph=True`` (and so
``minigrad.gradgradcheck``) gets the analytic second derivative.

Stability: sigmoid is computed from e = exp(−|x|) ≤ 1 in two branches (1 / (1 + e) for
x ≥ 0, e / (1 + e) for x < 0), so x = ±1000 neither overflows nor warns (1 / (1 + exp(−x))
would overflow for x < −709) and the negative tail keeps its relative accuracy.
"""

from __future__ import annotations

import minigrad
import numpy as np
from minigrad import Context, Function, Tensor


def stable_sigmoid(x: np.ndarray) -> np.ndarray:
    """sigmoid from e = exp(-|x|) <= 1: 1 / (1 + e) for x >= 0, e / (1 + e) for x < 0.

    Finite and warning-free for any finite x, and accurate to the last bits in the negative
    tail, where 0.5 * (1 + tanh(x / 2)) would compute 1 - (almost 1) and lose them all."""
    with np.errstate(under="ignore"):  # exp(-1000) underflowing to 0 is the right answer
        e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0, e) / (1.0 + e)


class Swish(Function):
    """y = x · sigmoid(x) for minigrad, with a hand-written backward."""

    @staticmethod
    def forward(ctx: Context, x: Tensor) -> Tensor:
        s = minigrad.tensor(stable_sigmoid(x.data))
        ctx.save_for_backward(x, s)  # s saved, not recomputed in backward
        return minigrad.tensor(x.data * s.data)

    @staticmethod
    def backward(ctx: Context, grad_output: Tensor) -> Tensor | None:
        if not ctx.needs_input_grad[0]:
            return None
        x, s = ctx.saved_tensors
        # A Function call, so that under create_graph=True a node with the analytic second
        # derivative is recorded (s itself is a constant to the graph).
        return SwishGrad.apply(grad_output, x, s)


class SwishGrad(Function):
    """grad_input = grad_output · (s + x·s·(1 − s)); differentiable in grad_output and x."""

    @staticmethod
    def forward(ctx: Context, grad_output: Tensor, x: Tensor, s: Tensor) -> Tensor:
        sd = s.data
        dydx = sd + x.data * sd * (1 - sd)
        ctx.save_for_backward(grad_output, x, s, minigrad.tensor(dydx))
        return minigrad.tensor(grad_output.data * dydx)

    @staticmethod
    def backward(
        ctx: Context, grad_grad_input: Tensor
    ) -> tuple[Tensor | None, Tensor | None, None]:
        grad_output, x, s, dydx = ctx.saved_tensors
        if minigrad.is_grad_enabled():
            # create_graph=True: a third derivative will differentiate what we return, and the
            # saved s and dydx are constants to the graph. Rebuild them from x with recorded
            # ops so every higher order is exact (the first backward still reuses the saved s).
            s = x.sigmoid()
            dydx = s + x * s * (1 - s)
            second = s * (1 - s) * (2 + x * (1 - 2 * s))
            grad_wrt_grad_output = grad_grad_input * dydx if ctx.needs_input_grad[0] else None
            grad_wrt_x = grad_grad_input * grad_output * second if ctx.needs_input_grad[1] else None
            return grad_wrt_grad_output, grad_wrt_x, None
        gg, sd, xd = grad_grad_input.data, s.data, x.data
        second = sd * (1 - sd) * (2 + xd * (1 - 2 * sd))
        grad_wrt_grad_output = minigrad.tensor(gg * dydx.data) if ctx.needs_input_grad[0] else None
        grad_wrt_x = (
            minigrad.tensor(gg * grad_output.data * second) if ctx.needs_input_grad[1] else None
        )
        return grad_wrt_grad_output, grad_wrt_x, None


def swish(x: Tensor) -> Tensor:
    """Functional form: ``Swish.apply(x)``."""
    if not isinstance(x, Tensor):
        raise TypeError(f"swish expects a minigrad.Tensor, got {type(x).__name__}")
    if x.dtype.kind != "f":
        raise TypeError(f"swish needs a floating-point tensor, got dtype {x.dtype}")
    return Swish.apply(x)


class SwishModule(minigrad.nn.Module):
    """The Function as a minigrad layer."""

    def forward(self, x: Tensor) -> Tensor:
        return swish(x)
