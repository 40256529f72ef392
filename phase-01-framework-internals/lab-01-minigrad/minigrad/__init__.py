"""minigrad: a small reverse-mode autodiff engine on NumPy with PyTorch's API.

Layout (engine apart from ops):
  tensor.py    Tensor (data, grad, grad_fn, version counter) and operator sugar
  function.py  Function / ctx / grad mode: records one graph node per op
  engine.py    backward(): dependency counting, topological order, accumulation
  ops.py       every built-in op as a Primitive, forward and backward side by side
  rules.py     per-primitive rule tables (the hook for vmap / IR-lowering rules)
"""

# tensor first: it imports ops, which import function (a deliberate, ordered cycle).
from minigrad.tensor import Tensor, tensor  # isort: skip
from minigrad import autograd, nn, ops, optim, rules  # isort: skip
from minigrad.engine import grad
from minigrad.function import (
    Context,
    Function,
    Primitive,
    enable_grad,
    is_grad_enabled,
    no_grad,
    set_grad_enabled,
)
from minigrad.gradcheck import GradcheckError, gradcheck, gradgradcheck

float32 = "float32"
float64 = "float64"

__all__ = [
    "Context",
    "Function",
    "GradcheckError",
    "Primitive",
    "Tensor",
    "autograd",
    "enable_grad",
    "grad",
    "gradcheck",
    "gradgradcheck",
    "is_grad_enabled",
    "nn",
    "no_grad",
    "ops",
    "optim",
    "rules",
    "set_grad_enabled",
    "tensor",
]
