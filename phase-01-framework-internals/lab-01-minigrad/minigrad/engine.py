"""The backward engine: graph discovery, topological order, gradient routing, accumulation.

It knows no op. A node is a Function's ``ctx`` (``tensor.grad_fn``); ``node.next_edges[i]``
points at the node that produced input i, or at the leaf Tensor itself, or is None.

Order: a node may run only after *every* consumer of its output has sent its gradient, else
a partial sum would flow on. That is a topological order of the reversed graph; we get it
with Kahn's algorithm over dependency counts (like PyTorch's ``Engine::execute``), iteratively,
so a 10,000-op chain needs no recursion.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minigrad.function import Context
from minigrad.grad_mode import grad_mode
from minigrad.tensor import Tensor


def count_dependencies(roots: list[Context]) -> dict[Context, int]:
    """deps[node] = how many edges from nodes reachable from ``roots`` point at node."""
    deps: dict[Context, int] = {}
    seen = set(roots)
    stack = list(roots)
    while stack:
        node = stack.pop()
        for nxt in node.next_edges:
            if nxt is None or isinstance(nxt, Tensor):
                continue
            deps[nxt] = deps.get(nxt, 0) + 1
            if nxt not in seen:
                seen.add(nxt)
                stack.append(nxt)
    return deps


def _root_gradient(t: Tensor, grad: Any, create_graph: bool) -> Any:
    if not isinstance(t, Tensor):
        raise TypeError(f"backward() needs Tensors, got {type(t).__name__}")
    if not t._requires_grad:
        raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
    if grad is None:
        if t.data.size != 1:
            raise RuntimeError(
                f"grad can be implicitly created only for scalar outputs; this output has shape "
                f"{t.shape}: pass gradient= (a tensor of that shape) to backward()"
            )
        g = np.ones(t.shape, dtype=t.dtype)
        return Tensor._wrap(g) if create_graph else g
    if isinstance(grad, Tensor):
        g_shape = grad.shape
    else:
        grad = np.asarray(grad, dtype=t.dtype)
        g_shape = grad.shape
    if g_shape != t.shape:
        raise RuntimeError(
            f"mismatch in shape: gradient has shape {g_shape} but the output has shape {t.shape}"
        )
    if isinstance(grad, Tensor) and grad.dtype != t.dtype:
        grad = grad.to(t.dtype)  # as torch: the seed is cast to the output's dtype
    if create_graph:
        return grad if isinstance(grad, Tensor) else Tensor._wrap(grad)
    return grad.data if isinstance(grad, Tensor) else grad


def _accumulate(leaf: Tensor, g: Any, create_graph: bool, copy: bool = False) -> None:
    """AccumulateGrad: leaf.grad += g, never in place (the old .grad may be held elsewhere).

    The first gradient is stored as is only when it is an array that nobody else holds;
    ``copy=True`` says it may be shared (a pass-through of a node's incoming gradient, which
    can also reach another leaf or be the caller's ``gradient`` array; anything a user
    Function returned). Like torch, we copy then, so an in-place change of one ``.grad``
    (gradient clipping, say) never leaks into another leaf or into the caller's array.
    """
    if create_graph:
        if not isinstance(g, Tensor):
            g = Tensor._wrap(np.asarray(g))
        if leaf.grad is None:
            # torch clones here too: g may be the caller's seed, another leaf's gradient or
            # a read-only broadcast view. A recorded copy (in the leaf's dtype) keeps it
            # differentiable.
            leaf.grad = g.to(leaf.dtype, copy=True)
        else:
            total = leaf.grad + g
            leaf.grad = total if total.dtype == leaf.dtype else total.to(leaf.dtype)
        return
    if isinstance(g, Tensor):
        g = g.data
    elif type(g) is not np.ndarray:  # 0-d arithmetic hands back NumPy scalars
        g = np.asarray(g)
    if leaf.grad is None:
        if copy or g.dtype != leaf.data.dtype or not g.flags.writeable:
            # astype copies: the right dtype, a real array instead of a broadcast view, and
            # memory of the leaf's own
            g = g.astype(leaf.data.dtype)
        leaf.grad = Tensor._wrap(g)
    else:
        leaf.grad = Tensor._wrap((leaf.grad.data + g).astype(leaf.data.dtype, copy=False))


def _passes_through(gi: Any, g: Any) -> bool:
    """Is ``gi`` (an input's gradient) the node's incoming gradient ``g`` or a view of it?
    (Add hands g on unchanged, Reshape and Permute as views.) Anything else that a primitive
    backward returns is a fresh array."""
    if type(gi) is not np.ndarray:  # a Tensor or a NumPy scalar: copy to be safe (rare)
        return True
    return gi is g or (
        gi.base is not None and np.may_share_memory(gi, g.data if isinstance(g, Tensor) else g)
    )


def _call_backward(node: Context, g: Any, create_graph: bool) -> tuple:
    """A node's backward off the hot path: a user Function (Tensors in, shapes checked) or a
    primitive under create_graph (grad mode on, so its backward's ops are recorded)."""
    node._check_versions()
    fn = node._fn
    if node._raw:
        if create_graph:
            node._graph_mode = True
            try:
                with grad_mode(True):
                    grads = fn.backward(node, g)
            finally:
                # back to raw arrays: a later first-order backward through this retained
                # node takes the fast path, which does not set the mode
                node._graph_mode = False
        else:
            grads = fn.backward(node, g)
    else:
        gt = g if isinstance(g, Tensor) else Tensor._wrap(g)
        with grad_mode(create_graph):
            grads = fn.backward(node, gt)
    if not isinstance(grads, tuple):
        grads = (grads,)
    if len(grads) != len(node.next_edges):
        raise RuntimeError(
            f"{fn.__name__}.backward returned {len(grads)} gradients but forward took "
            f"{len(node.next_edges)} inputs (return None for non-differentiable ones)"
        )
    if not node._raw:  # a user Function: check every edge against the recorded input shape
        for i, (gi, edge, shape) in enumerate(
            zip(grads, node.next_edges, node.input_shapes, strict=True)
        ):
            if gi is None or edge is None:
                continue
            gshape = gi.shape if isinstance(gi, (Tensor, np.ndarray, np.generic)) else np.shape(gi)
            if gshape != shape:
                raise RuntimeError(
                    f"Function {fn.__name__}.backward returned a gradient of shape {gshape} "
                    f"for input {i}, which has shape {shape}"
                )
    return grads


def _nodes_leading_to(roots: list[Context], capture: dict[int, Any]) -> set[Context]:
    """The nodes ``grad()`` must run: those from which a requested input (a leaf tensor, or a
    non-leaf input's grad_fn, both keyed in ``capture``) is reachable through an edge. Like
    torch.autograd.grad, no other node runs, so the graph beyond the inputs is neither computed
    nor freed (a later backward through it still works). Post-order DFS, no recursion."""
    needed: set[Context] = set()
    visited: set[Context] = set()
    stack: list[tuple[Context, bool]] = [(r, False) for r in roots]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            for nxt in node.next_edges:
                if nxt is not None and (id(nxt) in capture or nxt in needed):
                    needed.add(node)
                    break
            continue
        if node in visited:
            continue
        visited.add(node)
        stack.append((node, True))  # evaluated after every child below it on the stack
        for nxt in node.next_edges:
            if nxt is not None and not isinstance(nxt, Tensor) and nxt not in visited:
                stack.append((nxt, False))
    return needed


def _start(
    roots: Sequence[Tensor], seeds: Sequence[Any], create_graph: bool, capture: dict | None
) -> tuple[dict[Context, Any], list[Context]]:
    """Seed the buffers of the roots' nodes (summing seeds of roots made by the same node);
    a leaf given as a root receives (a copy of) its seed directly."""
    buffers: dict[Context, Any] = {}
    root_nodes: list[Context] = []
    for t, g in zip(roots, seeds, strict=True):
        node = t.grad_fn
        if node is None:
            _deliver_leaf(t, g, create_graph, capture, copy=True)
        elif node in buffers:
            buffers[node] = buffers[node] + g
        else:
            buffers[node] = g
            root_nodes.append(node)
    return buffers, root_nodes


def _run(
    roots: Sequence[Tensor],
    seeds: Sequence[Any],
    retain_graph: bool,
    create_graph: bool,
    capture: dict[int, Any] | None,
) -> None:
    """THE backward loop, for every caller: ``loss.backward()`` (the hot path), several roots,
    ``create_graph=True``, and ``grad()`` (``capture`` given: collect the requested inputs'
    gradients instead of accumulating into ``.grad``, and run only the nodes leading to them).

    Kahn's algorithm: a node runs when every consumer has sent its gradient (its dependency
    count reaches 0). Gradients flow as raw ndarrays in a first-order pass and as Tensors
    (recorded) under create_graph. A node that runs has its saved tensors freed afterwards
    unless ``retain_graph``; a node that ``grad()`` does not need is neither run nor freed.
    """
    buffers, root_nodes = _start(roots, seeds, create_graph, capture)
    deps = count_dependencies(root_nodes)
    needed = None if capture is None else _nodes_leading_to(root_nodes, capture)
    grad_type, to_grad_type = (Tensor, _as_tensor) if create_graph else (np.ndarray, _as_array)
    ready = [n for n in root_nodes if n not in deps]  # a root has consumers only in a cycle
    while ready:
        node = ready.pop()
        g = buffers.pop(node, None)
        edges = node.next_edges
        if capture is not None and id(node) in capture:
            capture[id(node)] = g  # the gradient w.r.t. a non-leaf input of grad()
        runs = needed is None or node in needed
        if g is None or not runs:
            in_grads = (None,) * len(edges)
        elif node._raw and not create_graph:  # the hot path: a primitive on raw arrays
            if node._saved_versions is not None:
                node._check_versions()
            in_grads = node._fn.backward(node, g)
            if type(in_grads) is not tuple:
                in_grads = (in_grads,)
        else:
            in_grads = _call_backward(node, g, create_graph)
        if runs and not retain_graph and node._saved_versions is not None:
            _free_saved(node)
        for nxt, gi in zip(edges, in_grads, strict=True):
            if nxt is None:
                continue
            if gi is not None and type(gi) is not grad_type:
                gi = to_grad_type(gi)  # a user Function's Tensor, a NumPy scalar, ...
            if nxt.__class__ is Tensor or isinstance(nxt, Tensor):  # a leaf: AccumulateGrad
                if gi is not None:
                    if gi.shape != nxt.data.shape:
                        _bad_grad_shape(node, nxt, gi)
                    copy = not node._raw or _passes_through(gi, g)
                    _deliver_leaf(nxt, gi, create_graph, capture, copy)
                continue
            if gi is not None:
                prev = buffers.get(nxt)
                buffers[nxt] = gi if prev is None else prev + gi
            left = deps[nxt] - 1
            deps[nxt] = left
            if left == 0:
                ready.append(nxt)
    if buffers:
        _report_cycle(buffers)


def _as_array(g: Any) -> np.ndarray:
    return g.data if isinstance(g, Tensor) else np.asarray(g)


def _as_tensor(g: Any) -> Tensor:
    return g if isinstance(g, Tensor) else Tensor._wrap(np.asarray(g))


def _bad_grad_shape(node: Context, leaf: Tensor, g: Any) -> None:
    raise RuntimeError(
        f"{node._fn.__name__}.backward returned a gradient of shape {g.shape} for an "
        f"input of shape {leaf.shape}"
    )


def _deliver_leaf(
    leaf: Tensor, g: Any, create_graph: bool, capture: dict | None, copy: bool = False
) -> None:
    if capture is None:
        _accumulate(leaf, g, create_graph, copy)
    elif id(leaf) in capture:
        prev = capture[id(leaf)]
        capture[id(leaf)] = g if prev is None else prev + g


def backward(
    tensors: Sequence[Tensor],
    grad_tensors: Sequence[Any],
    retain_graph: bool | None = None,
    create_graph: bool = False,
) -> None:
    """``Tensor.backward``: accumulate gradients of ``tensors`` into every leaf's ``.grad``."""
    if retain_graph is None:
        retain_graph = create_graph
    seeds = [_root_gradient(t, g, create_graph) for t, g in zip(tensors, grad_tensors, strict=True)]
    _run(tensors, seeds, retain_graph, create_graph, capture=None)


def _free_saved(node: Context) -> None:
    """Drop the saved tensors (and their references) once used; remember that we did, so a
    second backward through this node says to pass retain_graph=True."""
    node._saved = node._raw_saved = node._saved_output = None
    node._saved_versions = ()
    node._freed = True


def _report_cycle(buffers: dict[Context, Any]) -> None:
    # Only a cycle leaves gradients waiting: its nodes' counts never reach zero.
    stuck = ", ".join(sorted({n.name() for n in buffers}))
    raise RuntimeError(
        f"the graph has a cycle: gradients still wait at {stuck}; "
        "autograd graphs must be acyclic (every op makes a new tensor)"
    )


def grad(
    outputs: Tensor | Sequence[Tensor],
    inputs: Tensor | Sequence[Tensor],
    grad_outputs: Any = None,
    retain_graph: bool | None = None,
    create_graph: bool = False,
    allow_unused: bool = False,
) -> tuple[Tensor | None, ...]:
    """Gradients of ``outputs`` w.r.t. ``inputs``, returned (``.grad`` fields untouched)."""
    outputs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    inputs = [inputs] if isinstance(inputs, Tensor) else list(inputs)
    if grad_outputs is None or isinstance(grad_outputs, (Tensor, np.ndarray)):
        grad_outputs = [grad_outputs] * len(outputs) if grad_outputs is None else [grad_outputs]
    grad_outputs = list(grad_outputs)
    if len(grad_outputs) != len(outputs):
        raise ValueError(f"grad_outputs has {len(grad_outputs)} entries for {len(outputs)} outputs")
    for i, x in enumerate(inputs):
        if not isinstance(x, Tensor) or not x._requires_grad:
            raise RuntimeError(f"input {i} of autograd.grad does not require grad")
    if retain_graph is None:
        retain_graph = create_graph
    seeds = [_root_gradient(t, g, create_graph) for t, g in zip(outputs, grad_outputs, strict=True)]
    keys = [id(x) if x.grad_fn is None else id(x.grad_fn) for x in inputs]
    capture: dict[int, Any] = dict.fromkeys(keys)
    _run(outputs, seeds, retain_graph, create_graph, capture)
    result: list[Tensor | None] = []
    for i, (x, k) in enumerate(zip(inputs, keys, strict=True)):
        g = capture[k]
        if g is None:
            if not allow_unused:
                raise RuntimeError(
                    f"input {i} (shape {x.shape}) was not used to compute the outputs; "
                    "pass allow_unused=True to get None for it"
                )
            result.append(None)
            continue
        if not isinstance(g, Tensor):
            g = Tensor._wrap(np.array(g, dtype=x.dtype, copy=True))
        result.append(g)
    return tuple(result)
