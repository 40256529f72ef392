"""minigrad.func: composable transformations with torch.func's names (vmap, grad, jvp, vjp,
jacrev, jacfwd, hessian, functional_call) plus make_ir / to_stablehlo / jit.

Each is an interpreter over a traced IR (minigrad.tracing) and a per-primitive rule table
registered beside the ops (minigrad.ops.*, "vmap", "jvp", "transpose", "lower"); the engine
and the ops' forward/backward know nothing about them. See HITCHHIKERS-GUIDE.md.
"""

from minigrad.func.autodiff import grad, grad_and_value, hessian, jacfwd, jacrev, jvp, vjp
from minigrad.func.emitter import LoweringError
from minigrad.func.functional_call import functional_call
from minigrad.func.ir import eval_ir, make_ir
from minigrad.func.jit import jit
from minigrad.func.pytree import tree_flatten, tree_map, tree_unflatten
from minigrad.func.stablehlo import to_stablehlo
from minigrad.func.vmap import vmap
from minigrad.tracer_base import TracingError
from minigrad.tracing import IR

__all__ = [
    "IR",
    "LoweringError",
    "TracingError",
    "eval_ir",
    "functional_call",
    "grad",
    "grad_and_value",
    "hessian",
    "jacfwd",
    "jacrev",
    "jit",
    "jvp",
    "make_ir",
    "to_stablehlo",
    "tree_flatten",
    "tree_map",
    "tree_unflatten",
    "vjp",
    "vmap",
]
