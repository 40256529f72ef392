"""Forward and reverse mode: jvp, vjp, grad, jacfwd, jacrev, hessian.

``jvp`` interprets the traced IR with each primitive's jvp rule. Reverse mode is JAX's
*linearize + transpose*: the jvp interpreter runs with the primal values as they are and
the tangents as tracers of a fresh trace, which therefore records only the linear tangent
program (its constants are the residuals the primal side computed); ``vjp_fn`` walks that
program backwards with the transpose rules of the handful of linear primitives. No rule is
specific to reverse mode except those, and every rule applies primitives, so
``grad(grad(f))``, ``vmap(grad(f))`` and ``jacfwd(jacrev(f))`` need nothing new.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from minigrad import rules
from minigrad.func.ir import trace
from minigrad.func.pytree import as_tensor, is_tensor_leaf, tree_flatten, tree_unflatten
from minigrad.func.vmap import vmap
from minigrad.function import Primitive
from minigrad.rules import PRIMITIVES as P
from minigrad.tensor import Tensor
from minigrad.tracer_base import is_tracer
from minigrad.tracing import IR, Lit, Trace


def jvp_eval(ir: IR, primals: list, tangents: list) -> tuple[list, list]:
    """Interpret ``ir`` on (primal, tangent) pairs; a None tangent is a zero."""
    env = {v: (c, None) for v, c in zip(ir.constvars, ir.consts, strict=True)}
    env.update(zip(ir.invars, zip(primals, tangents, strict=True), strict=True))
    for eqn in ir.eqns:
        vals, tans = [], []
        for x in eqn.ins:
            v, t = (x.value, None) if isinstance(x, Lit) else env[x]
            vals.append(v)
            tans.append(t)
        if all(t is None for t in tans):
            env[eqn.out] = (eqn.prim.apply(*vals), None)
            continue
        if not issubclass(eqn.prim, Primitive):
            raise NotImplementedError(
                f"jvp/grad: the user Function {eqn.prim.__name__} has no jvp rule "
                "(minigrad.func differentiates primitives only)"
            )
        env[eqn.out] = rules.get("jvp", eqn.prim)(tuple(vals), tuple(tans))
    outs = [(o.value, None) if isinstance(o, Lit) else env[o] for o in ir.outs]
    return [o[0] for o in outs], [o[1] for o in outs]


def _zeros_like(x: Any) -> Tensor:
    x = as_tensor(x)
    return Tensor._wrap(np.zeros(x.shape, x.dtype))


def jvp(
    func: Callable[..., Any], primals: Sequence[Any], tangents: Sequence[Any], has_aux: bool = False
) -> tuple:
    """torch.func.jvp: ``(func(*primals), J @ tangents)``."""
    primals, tangents = tuple(primals), tuple(tangents)
    ir, out_spec = trace(func, primals)
    p_leaves = [as_tensor(x) for x in tree_flatten(primals)[0] if is_tensor_leaf(x)]
    t_leaves = [as_tensor(x) for x in tree_flatten(tangents)[0] if is_tensor_leaf(x)]
    if len(p_leaves) != len(t_leaves):
        raise ValueError(f"jvp: {len(t_leaves)} tangents for {len(p_leaves)} primal tensors")
    for p, t in zip(p_leaves, t_leaves, strict=True):
        if p.shape != t.shape:
            raise ValueError(f"jvp: tangent of shape {t.shape} for a primal of shape {p.shape}")
    outs, touts = jvp_eval(ir, p_leaves, t_leaves)
    touts = [
        _zeros_like(o) if t is None and is_tensor_leaf(o) else t
        for o, t in zip(outs, touts, strict=True)
    ]
    out, tout = tree_unflatten(out_spec, outs), tree_unflatten(out_spec, touts)
    if has_aux:
        return out[0], tout[0], out[1]
    return out, tout


def _linearize(func: Callable[..., Any], primals: tuple) -> tuple[list, Any, IR, list]:
    """The primal outputs, their structure, and the linear (tangent) program as an IR."""
    ir, out_spec = trace(func, primals)
    p_leaves = [as_tensor(x) for x in tree_flatten(primals)[0] if is_tensor_leaf(x)]
    with Trace() as lin:
        tans = [lin.new_arg(np.zeros(p.shape, p.dtype)) for p in p_leaves]
        outs, touts = jvp_eval(ir, p_leaves, tans)
        lin_ir = lin.to_ir(
            [t._var for t in tans],
            [t if is_tracer(t) and t._trace is lin else None for t in touts],
        )
    return outs, out_spec, lin_ir, p_leaves


def transpose_eval(lin_ir: IR, cts: list) -> list:
    """Cotangents of the linear program's inputs, given those of its outputs."""
    ct_env: dict = {}

    def add(var: Any, ct: Any) -> None:
        prev = ct_env.get(var)
        ct_env[var] = ct if prev is None else prev + ct

    for o, ct in zip(lin_ir.outs, cts, strict=True):
        if not isinstance(o, Lit) and ct is not None and o not in set(lin_ir.constvars):
            add(o, as_tensor(ct))
    consts = lin_ir.const_env()
    for eqn in reversed(lin_ir.eqns):
        ct = ct_env.pop(eqn.out, None)
        if ct is None:
            continue
        linear = [not isinstance(x, Lit) and x not in consts for x in eqn.ins]
        args = [
            x.value if isinstance(x, Lit) else (None if lin else consts[x])
            for x, lin in zip(eqn.ins, linear, strict=True)
        ]
        avals = [None if isinstance(x, Lit) else (x.shape, x.dtype) for x in eqn.ins]
        cts_in = rules.get("transpose", eqn.prim)(ct, tuple(args), tuple(linear), tuple(avals))
        for x, lin, c in zip(eqn.ins, linear, cts_in, strict=True):
            if lin and c is not None:
                add(x, c)
    return [ct_env.get(v) for v in lin_ir.invars]


