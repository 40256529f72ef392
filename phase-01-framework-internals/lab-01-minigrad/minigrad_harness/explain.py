"""Small runnable demonstrations for HITCHHIKERS-GUIDE.md.

python -m minigrad explain graph         # the DAG, dependency counts, execution order
python -m minigrad explain why-topo      # propagate-on-arrival vs topological order
python -m minigrad explain recursion     # recursive DFS fails on a 10,000-op chain
python -m minigrad explain cycle         # what the engine does with a cycle
python -m minigrad explain create-graph  # Newton's method, HVP, gradient penalty
python -m minigrad explain torch         # the same graph as PyTorch records it
python -m minigrad explain transformations  # minigrad.func: an IR, per-sample grads, StableHLO
"""

from __future__ import annotations

import sys

import minigrad
import numpy as np
from minigrad.engine import count_dependencies
from minigrad.tensor import Tensor


def _example() -> tuple[Tensor, Tensor, Tensor]:
    x = minigrad.tensor([0.5, -1.0], dtype=np.float64, requires_grad=True)
    w = minigrad.tensor([2.0, 3.0], dtype=np.float64, requires_grad=True)
    h = x * w
    loss = (h.tanh() + h).sum()  # h is used twice: a diamond in the DAG
    return x, w, loss


def _label(e: object) -> str:
    return "leaf" if isinstance(e, Tensor) else repr(e)


def show_graph() -> None:
    """Print every node, its outgoing edges and in-degree, then the order the engine runs."""
    x, w, loss = _example()
    deps = count_dependencies([loss.grad_fn])
    print("loss = (tanh(x*w) + x*w).sum()\n")
    print("node            -> next_edges (one per forward input)     waits for")
    stack, seen = [loss.grad_fn], set()
    while stack:
        node = stack.pop()
        if node in seen:
            continue
        seen.add(node)
        edges = [_label(e) for e in node.next_edges if e is not None]
        print(f"{node!r:15} -> {', '.join(edges):38} {deps.get(node, 0)} consumer(s)")
        stack += [e for e in node.next_edges if e is not None and not isinstance(e, Tensor)]
    order: list[str] = []
    ready, left = [loss.grad_fn], dict(deps)
    while ready:  # the same Kahn loop as engine._run, recording names only
        node = ready.pop()
        order.append(repr(node))
        for e in node.next_edges:
            if e is None or isinstance(e, Tensor):
                continue
            left[e] -= 1
            if left[e] == 0:
                ready.append(e)
    print("\nexecution order:", " -> ".join(order))
    loss.backward()
    print(f"x.grad = {x.grad.data}   (w * (1 - tanh²(xw)) + w)")


def why_topological_order(depth: int = 18) -> None:
    """y = y + y, ``depth`` times: one path per node in topological order, 2^depth otherwise."""
    x = minigrad.tensor(1.0, dtype=np.float64, requires_grad=True)
    y = x
    for _ in range(depth):
        y = y + y  # each Add's output feeds both inputs of the next Add
    calls = 0

    def propagate_on_arrival(node: object, g: float) -> None:  # the naive alternative
        nonlocal calls
        calls += 1
        for e in node.next_edges:
            if e is not None and not isinstance(e, Tensor):
                propagate_on_arrival(e, g)

    propagate_on_arrival(y.grad_fn, 1.0)
    y.backward()
    print(f"{depth} chained y = y + y nodes; dy/dx = {x.grad.item():.0f} (= 2^{depth})")
    print(f"  propagate-on-arrival: {calls:,} backward calls (one per path)")
    print(f"  topological order   : {depth} backward calls (each node once, grads summed first)")


def recursion_limit() -> None:
    x = minigrad.tensor(1.0, requires_grad=True)
    y = x
    for _ in range(10_000):
        y = y * 1.0

    def recursive_topo(node: object, seen: set, out: list) -> None:
        seen.add(node)
        for e in node.next_edges:
            if e is not None and not isinstance(e, Tensor) and e not in seen:
                recursive_topo(e, seen, out)
        out.append(node)

    try:
        recursive_topo(y.grad_fn, set(), [])
        print("recursive DFS finished (recursion limit raised?)")
    except RecursionError as e:
        print(f"recursive DFS over 10,000 nodes: RecursionError ({e})")
    y.backward()
    print(f"minigrad's iterative engine: x.grad = {x.grad.item()}")


