"""Pytrees: nested tuples, lists and dicts of tensors (torch.func's and JAX's containers)."""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
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


def tree_unflatten(spec: Any, leaves: Sequence) -> Any:
    """The structure ``spec`` (from ``tree_flatten``) rebuilt around ``leaves``, in order."""
    return tree_builder(spec)(leaves)


def tree_builder(spec: Any) -> Callable[[Sequence], Any]:
    """A function rebuilding the structure ``spec`` around a sequence of leaves, with the walk
    of ``spec`` done here, once: a structure rebuilt on every call (a jitted function's
    outputs) keeps its builder. Each container becomes a closure that reads its leaves by
    position; a container of leaves only reads them as one slice."""
    return _builder(spec, 0)[0]


def _builder(spec: Any, start: int) -> tuple[Callable[[Sequence], Any], int]:
    """The builder of ``spec`` whose first leaf is ``leaves[start]``, and the index after its
    last leaf."""
    if spec is LEAF or spec == LEAF:
        return operator.itemgetter(start), start + 1
    is_dict = spec[0] is dict
    specs = spec[2] if is_dict else spec[1]
    if all(s is LEAF or s == LEAF for s in specs):
        stop = start + len(specs)
        if is_dict:
            keys = spec[1]
            return (lambda leaves: dict(zip(keys, leaves[start:stop], strict=True))), stop
        if spec[0] is tuple:
            return (lambda leaves: tuple(leaves[start:stop])), stop
        return (lambda leaves: list(leaves[start:stop])), stop
    children = []
    for s in specs:
        child, start = _builder(s, start)
        children.append(child)
    if is_dict:
        keys = spec[1]
        return (lambda leaves: {k: c(leaves) for k, c in zip(keys, children, strict=True)}), start
    if spec[0] is tuple:
        return (lambda leaves: tuple([c(leaves) for c in children])), start
    return (lambda leaves: [c(leaves) for c in children]), start


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