def vjp(func: Callable[..., Any], *primals: Any, has_aux: bool = False) -> tuple:
    """torch.func.vjp: ``(func(*primals), vjp_fn)``; ``vjp_fn(ct)`` returns one cotangent per
    primal (pytrees like the primals)."""
    outs, out_spec, lin_ir, p_leaves = _linearize(func, primals)
    n_main = len(tree_flatten(tree_unflatten(out_spec, outs)[0])[0]) if has_aux else len(outs)
    leaves_spec = tree_flatten(primals)

    def vjp_fn(*cts: Any) -> tuple:
        ct_tree = cts[0] if len(cts) == 1 else cts
        ct_leaves = tree_flatten(ct_tree)[0] + [None] * (len(outs) - n_main)
        grads = transpose_eval(lin_ir, ct_leaves)
        grads = [_zeros_like(p) if g is None else g for p, g in zip(p_leaves, grads, strict=True)]
        it = iter(grads)
        leaves = [next(it) if is_tensor_leaf(x) else None for x in leaves_spec[0]]
        return tuple(tree_unflatten(leaves_spec[1], leaves))

    out = tree_unflatten(out_spec, outs)
    if has_aux:
        return out[0], vjp_fn, out[1]
    return out, vjp_fn


def _argnums(argnums: int | tuple[int, ...], n: int) -> tuple[int, ...]:
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    for a in nums:
        if not -n <= a < n:
            raise ValueError(f"argnums {a} is out of range for a function of {n} arguments")
    return tuple(a % n for a in nums)


def _with_args(func: Callable[..., Any], args: tuple, nums: tuple[int, ...]) -> Callable[..., Any]:
    def partial(*diff: Any) -> Any:
        full = list(args)
        for i, v in zip(nums, diff, strict=True):
            full[i] = v
        return func(*full)

    return partial


