"""Pytrees: nested tuples, lists and dicts of tensors (torch.func's and JAX's containers)."""

from __future__ import annotations

from typing import Any

import numpy as np

from minigrad.tensor import Tensor

LEAF = ("leaf",)


def tree_flatten(tree: Any) -> tuple[list, Any]:
    """The leaves in order, and a description of the structure to rebuild it."""
    if isinstance(tree, (tuple, list)):
        leaves, specs = [], []
        for child in tree:
            sub, spec = tree_flatten(child)
            leaves += sub
            specs.append(spec)
        return leaves, (type(tree), specs)
    if isinstance(tree, dict):
        leaves, specs = [], []
        for child in tree.values():
            sub, spec = tree_flatten(child)
            leaves += sub
            specs.append(spec)
        return leaves, (dict, list(tree.keys()), specs)
    return [tree], LEAF


def tree_unflatten(spec: Any, leaves: list) -> Any:
    it = iter(leaves)
    out = _build(spec, it)
    return out


def _build(spec: Any, it: Any) -> Any:
    if spec is LEAF or spec == LEAF:
        return next(it)
    if spec[0] is dict:
        return {k: _build(s, it) for k, s in zip(spec[1], spec[2], strict=True)}
    kind, specs = spec
    children = [_build(s, it) for s in specs]
    return tuple(children) if kind is tuple else children


def tree_map(fn: Any, tree: Any) -> Any:
    leaves, spec = tree_flatten(tree)
    return tree_unflatten(spec, [fn(x) for x in leaves])


def broadcast_prefix(prefix: Any, tree: Any, what: str) -> list:
    """One entry of ``prefix`` per leaf of ``tree``: an int/None prefix covers a whole subtree
    (torch.func's in_dims rule)."""
    if prefix is None or isinstance(prefix, int):
        return [prefix] * len(tree_flatten(tree)[0])
    if isinstance(prefix, dict) and isinstance(tree, dict):
        if set(prefix) != set(tree):
            raise ValueError(f"{what}: keys {sorted(prefix)} do not match {sorted(tree)}")
        return [x for k in tree for x in broadcast_prefix(prefix[k], tree[k], what)]
    if isinstance(prefix, (tuple, list)) and isinstance(tree, (tuple, list)):
        if len(prefix) != len(tree):
            raise ValueError(
                f"{what}: {len(prefix)} entries given for a structure of {len(tree)} entries"
            )
        return [x for p, t in zip(prefix, tree, strict=True) for x in broadcast_prefix(p, t, what)]
    raise ValueError(f"{what}: {prefix!r} does not match the structure of the arguments")


def is_tensor_leaf(x: Any) -> bool:
    return isinstance(x, (Tensor, np.ndarray))


def as_tensor(x: Any) -> Tensor:
    return x if isinstance(x, Tensor) else Tensor._wrap(np.asarray(x))
