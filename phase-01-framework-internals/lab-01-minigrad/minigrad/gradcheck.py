"""Numerical gradient checks (central differences in float64), as torch.autograd.gradcheck."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from minigrad.engine import grad as autograd_grad
from minigrad.tensor import Tensor


class GradcheckError(AssertionError):
    """Analytic and numerical derivatives disagree."""


def _outputs(fn: Callable, inputs: Sequence[Any]) -> tuple[Tensor, ...]:
    out = fn(*inputs)
    return out if isinstance(out, tuple) else (out,)


def _check_inputs(inputs: Sequence[Any]) -> list[int]:
    diff = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]
    if not diff:
        raise ValueError("gradcheck: no input requires grad")
    for i in diff:
        if inputs[i].dtype != np.float64:
            raise TypeError(
                f"gradcheck: input {i} is {inputs[i].dtype}; finite differences need float64"
            )
    return diff


def jacobians(fn: Callable, inputs: Sequence[Any], eps: float = 1e-6):
    """Analytic and numerical Jacobians, one (out.size, in.size) array per (output, input)."""
    diff = _check_inputs(inputs)
    outs = _outputs(fn, inputs)
    analytic: dict[tuple[int, int], np.ndarray] = {}
    numeric: dict[tuple[int, int], np.ndarray] = {}
    for o, out in enumerate(outs):
        for i in diff:
            analytic[o, i] = np.zeros((out.data.size, inputs[i].data.size))
            numeric[o, i] = np.zeros((out.data.size, inputs[i].data.size))
        if not out.requires_grad:
            continue
        for j in range(out.data.size):
            seed = np.zeros(out.shape, dtype=out.dtype)
            seed.flat[j] = 1.0
            grads = autograd_grad(
                out, [inputs[i] for i in diff], seed, retain_graph=True, allow_unused=True
            )
            for i, gi in zip(diff, grads, strict=True):
                if gi is not None:
                    analytic[o, i][j] = gi.data.ravel()
    # Grad stays enabled: fn may itself differentiate (gradgradcheck's first_derivatives).
    for i in diff:
        data = inputs[i].data
        # Perturb the input array itself, element by element in C order (the order of the
        # analytic rows' ravel). Not through data.reshape(-1): for a non-contiguous input that
        # is a copy, and the edits would never reach the input.
        for k, idx in enumerate(np.ndindex(data.shape)):
            orig = data[idx]
            data[idx] = orig + eps
            plus = [o.data.copy() for o in _outputs(fn, inputs)]
            data[idx] = orig - eps
            minus = [o.data.copy() for o in _outputs(fn, inputs)]
            data[idx] = orig
            for o in range(len(outs)):
                numeric[o, i][:, k] = ((plus[o] - minus[o]) / (2 * eps)).ravel()
    return analytic, numeric


def gradcheck(
    fn: Callable,
    inputs: Sequence[Any],
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    raise_exception: bool = True,
) -> bool:
    """True when every analytic derivative matches central differences (|a-n| <= atol+rtol|n|)."""
    if isinstance(inputs, Tensor):
        inputs = (inputs,)
    analytic, numeric = jacobians(fn, inputs, eps)
    for (o, i), a in analytic.items():
        n = numeric[o, i]
        if not np.allclose(a, n, rtol=rtol, atol=atol):
            if not raise_exception:
                return False
            err = np.abs(a - n).max()
            raise GradcheckError(
                f"Jacobian mismatch for output {o} w.r.t. input {i}: max |analytic - numerical| "
                f"= {err:.3g}\nanalytic:\n{a}\nnumerical:\n{n}"
            )
    return True


def gradgradcheck(
    fn: Callable,
    inputs: Sequence[Any],
    grad_outputs: Sequence[Tensor] | None = None,
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-3,
    seed: int = 0,
    raise_exception: bool = True,
) -> bool:
    """gradcheck of the map (inputs, v) -> vᵀ·J(inputs): checks the second derivatives."""
    if isinstance(inputs, Tensor):
        inputs = (inputs,)
    diff = _check_inputs(inputs)
    outs = _outputs(fn, inputs)
    if grad_outputs is None:
        rng = np.random.default_rng(seed)
        grad_outputs = tuple(Tensor(rng.standard_normal(o.shape), requires_grad=True) for o in outs)
    n_in = len(inputs)

    def first_derivatives(*args: Any) -> tuple[Tensor, ...]:
        xs, vs = args[:n_in], args[n_in:]
        ys = _outputs(fn, xs)
        gs = autograd_grad(
            list(ys), [xs[i] for i in diff], list(vs), create_graph=True, allow_unused=True
        )
        # An unused input has a zero derivative; keep the tuple shape fixed.
        return tuple(
            g if g is not None else Tensor(np.zeros(xs[i].shape))
            for i, g in zip(diff, gs, strict=True)
        )

    return gradcheck(
        first_derivatives,
        tuple(inputs) + tuple(grad_outputs),
        eps=eps,
        atol=atol,
        rtol=rtol,
        raise_exception=raise_exception,
    )
