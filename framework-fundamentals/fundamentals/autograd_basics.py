"""Question 2: how autograd works, shown on y = 3x² + 2x at x = 4 (dy/dx = 6x + 2 = 26).

- ``requires_grad=True`` marks a leaf whose gradient we want.
- Every op on such a tensor runs forward *and* records a backward node (``grad_fn``) that
  points at the nodes of its inputs (``next_functions``); leaves end in ``AccumulateGrad``.
- ``backward()`` walks that graph in reverse topological order, applying each node's
  chain-rule step, and AccumulateGrad *adds* into ``leaf.grad`` (so gradients accumulate).
- A non-scalar output has no implied "d(out)/d(out) = 1": pass ``gradient=`` (the vector of a
  vector-Jacobian product).
- ``torch.no_grad()`` records nothing; ``.detach()`` returns a tensor cut off from the graph.

Each function returns plain numbers / strings so tests and the demo can print them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def polynomial(x):  # noqa: ANN001, ANN201 - works on torch and minigrad tensors alike
    """y = 3x² + 2x, written once and run in both libraries."""
    return 3 * x**2 + 2 * x


@dataclass
class WorkedExample:
    x: float
    y: float
    dydx: float
    graph: list[str]  # backward nodes, in the order backward() runs them


def backward_order(output: torch.Tensor) -> list[str]:
    """Run ``output.backward()`` and return the names of the backward nodes in the order the
    engine ran them, recorded by a pre-hook on every node of the graph.

    The graph exists before backward() is called (the forward pass recorded it); this walks it
    to attach the hooks, then lets the engine decide the order: a node runs once every node
    that feeds it a gradient has run, so the leaf's AccumulateGrad comes last, once.
    """
    if output.grad_fn is None:
        raise ValueError("output has no grad_fn: it was not computed from a tensor requiring grad")
    nodes, seen, stack = [], set(), [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        nodes.append(node)
        stack.extend(next_node for next_node, _ in node.next_functions)
    ran: list[str] = []
    handles = [
        node.register_prehook(lambda grads, node=node: ran.append(type(node).__name__))
        for node in nodes
    ]
    try:
        output.backward()
    finally:
        for handle in handles:
            handle.remove()
    return ran


def worked_example_torch(x_value: float = 4.0) -> WorkedExample:
    x = torch.tensor(x_value, requires_grad=True)
    y = polynomial(x)
    graph = backward_order(y)  # runs y.backward()
    return WorkedExample(x=x_value, y=y.item(), dydx=x.grad.item(), graph=graph)


def worked_example_minigrad(x_value: float = 4.0) -> WorkedExample:
    import minigrad

    x = minigrad.tensor(x_value, requires_grad=True)
    y = polynomial(x)
    graph = minigrad_backward_order(y)  # computed before backward: minigrad has no node hooks
    y.backward()
    return WorkedExample(x=x_value, y=float(y.item()), dydx=float(x.grad.item()), graph=graph)


def minigrad_backward_order(output) -> list[str]:  # noqa: ANN001
    """The order minigrad's engine will run the nodes of ``output``'s graph, computed with the
    engine's own rule (``engine._run_first_order``): Kahn's algorithm with a last-in-first-out
    ready list, each node released once all nodes that feed it a gradient have run. Unlike
    torch, minigrad has no AccumulateGrad node: a leaf's gradient is added the moment an edge
    reaches it, so "AccumulateGrad" appears once per edge into a leaf."""
    import minigrad

    root = output.grad_fn
    if root is None:
        raise ValueError("output has no grad_fn: it was not computed from a tensor requiring grad")
    consumers: dict[int, int] = {}  # id(node) -> edges into it from the graph
    seen, stack = {id(root)}, [root]
    while stack:
        for nxt in stack.pop().next_edges:
            if nxt is None or isinstance(nxt, minigrad.Tensor):
                continue
            consumers[id(nxt)] = consumers.get(id(nxt), 0) + 1
            if id(nxt) not in seen:
                seen.add(id(nxt))
                stack.append(nxt)
    order, ready = [], [root]
    while ready:
        node = ready.pop()
        order.append(type(node).__name__)
        for nxt in node.next_edges:
            if nxt is None:
                continue
            if isinstance(nxt, minigrad.Tensor):
                order.append("AccumulateGrad")
                continue
            consumers[id(nxt)] -= 1
            if consumers[id(nxt)] == 0:
                ready.append(nxt)
    return order


def nonscalar_backward_error() -> str:
    """backward() on a vector output without ``gradient`` fails; return torch's message."""
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = polynomial(x)
    try:
        y.backward()
    except RuntimeError as error:
        return str(error)
    raise AssertionError("backward() on a non-scalar output unexpectedly succeeded")


