"""minigrad: a small reverse-mode autodiff engine on NumPy with PyTorch's API.

Layout (engine apart from ops; the README's "Reading the core" gives the order):
  grad_mode.py, rules.py, tracer_base.py  the leaves: record or not, rule tables, is_tracer
  tensor.py    Tensor (data, grad, grad_fn, version counter), its ops and in-place ops
  tracing.py   Tracer, Trace, IR: what the transformations record
  function.py  Function / Primitive / ctx: one apply records one graph node per op
  engine.py    backward() and grad(): one Kahn loop, accumulation, retain/create_graph
  ops/         every built-in op as a Primitive, with its rules (each derivative once)
  torch_functions.py  torch's top-level functions (minigrad.add, minigrad.var, ...)
  creation.py  zeros, ones, full, arange, randn, rand, *_like, manual_seed
  func/        minigrad.func: vmap, grad, jvp, functional_call, jit, ...
"""

from minigrad import autograd, engine, nn, ops, optim, rules
from minigrad import tensor as _tensor_module
from minigrad.creation import (
    arange,
    full,
    full_like,
    manual_seed,
    ones,
    ones_like,
    rand,
    rand_like,
    randn,
    randn_like,
    zeros,
    zeros_like,
)
from minigrad.engine import grad
from minigrad.function import Context, Function, Primitive
from minigrad.grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled
from minigrad.gradcheck import GradcheckError, gradcheck, gradgradcheck
from minigrad.tensor import Tensor, tensor
from minigrad.torch_functions import *  # noqa: F403  (torch.add, torch.sum, torch.cat, ...)
from minigrad.torch_functions import __all__ as _torch_functions

# The import graph's one seam (see minigrad/tensor.py): Tensor's methods call ops and the engine.
_tensor_module.bind(ops, engine)

float32 = "float32"
float64 = "float64"

__all__ = [
    *_torch_functions,
    "arange",
    "full",
    "full_like",
    "manual_seed",
    "ones",
    "ones_like",
    "rand",
    "rand_like",
    "randn",
    "randn_like",
    "zeros",
    "zeros_like",
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