def cycle() -> None:
    a = minigrad.tensor([1.0], requires_grad=True)
    b = a * 2
    c = b * 3
    print("Ops are out of place, so a graph built by running code cannot close a cycle.")
    print("Forcing one by hand: make b's node consume c's node ...")
    b.grad_fn.next_edges = (c.grad_fn, None)
    try:
        c.backward()
    except RuntimeError as e:
        print(f"RuntimeError: {e}")


def create_graph() -> None:
    # 1. Newton's method needs f'' = d(f')/dx: f' must itself be a recorded graph.
    x = minigrad.tensor(3.0, dtype=np.float64, requires_grad=True)
    for i in range(5):
        f = x**4 - 2 * x**2  # minima at ±1
        (g,) = minigrad.grad(f, x, create_graph=True)
        (h,) = minigrad.grad(g, x)
        with minigrad.no_grad():
            x = minigrad.tensor(x.item() - g.item() / h.item(), dtype=np.float64)
        x.requires_grad_()
        print(f"Newton step {i + 1}: x = {x.item():.6f}")
    # 2. Hessian-vector product without forming the Hessian.
    w = minigrad.tensor(np.array([0.3, -0.2, 0.5]), requires_grad=True)
    v = np.array([1.0, 0.0, 0.0])
    loss = minigrad.nn.functional.log_softmax(w, dim=0)[0] * -1
    (g,) = minigrad.grad(loss, w, create_graph=True)
    (hv,) = minigrad.grad((g * v).sum(), w)
    print(f"HVP of -log_softmax(w)[0] along e0: {hv.data}")
    # 3. A gradient penalty (WGAN-GP): the loss contains a gradient.
    xin = minigrad.tensor(np.array([[0.5, -1.0]]), requires_grad=True)
    critic_w = minigrad.tensor(np.array([[1.0], [2.0]]), requires_grad=True)
    score = (xin @ critic_w).tanh().sum()
    (gx,) = minigrad.grad(score, xin, create_graph=True)
    penalty = ((gx * gx).sum() ** 0.5 - 1) ** 2
    penalty.backward()
    print(
        f"gradient penalty {penalty.item():.4f}; its grad w.r.t. critic weights "
        f"{critic_w.grad.data.ravel()}"
    )


def torch_side_by_side() -> None:
    import torch

    def walk(fn: object, depth: int = 0, attr: str = "next_functions") -> None:
        if fn is None:
            return
        print("  " * depth + type(fn).__name__)
        for nxt, _ in getattr(fn, attr, ()):
            walk(nxt, depth + 1)

    xt = torch.tensor([0.5, -1.0], requires_grad=True)
    wt = torch.tensor([2.0, 3.0], requires_grad=True)
    ht = xt * wt
    print("PyTorch (C++ nodes; leaves appear as AccumulateGrad):")
    walk((ht.tanh() + ht).sum().grad_fn)
    print("\nminigrad (Python ctx objects; leaves shown as AccumulateGrad too):")
    _, _, loss = _example()
    walk(loss.grad_fn)


def transformations() -> None:
    """minigrad.func: the IR of a gradient, per-sample gradients, and StableHLO text."""
    import minigrad.nn.functional as F
    import numpy as np
    from minigrad import func

    def loss(w, x, y):
        return F.cross_entropy(F.relu(x @ w), y)

    w = minigrad.tensor(np.full((4, 3), 0.1))
    x, y = minigrad.tensor(np.ones((5, 4))), minigrad.tensor(np.array([0, 1, 2, 0, 1]))
    print("make_ir(grad(loss))(w, x, y): the forward, then the transposed tangent program")
    print(func.make_ir(func.grad(loss))(w, x, y))
    per_sample = func.vmap(func.grad(lambda w, xi, yi: loss(w, xi[None], yi[None])), (None, 0, 0))
    print(f"\nvmap(grad) per-sample gradients: shape {per_sample(w, x, y).shape} (5 examples)")
    print("\nto_stablehlo(lambda x: relu(x @ w).sum(1)):")
    print(func.to_stablehlo(lambda x: F.relu(x @ w).sum(1))(np.ones((5, 4))))


DEMOS = {
    "graph": show_graph,
    "why-topo": why_topological_order,
    "recursion": recursion_limit,
    "cycle": cycle,
    "create-graph": create_graph,
    "torch": torch_side_by_side,
    "transformations": transformations,
}


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    names = argv or list(DEMOS)
    unknown = [n for n in names if n not in DEMOS]
    if unknown:
        print(
            f"python -m minigrad explain: error: unknown demo(s) {unknown}; "
            f"choose from {list(DEMOS)}",
            file=sys.stderr,
        )
        return 2
    for n in names:
        print(f"=== {n} ===")
        DEMOS[n]()
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