def nonscalar_backward_with_gradient() -> list[float]:
    """With ``gradient=v`` backward computes vᵀ·J; v = ones gives the per-element 6x + 2."""
    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = polynomial(x)
    y.backward(gradient=torch.ones_like(y))
    return x.grad.tolist()


@dataclass
class TrackingFacts:
    no_grad_requires_grad: bool
    no_grad_grad_fn: str | None
    detach_requires_grad: bool
    detach_shares_storage: bool
    tracked_grad_fn: str


def stop_tracking() -> TrackingFacts:
    """What torch.no_grad() and .detach() do to the result of an op."""
    x = torch.tensor(4.0, requires_grad=True)
    tracked = polynomial(x)
    with torch.no_grad():
        untracked = polynomial(x)
    detached = tracked.detach()
    return TrackingFacts(
        no_grad_requires_grad=untracked.requires_grad,
        no_grad_grad_fn=None if untracked.grad_fn is None else type(untracked.grad_fn).__name__,
        detach_requires_grad=detached.requires_grad,
        detach_shares_storage=detached.data_ptr() == tracked.data_ptr(),
        tracked_grad_fn=type(tracked.grad_fn).__name__,
    )


@dataclass
class AccumulationFacts:
    after_first: float
    after_second: float
    after_zero_and_third: float
    second_backward_error: str


def accumulate_gradients() -> AccumulationFacts:
    """Two backward calls add into x.grad (26 + 26 = 52) until it is zeroed.

    The graph is freed after each backward, so the second call rebuilds it (the usual
    gradient-accumulation loop over micro-batches); calling backward twice on one graph needs
    ``retain_graph=True``.
    """
    x = torch.tensor(4.0, requires_grad=True)
    polynomial(x).backward()
    after_first = x.grad.item()
    y = polynomial(x)
    y.backward()
    after_second = x.grad.item()
    try:
        y.backward()  # same graph again, buffers already freed
        second_backward_error = ""
    except RuntimeError as error:
        second_backward_error = str(error)
    x.grad = None  # what optimizer.zero_grad() does by default (set_to_none=True)
    polynomial(x).backward()
    return AccumulationFacts(after_first, after_second, x.grad.item(), second_backward_error)


def accumulate_gradients_minigrad() -> tuple[float, float]:
    """The same accumulation in minigrad: 26 after one backward, 52 after two."""
    import minigrad

    x = minigrad.tensor(4.0, requires_grad=True)
    polynomial(x).backward()
    first = float(x.grad.item())
    polynomial(x).backward()
    return first, float(x.grad.item())


def nonscalar_and_tracking_minigrad() -> tuple[str, list[float], bool, bool]:
    """minigrad's side of the other facts: (non-scalar error, grad with gradient=ones,
    result under no_grad requires grad?, detached result requires grad?)."""
    import minigrad
    import numpy as np

    x = minigrad.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = polynomial(x)
    try:
        y.backward()
        message = ""
    except RuntimeError as error:
        message = str(error)
    y.backward(gradient=np.ones(3, dtype=np.float32))
    with minigrad.no_grad():
        untracked = polynomial(x)
    return message, x.grad.data.tolist(), untracked.requires_grad, y.detach().requires_grad