def grad_and_value(
    func: Callable[..., Any], argnums: Any = 0, has_aux: bool = False
) -> Callable[..., Any]:
    """torch.func.grad_and_value: (gradient, value) (value is (output, aux) with has_aux)."""

    def wrapped(*args: Any) -> Any:
        nums = _argnums(argnums, len(args))
        res = vjp(_with_args(func, args, nums), *[args[i] for i in nums], has_aux=has_aux)
        out, vjp_fn = res[0], res[1]
        if not isinstance(out, Tensor) or out.data.size != 1:
            shape = getattr(out, "shape", type(out).__name__)
            raise RuntimeError(f"grad: the function must return a one-element tensor, got {shape}")
        grads = vjp_fn(Tensor._wrap(np.ones(out.shape, out.dtype)))
        g = grads[0] if isinstance(argnums, int) else grads
        return (g, (out, res[2])) if has_aux else (g, out)

    return wrapped


def grad(func: Callable[..., Any], argnums: Any = 0, has_aux: bool = False) -> Callable[..., Any]:
    """torch.func.grad: the gradient of a scalar function w.r.t. ``argnums`` (pytrees ok);
    with ``has_aux``, ``func`` returns (output, aux) and grad returns (gradient, aux)."""
    inner = grad_and_value(func, argnums, has_aux)

    def wrapped(*args: Any) -> Any:
        g, value = inner(*args)
        return (g, value[1]) if has_aux else g

    return wrapped


def _basis(x: Tensor) -> Tensor:
    """The standard basis of x's space, one basis tensor per row: shape (x.size, *x.shape)."""
    return Tensor._wrap(np.eye(x.data.size, dtype=x.dtype).reshape((x.data.size,) + x.shape))


def jacrev(func: Callable[..., Any], argnums: Any = 0, has_aux: bool = False) -> Callable[..., Any]:
    """torch.func.jacrev: one vjp per output element, batched by vmap (out.shape + x.shape);
    with ``has_aux``, ``func`` returns (output, aux) and jacrev returns (jacobian, aux)."""

    def wrapped(*args: Any) -> Any:
        nums = _argnums(argnums, len(args))
        out, vjp_fn, *aux = vjp(
            _with_args(func, args, nums), *[args[i] for i in nums], has_aux=has_aux
        )
        rows = vmap(vjp_fn)(_basis(out))  # each: (out.size, *x.shape)
        jacs = tuple(r.reshape(out.shape + args[i].shape) for r, i in zip(rows, nums, strict=True))
        jac = jacs[0] if isinstance(argnums, int) else jacs
        return (jac, aux[0]) if has_aux else jac

    return wrapped


def jacfwd(
    func: Callable[..., Any], argnums: Any = 0, randomness: str = "error"
) -> Callable[..., Any]:
    """torch.func.jacfwd: one jvp per input element, batched by vmap (out.shape + x.shape)."""

    def wrapped(*args: Any) -> Any:
        nums = _argnums(argnums, len(args))
        jacs = []
        for i in nums:
            x = as_tensor(args[i])
            f_i = _with_args(func, args, (i,))

            def push(t: Tensor, f_i: Any = f_i, x: Tensor = x) -> Any:
                return jvp(f_i, (x,), (t,))[1]

            cols = vmap(push, randomness=randomness)(_basis(x))  # (x.size, *out.shape)
            leaves, spec = tree_flatten(cols)
            jacs.append(tree_unflatten(spec, [_columns_to_jacobian(c, x) for c in leaves]))
        if isinstance(argnums, int):
            return jacs[0]
        if isinstance(jacs[0], Tensor):
            return tuple(jacs)
        # a tuple output: output-major, as torch.func (result[j][i] = d out_j / d x_i)
        return type(jacs[0])(tuple(j[k] for j in jacs) for k in range(len(jacs[0])))

    return wrapped


def _columns_to_jacobian(cols: Tensor, x: Tensor) -> Tensor:
    """(x.size, *out.shape) jvp columns -> the (*out.shape, *x.shape) Jacobian."""
    out_nd = cols.ndim - 1
    moved = P["Permute"].apply(cols, tuple(range(1, out_nd + 1)) + (0,))
    return moved.reshape(moved.shape[:-1] + x.shape)


def hessian(func: Callable[..., Any], argnums: Any = 0) -> Callable[..., Any]:
    """torch.func.hessian: jacfwd(jacrev(func))."""
    return jacfwd(jacrev(func, argnums), argnums)
