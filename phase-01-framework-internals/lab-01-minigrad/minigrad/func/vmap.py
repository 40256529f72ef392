"""vmap: trace ``f`` on one example, then interpret the IR with each primitive's batching rule.

Every batched value carries its batch as dim 0 (in_dims are moved there first, out_dims
applied last); a rule gets the op's arguments and which of them are batched, and applies
ordinary primitives to them. Those may be tracers of an enclosing transformation, so vmap
composes with grad/jvp/vmap without any rule knowing about the others.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from minigrad import rules
from minigrad.func.ir import trace
from minigrad.func.pytree import (
    as_tensor,
    broadcast_prefix,
    is_tensor_leaf,
    tree_flatten,
    tree_unflatten,
)
from minigrad.function import Primitive
from minigrad.rules import PRIMITIVES as P
from minigrad.tracing import IR, Lit

_warned: set[type] = set()


_UNSET: Any = object()


def vmap(
    func: Callable[..., Any],
    in_dims: Any = 0,
    out_dims: Any = 0,
    randomness: str = "error",
    *,
    chunk_size: int | None = None,
    in_axes: Any = _UNSET,
    out_axes: Any = _UNSET,
) -> Callable[..., Any]:
    """torch.func.vmap: ``func`` mapped over dim ``in_dims`` of its inputs (None: not mapped),
    outputs stacked along ``out_dims``. Pytrees of tensors in and out; nests. JAX's names
    ``in_axes`` / ``out_axes`` are accepted as keywords for the same two arguments.
    ``chunk_size`` (how many examples torch computes at once) changes no result and is
    ignored: minigrad maps the whole batch in one pass."""
    if in_axes is not _UNSET:
        if in_dims != 0:
            raise TypeError("vmap: give in_dims or in_axes, not both")
        in_dims = in_axes
    if out_axes is not _UNSET:
        if out_dims != 0:
            raise TypeError("vmap: give out_dims or out_axes, not both")
        out_dims = out_axes
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"vmap: chunk_size must be a positive int or None, not {chunk_size!r}")
    if randomness not in ("error", "same", "different"):
        raise ValueError(
            f"vmap: randomness must be 'error', 'same' or 'different', not {randomness!r}"
        )
    if randomness == "different":
        raise NotImplementedError("vmap: randomness='different' is not supported by minigrad")

    def batched_func(*args: Any) -> Any:
        axes = broadcast_prefix(in_dims, args, "vmap in_dims")
        leaves, spec = tree_flatten(args)
        size, values, examples = _split_batch(leaves, axes)
        rules.RANDOMNESS.append(randomness)
        try:
            ir, out_spec = trace(func, tree_unflatten(spec, examples))
        finally:
            rules.RANDOMNESS.pop()
        inputs = [
            (v, b)
            for v, b, x in zip(values, _batched_flags(leaves, axes), leaves, strict=True)
            if is_tensor_leaf(x)
        ]
        outs = batch_eval(ir, inputs, size)
        shape_only = tree_unflatten(out_spec, [None] * len(outs))
        out_ax = broadcast_prefix(out_dims, shape_only, "vmap out_dims")
        return tree_unflatten(
            out_spec, [_place(o, ax, size) for o, ax in zip(outs, out_ax, strict=True)]
        )

    return batched_func


def _batched_flags(leaves: list, axes: list) -> list[bool]:
    return [ax is not None and is_tensor_leaf(x) for x, ax in zip(leaves, axes, strict=True)]


def _split_batch(leaves: list, axes: list) -> tuple[int, list, list]:
    """Move each mapped dim to the front; the per-example stand-ins the trace runs on."""
    size, values, examples = None, [], []
    for x, ax in zip(leaves, axes, strict=True):
        if ax is None or not is_tensor_leaf(x):
            values.append(x)
            examples.append(x)
            continue
        t = as_tensor(x)
        if t.ndim == 0:
            raise ValueError("vmap: cannot map over a 0-dim tensor (in_axes names a dim it lacks)")
        d = ax % t.ndim
        if size is None:
            size = t.shape[d]
        elif t.shape[d] != size:
            raise ValueError(f"vmap: mapped dims have different sizes ({size} and {t.shape[d]})")
        if d:
            t = P["Permute"].apply(t, (d,) + tuple(i for i in range(t.ndim) if i != d))
        values.append(t)
        rep = np.asarray(t.data[0]) if t.shape[0] else np.zeros(t.shape[1:], t.dtype)
        examples.append(rep)
    if size is None:
        raise ValueError("vmap: no tensor input is mapped (every in_axes entry is None)")
    return size, values, examples


def _place(out: Any, ax: Any, size: int) -> Any:
    value, batched = out
    if ax is None:
        if batched:
            raise ValueError("vmap: out_axes=None for an output that depends on the mapped inputs")
        return value
    value = as_tensor(value) if is_tensor_leaf(value) or isinstance(value, (int, float)) else value
    if not batched:
        value = P["BroadcastTo"].apply(value, (size,) + value.shape)
    d = ax % value.ndim
    if d:
        order = list(range(1, d + 1)) + [0] + list(range(d + 1, value.ndim))
        value = P["Permute"].apply(value, tuple(order))
    return value


def batch_eval(ir: IR, inputs: list[tuple[Any, bool]], size: int) -> list[tuple[Any, bool]]:
    """Interpret ``ir`` on batched values: (value, is_batched) per input and output."""
    env = {v: (c, False) for v, c in zip(ir.constvars, ir.consts, strict=True)}
    env.update(zip(ir.invars, inputs, strict=True))
    for eqn in ir.eqns:
        vals, flags = [], []
        for x in eqn.ins:
            v, b = (x.value, False) if isinstance(x, Lit) else env[x]
            vals.append(v)
            flags.append(b)
        if not any(flags):
            env[eqn.out] = (eqn.prim.apply(*vals), False)
            continue
        rule = _batching_rule(eqn.prim)
        env[eqn.out] = (rule(size, tuple(vals), tuple(flags)), True)
    return [(o.value, False) if isinstance(o, Lit) else env[o] for o in ir.outs]


def _batching_rule(prim: type) -> Callable[..., Any]:
    rule = rules.RULES.get("vmap", {}).get(prim)
    if rule is not None:
        return rule
    if issubclass(prim, Primitive):
        return rules.get("vmap", prim)  # raises, naming the primitive
    if prim not in _warned:  # a user Function: run it once per example
        _warned.add(prim)
        warnings.warn(
            f"vmap: {prim.__name__} has no batching rule; it runs once per example (slow)",
            stacklevel=3,
        )
    return lambda size, args, batched: _loop(prim, size, args, batched)


def _loop(prim: type, size: int, args: tuple, batched: tuple) -> Any:
    index = P["Index"]
    outs = [
        prim.apply(*[index.apply(a, i) if b else a for a, b in zip(args, batched, strict=True)])
        for i in range(size)
    ]
    return P["Stack"].apply(0, *outs)
