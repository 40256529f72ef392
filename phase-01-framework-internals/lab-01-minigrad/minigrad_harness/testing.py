"""The one shared test helper: run the same expression in minigrad and in PyTorch, compare.

An expression is ``expr(F, *xs)``: ``F`` is ``minigrad.nn.functional`` or
``torch.nn.functional`` and the ``xs`` are that library's tensors, so the very same lambda
(operators, methods such as ``x.sum(dim=1)``, ``F.softmax``) runs in both. Each input spec is
a shape (random float64, requires grad; ``()`` is a 0-dim tensor) or an ndarray: a float one
gives fixed values that require grad (ties for max, zeros for pow), an integer one is a
constant (class targets, indices).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import minigrad
import numpy as np
from minigrad.tensor import Tensor

InputSpec = tuple[int, ...] | np.ndarray


def requires_grad(spec: InputSpec) -> bool:
    """A shape or a float array is a differentiable input; an integer array is a constant."""
    return not isinstance(spec, np.ndarray) or spec.dtype.kind == "f"


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max_i |a_i - e_i| / max(|e_i|, 1e-6): elementwise relative, floored near zero."""
    actual, expected = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    if actual.shape != expected.shape:
        raise AssertionError(f"shape {actual.shape} differs from torch's {expected.shape}")
    if actual.size == 0:
        return 0.0
    return float(np.max(np.abs(actual - expected) / np.maximum(np.abs(expected), 1e-6)))


@dataclass
class Comparison:
    """What ``compare_with_torch`` measured."""

    output_error: float
    grad_errors: list[float]
    primitives: set[str] = field(default_factory=set)
    gradcheck_passed: bool | None = None

    @property
    def max_error(self) -> float:
        return max([self.output_error, *self.grad_errors])


def make_inputs(specs: Sequence[InputSpec], seed: int, positive: bool) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for spec in specs:
        if isinstance(spec, np.ndarray):
            arrays.append(spec.astype(np.float64) if spec.dtype.kind == "f" else spec)
        elif positive:
            arrays.append(rng.uniform(0.5, 2.0, spec))
        else:
            arrays.append(rng.standard_normal(spec))
    return arrays


def primitives_in_graph(t: Tensor) -> set[str]:
    """Names of the Functions recorded in ``t``'s graph (iterative walk)."""
    seen, names, stack = set(), set(), [t.grad_fn] if t.grad_fn is not None else []
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        names.add(node._fn.__name__)
        stack.extend(e for e in node.next_edges if e is not None and not isinstance(e, Tensor))
    return names


def compare_with_torch(
    expr: Callable[..., Any],
    *specs: InputSpec,
    seed: int = 0,
    positive: bool = False,
    gradcheck: bool = True,
) -> Comparison:
    """Evaluate ``expr`` in both libraries on the same float64 inputs; compare the outputs and
    the gradients (for a random upstream gradient), and optionally run minigrad.gradcheck."""
    import minigrad.nn.functional as mg_f
    import torch
    import torch.nn.functional as torch_f

    arrays = make_inputs(specs, seed, positive)
    diff = [requires_grad(s) for s in specs]
    mg_in = [Tensor(a.copy(), requires_grad=d) for a, d in zip(arrays, diff, strict=True)]
    th_in = [torch.tensor(a.copy(), requires_grad=d) for a, d in zip(arrays, diff, strict=True)]
    mg_out = expr(mg_f, *mg_in)
    th_out = expr(torch_f, *th_in)
    upstream = np.random.default_rng(seed + 1).standard_normal(th_out.shape)
    mg_out.backward(upstream)
    th_out.backward(torch.from_numpy(upstream))
    errors = []
    for m, t, d in zip(mg_in, th_in, diff, strict=True):
        if d:
            if m.grad is None or t.grad is None:
                raise AssertionError(f"missing gradient: minigrad {m.grad}, torch {t.grad}")
            errors.append(relative_error(m.grad.data, t.grad.numpy()))
    result = Comparison(
        output_error=relative_error(mg_out.data, th_out.detach().numpy()),
        grad_errors=errors,
        primitives=primitives_in_graph(mg_out),
    )
    if gradcheck:
        fresh = [Tensor(a.copy(), requires_grad=d) for a, d in zip(arrays, diff, strict=True)]
        result.gradcheck_passed = minigrad.gradcheck(lambda *xs: expr(mg_f, *xs), fresh)
    return result


def second_order_with_torch(
    expr: Callable[..., Any], *specs: InputSpec, seed: int = 0, positive: bool = False
) -> float:
    """Hessian-vector product d/dx <d expr/dx, v> in both libraries (create_graph=True);
    returns the largest relative error over the first-order grads and the HVPs."""
    import minigrad.nn.functional as mg_f
    import torch
    import torch.nn.functional as torch_f

    arrays = make_inputs(specs, seed, positive)
    diff = [requires_grad(s) for s in specs]
    rng = np.random.default_rng(seed + 2)
    vs = [rng.standard_normal(a.shape) for a, d in zip(arrays, diff, strict=True) if d]

    def run(lib_f: Any, make: Callable, grad: Callable) -> list[np.ndarray]:
        xs = [make(a.copy(), d) for a, d in zip(arrays, diff, strict=True)]
        wrt = [x for x, d in zip(xs, diff, strict=True) if d]
        y = expr(lib_f, *xs)
        if y.shape != ():
            y = y.sum()
        gs = grad(y, wrt, create_graph=True)
        dot = sum((g * make(v, False)).sum() for g, v in zip(gs, vs, strict=True))
        hvs = grad(dot, wrt)
        return [np.asarray(g.detach().numpy()) for g in gs] + [
            np.asarray(h.detach().numpy()) for h in hvs
        ]

    ours = run(
        mg_f, lambda a, d: Tensor(a, requires_grad=d), lambda y, w, **k: minigrad.grad(y, w, **k)
    )
    theirs = run(
        torch_f,
        lambda a, d: torch.tensor(a, requires_grad=d),
        lambda y, w, **k: torch.autograd.grad(y, w, **k),
    )
    return max(relative_error(a, b) for a, b in zip(ours, theirs, strict=True))


def attention_matches_torch(
    shapes: Sequence[tuple[int, ...]], seed: int, tol: float = 1e-5
) -> tuple[list[np.ndarray], Tensor]:
    """minigrad's fused attention against torch's SDPA on the same float64 inputs: output and
    every input's gradient within ``tol``. Returns the input arrays and minigrad's output."""
    import torch
    from minigrad.nn.functional import scaled_dot_product_attention

    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(s) for s in shapes]
    ours = [minigrad.Tensor(a.copy(), requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = scaled_dot_product_attention(*ours)
    ref = torch.nn.functional.scaled_dot_product_attention(*theirs)
    upstream = rng.standard_normal(ref.shape)
    out.backward(upstream)
    ref.backward(torch.from_numpy(upstream))
    assert relative_error(out.data, ref.detach().numpy()) < tol
    for m, t in zip(ours, theirs, strict=True):
        assert relative_error(m.grad.data, t.grad.numpy()) < tol
    return arrays, out
