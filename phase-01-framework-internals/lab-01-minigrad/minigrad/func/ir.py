"""make_ir and the plain interpreter of an IR (see minigrad.tracing for the data types)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from minigrad.func.pytree import as_tensor, is_tensor_leaf, tree_flatten, tree_unflatten
from minigrad.tracing import IR, Lit, Trace, Tracer


def trace(f: Callable[..., Any], args: tuple) -> tuple[IR, Any]:
    """Trace ``f(*args)``: every tensor leaf of ``args`` becomes an input of the IR. Returns
    the IR and the output structure (for tree_unflatten)."""
    leaves, spec = tree_flatten(args)
    with Trace() as tr:
        invars, traced = [], []
        for leaf in leaves:
            if is_tensor_leaf(leaf):
                t = tr.new_arg(as_tensor(leaf).data)
                invars.append(t._var)
                traced.append(t)
            else:
                traced.append(leaf)
        out = f(*tree_unflatten(spec, traced))
        out_leaves, out_spec = tree_flatten(out)
        ir = tr.to_ir(invars, out_leaves)
    return ir, out_spec


def tensor_leaves(args: tuple) -> list:
    """The tensor leaves of ``args``, in the order ``trace`` makes them IR inputs."""
    return [as_tensor(x) for x in tree_flatten(args)[0] if is_tensor_leaf(x)]


def read(env: dict, x: Any) -> Any:
    return x.value if isinstance(x, Lit) else env[x]


def eval_ir(ir: IR, inputs: list) -> list:
    """Run the IR's equations on concrete values (or on tracers of an enclosing trace)."""
    env = ir.const_env()
    env.update(zip(ir.invars, inputs, strict=True))
    for eqn in ir.eqns:
        env[eqn.out] = eqn.prim.apply(*[read(env, x) for x in eqn.ins])
    return [read(env, o) for o in ir.outs]


def make_ir(f: Callable[..., Any]) -> Callable[..., IR]:
    """``make_ir(f)(*args)``: the IR of ``f`` at these argument shapes (like jax.make_jaxpr).
    ``f`` may itself be a transformation, e.g. ``make_ir(grad(loss))(params, x, y)``."""

    def traced(*args: Any) -> IR:
        ir, _ = trace(f, args)
        return ir

    return traced


__all__ = ["IR", "Tracer", "eval_ir", "make_ir", "trace", "tensor_leaves"]
