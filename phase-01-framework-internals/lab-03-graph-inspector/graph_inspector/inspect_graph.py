"""trace_and_inspect: trace a tf.function, capture its FuncGraph, and describe it node by node.

The walk is plain: every op of the concrete function's FuncGraph becomes a :class:`Node` (name,
op type, data inputs, output dtypes/shapes, cost from :mod:`graph_inspector.cost_rules`). Calls
into other tf.functions (``StatefulPartitionedCall`` / ``PartitionedCall``, which is how a Keras
model or a SavedModel signature shows up) are expanded in place by default: the callee's nodes are
inlined under the call's name, its placeholders are wired to the call's inputs and the call's
outputs to the callee's results — so the report shows the ops that run, not one opaque call.

Control flow (``tf.cond`` -> ``If``/``StatelessIf``, ``tf.while_loop`` -> ``While``/
``StatelessWhile``, ``tf.switch_case`` -> ``Case``/``StatelessCase``) is listed the same way:
the node itself (not costed), then the ops of each branch / of the loop's cond and body, named
under it (``cond/then_branch/Relu``, ``switch_case/branches/1/Tanh``) and marked with
:attr:`Node.inside`. They count in the node list and the op histogram but not in the cost
totals: only one branch runs, and a loop body runs a number of times known only at run time.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from graph_inspector.cost_rules import NodeCost, OpView, TensorInfo, category, cost_of

__all__ = [
    "Capture",
    "GraphReport",
    "Node",
    "NodeCost",
    "NotASavedModelError",
    "TensorInfo",
    "XlaStats",
    "inspect_savedmodel",
    "mlir_op_counts",
    "trace_and_inspect",
    "xla_stats",
]

_CALL_OPS = frozenset({"PartitionedCall", "StatefulPartitionedCall"})
# Control-flow op -> (function attributes holding its bodies, how many leading op inputs the
# bodies do not take: If's condition).
_CONTROL_FLOW_OPS = {
    "If": (("then_branch", "else_branch"), 1),
    "StatelessIf": (("then_branch", "else_branch"), 1),
    "While": (("cond", "body"), 0),
    "StatelessWhile": (("cond", "body"), 0),
    # tf.switch_case: a list of branch functions, listed as branches/0, branches/1, ...
    "Case": (("branches",), 1),
    "StatelessCase": (("branches",), 1),
}


class NotASavedModelError(ValueError):
    """The folder given is not a TensorFlow SavedModel."""


@dataclass(frozen=True)
class Node:
    name: str
    op: str
    inputs: tuple[str, ...]
    outputs: tuple[TensorInfo, ...]
    cost: NodeCost | None
    uncostable_reason: str | None = None
    # Inside which control-flow body ("cond/then_branch", "while/body"); None at top level.
    # Such nodes are listed and counted, but their costs stay out of the totals.
    inside: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "op": self.op,
            "inside": self.inside,
            "inputs": list(self.inputs),
            "outputs": [
                {"dtype": t.dtype, "shape": None if t.shape is None else list(t.shape)}
                for t in self.outputs
            ],
            "cost": None
            if self.cost is None
            else {"flops": self.cost.flops, "bytes": self.cost.bytes_moved},
            "uncostable_reason": self.uncostable_reason,
        }


@dataclass(frozen=True)
class Capture:
    """A value the graph closes over: a variable (by reference) or a constant (by value)."""

    kind: str  # "variable", "constant" or "resource"
    name: str
    dtype: str
    shape: tuple[int | None, ...] | None
    nbytes: int


@dataclass
class GraphReport:
    """What :func:`trace_and_inspect` found in one concrete function."""

    function_name: str
    nodes: list[Node]
    inputs: list[TensorInfo]
    outputs: list[TensorInfo]
    captures: list[Capture]
    top_level_node_count: int
    expanded_calls: list[str] = field(default_factory=list)
    # The traced ConcreteFunction (for TensorBoard / XLA); not part of the JSON.
    concrete_function: Any = field(default=None, repr=False, compare=False)

    # --- counts -------------------------------------------------------------------------
    @property
    def node_count(self) -> int:
        return len(self.nodes)

    @property
    def op_histogram(self) -> dict[str, int]:
        """Op type -> node count, most frequent first (ties by name: deterministic)."""
        counts = Counter(n.op for n in self.nodes)
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    @property
    def total_flops(self) -> int:
        """FLOPs of the nodes outside control-flow bodies (see :attr:`Node.inside`)."""
        return sum(n.cost.flops for n in self.nodes if n.cost and n.inside is None)

    @property
    def total_bytes(self) -> int:
        return sum(n.cost.bytes_moved for n in self.nodes if n.cost and n.inside is None)

    @property
    def uncostable(self) -> list[Node]:
        """Top-level nodes without a cost (an If/While stands for the ops inside it)."""
        return [n for n in self.nodes if n.cost is None and n.inside is None]

    @property
    def in_control_flow(self) -> list[Node]:
        """Nodes inside If branches and While cond/body functions."""
        return [n for n in self.nodes if n.inside is not None]

    def captured(self, kind: str) -> tuple[int, int]:
        """(count, bytes) of the captures of one kind ("variable" or "constant")."""
        items = [c for c in self.captures if c.kind == kind]
        return len(items), sum(c.nbytes for c in items)

    @property
    def embedded_constants(self) -> tuple[int, int]:
        """(count, bytes) of Const nodes: values baked into the graph itself."""
        consts = [n for n in self.nodes if n.op == "Const"]
        total = 0
        for n in consts:
            for t in n.outputs:
                total += _safe_nbytes(t)
        return len(consts), total

    # --- outputs ------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        var_count, var_bytes = self.captured("variable")
        const_count, const_bytes = self.captured("constant")
        emb_count, emb_bytes = self.embedded_constants
        return {
            "function": self.function_name,
            "node_count": self.node_count,
            "top_level_node_count": self.top_level_node_count,
            "expanded_calls": self.expanded_calls,
            "nodes_in_control_flow": len(self.in_control_flow),
            "op_histogram": self.op_histogram,
            "inputs": [_tensor_dict(t) for t in self.inputs],
            "outputs": [_tensor_dict(t) for t in self.outputs],
            "captured_variables": {"count": var_count, "bytes": var_bytes},
            "captured_constants": {"count": const_count, "bytes": const_bytes},
            "embedded_constants": {"count": emb_count, "bytes": emb_bytes},
            "total_flops": self.total_flops,
            "total_bytes": self.total_bytes,
            "uncostable": [
                {"name": n.name, "op": n.op, "reason": n.uncostable_reason} for n in self.uncostable
            ],
            "nodes": [n.to_dict() for n in self.nodes],
        }

    def to_json(self, indent: int | None = 1) -> str:
        # sort_keys + insertion-ordered lists: the same graph always gives the same bytes.
        return json.dumps(self.to_dict(), indent=indent, sort_keys=True)

    def summary(self, top: int = 10, max_uncostable_lines: int = 20) -> str:
        """A readable text table: counts, inputs/outputs, captures, costs, uncostable ops."""
        lines = [f"FuncGraph {self.function_name}"]
        expanded = f" ({len(self.expanded_calls)} call(s) expanded)" if self.expanded_calls else ""
        lines.append(
            f"  nodes: {self.node_count} (top level {self.top_level_node_count}){expanded}"
        )
        for label, tensors in (("input", self.inputs), ("output", self.outputs)):
            for t in tensors:
                lines.append(f"  {label:<7} {t.name:<32} {t.shape_str()}")
        for kind in ("variable", "constant"):
            count, nbytes = self.captured(kind)
            lines.append(f"  captured {kind}s: {count} ({_human_bytes(nbytes)})")
        emb_count, emb_bytes = self.embedded_constants
        lines.append(f"  Const nodes: {emb_count} ({_human_bytes(emb_bytes)})")
        lines.append(
            f"  estimated cost: {_human_count(self.total_flops)}FLOP, "
            f"{_human_bytes(self.total_bytes)} moved"
            f" ({len(self.uncostable)} node(s) not costed)"
        )
        if self.in_control_flow:
            lines.append(
                f"  {len(self.in_control_flow)} node(s) inside If branches / While bodies: listed "
                "and counted below, their costs not in the totals (run count unknown statically)"
            )
        lines.append("")
        lines.append(f"  {'op type':<28}{'nodes':>6}{'FLOPs':>14}{'bytes':>14}")
        flops_by_op: Counter[str] = Counter()
        bytes_by_op: Counter[str] = Counter()
        totalled = [n for n in self.nodes if n.inside is None]
        for n in totalled:
            if n.cost:
                flops_by_op[n.op] += n.cost.flops
                bytes_by_op[n.op] += n.cost.bytes_moved
        for op, count in self.op_histogram.items():
            costed = any(n.cost for n in totalled if n.op == op)
            f = str(flops_by_op[op]) if costed else "-"
            b = str(bytes_by_op[op]) if costed else "-"
            lines.append(f"  {op:<28}{count:>6}{f:>14}{b:>14}")
        ranked = sorted(
            (n for n in self.nodes if n.cost and n.cost.flops and n.inside is None),
            key=lambda n: (-n.cost.flops, n.name),  # type: ignore[union-attr]
        )[:top]
        if ranked:
            lines.append("")
            lines.append(f"  top {len(ranked)} nodes by FLOPs:")
            for n in ranked:
                assert n.cost is not None
                lines.append(
                    f"    {n.name:<48} {n.op:<16} {n.cost.flops:>12} FLOP  "
                    f"{n.outputs[0].shape_str() if n.outputs else ''}"
                )
        if self.uncostable:
            lines.append("")
            lines.append("  not costed (listed, not guessed):")
            reasons: Counter[tuple[str, str]] = Counter(
                (n.op, n.uncostable_reason or "") for n in self.uncostable
            )
            grouped = sorted(reasons.items())
            for (op, reason), count in grouped[:max_uncostable_lines]:
                lines.append(f"    {op} x{count}: {reason}")
            if len(grouped) > max_uncostable_lines:
                rest = sum(c for _, c in grouped[max_uncostable_lines:])
                lines.append(f"    ... {rest} more node(s) (see to_json()['uncostable'])")
        return "\n".join(lines)

    def to_dot(self, hide_ops: Sequence[str] = ()) -> str:
        """Graphviz source: one box per node (op, name, output shape, FLOPs), edges = tensors."""
        hidden = set(hide_ops)
        shown = {n.name for n in self.nodes if n.op not in hidden}
        ids = {n.name: f"n{i}" for i, n in enumerate(self.nodes)}
        lines = [
            f"digraph {json.dumps(self.function_name)} {{",
            "  rankdir=TB;",
            '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=9];',
            '  edge [fontname="Helvetica", fontsize=7, color="#777777"];',
        ]
        producers = {t.name: n for n in self.nodes for t in n.outputs}
        for n in self.nodes:
            if n.name not in shown:
                continue
            shape = n.outputs[0].shape_str() if n.outputs else ""
            cost = f"{_human_count(n.cost.flops)}FLOP" if n.cost and n.cost.flops else ""
            label = "\\n".join(x for x in (n.op, n.name, shape, cost) if x)
            label = label.replace('"', '\\"')
            color = _CATEGORY_COLOURS.get(category(n.op), "#eeeeee")
            lines.append(f'  {ids[n.name]} [label="{label}", fillcolor="{color}"];')
        for n in self.nodes:
            if n.name not in shown:
                continue
            for tensor in n.inputs:
                src = producers.get(tensor)
                if src is None or src.name not in shown:
                    continue
                lines.append(f"  {ids[src.name]} -> {ids[n.name]};")
        lines.append("}")
        return "\n".join(lines) + "\n"

    def render(self, out_base: Path, hide_ops: Sequence[str] = ("Const", "NoOp")) -> Path:
        """Draw the graph: SVG through Graphviz ``dot`` where it exists, else a matplotlib PNG."""
        out_base = Path(out_base)
        out_base.parent.mkdir(parents=True, exist_ok=True)
        dot = shutil.which("dot")
        if dot:
            svg = out_base.with_suffix(".svg")
            subprocess.run(
                [dot, "-Tsvg", "-o", str(svg)],
                input=self.to_dot(hide_ops).encode(),
                check=True,
                timeout=120,
            )
            return svg
        png = out_base.with_suffix(".png")
        draw_graph_png(self, png, hide_ops)
        return png

    def plot_op_histogram(self, path: Path, top: int = 25) -> Path:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        items = list(self.op_histogram.items())[:top]
        fig, ax = plt.subplots(figsize=(8, 0.28 * len(items) + 1.2))
        ax.barh(
            [op for op, _ in items][::-1],
            [c for _, c in items][::-1],
            color=[_CATEGORY_COLOURS.get(category(op), "#cccccc") for op, _ in items][::-1],
            edgecolor="#555555",
            linewidth=0.5,
        )
        ax.set_xlabel("nodes")
        ax.set_title(f"Op types in {self.function_name} ({self.node_count} nodes)", fontsize=9)
        fig.tight_layout()
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return path

    def write_tensorboard(self, logdir: Path) -> Path:
        """Write the FuncGraph as a TensorBoard event file (``tensorboard --logdir`` shows it)."""
        import tensorflow as tf

        if self.concrete_function is None:
            raise ValueError("this report has no concrete function attached (built from JSON?)")
        logdir = Path(logdir)
        logdir.mkdir(parents=True, exist_ok=True)
        writer = tf.summary.create_file_writer(str(logdir))
        with writer.as_default():
            tf.summary.graph(self.concrete_function.graph)
        writer.flush()
        writer.close()
        return logdir


_CATEGORY_COLOURS = {
    "matmul/conv": "#f4a582",
    "elementwise": "#92c5de",
    "reduction": "#b2abd2",
    "softmax": "#fddbc7",
    "normalization": "#d9f0d3",
    "data movement": "#e0e0e0",
    "variable": "#fee08b",
    "metadata": "#f7f7f7",
    "other": "#ffffff",
}


# --- tracing and walking the FuncGraph ------------------------------------------------------


def trace_and_inspect(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> GraphReport:
    """Trace ``fn`` for these inputs and describe the FuncGraph of the concrete function.

    ``fn`` may be a ``tf.function``, a plain Python function (wrapped in ``tf.function``), or a
    ``ConcreteFunction`` (then no arguments are needed). Arguments may be tensors, ``TensorSpec``s
    or Python values, exactly as ``get_concrete_function`` takes them. Pass
    ``expand_calls=False`` as a keyword to keep nested function calls as single nodes.
    """
    import tensorflow as tf

    expand_calls = bool(kwargs.pop("expand_calls", True))
    if isinstance(fn, tf.types.experimental.ConcreteFunction):
        if args or kwargs:
            raise TypeError("a ConcreteFunction is already traced: pass no arguments")
        concrete = fn
    elif isinstance(fn, tf.types.experimental.PolymorphicFunction):
        concrete = fn.get_concrete_function(*args, **kwargs)
    elif callable(fn):
        concrete = tf.function(fn).get_concrete_function(*args, **kwargs)
    else:
        raise TypeError(f"trace_and_inspect needs a callable, got {type(fn).__name__}")
    return inspect_concrete_function(concrete, expand_calls=expand_calls)


def inspect_concrete_function(concrete: Any, expand_calls: bool = True) -> GraphReport:
    """Describe an already traced ConcreteFunction (for example a SavedModel signature)."""
    import tensorflow as tf

    graph = concrete.graph
    walker = _Walker(expand_calls)
    # Captured placeholders are named by a process-wide counter ("19"); name them by position
    # so the JSON does not depend on what else the process traced before.
    walker.rename = {
        internal.op.name: f"capture_{i}" for i, (_, internal) in enumerate(graph.captures)
    }
    walker.walk(graph, prefix="", input_aliases={}, graph_stack=[graph])

    # Python values in the signature are constants of the graph, not inputs: count TypeSpecs.
    flat_inputs = [
        leaf
        for leaf in tf.nest.flatten(concrete.structured_input_signature, expand_composites=True)
        if isinstance(leaf, tf.TypeSpec)
    ]
    user_inputs = [t for t in graph.inputs[: len(flat_inputs)]]
    paths = _input_paths(concrete, len(user_inputs))
    inputs = [
        TensorInfo(path, t.dtype.name, _shape(t))
        for path, t in zip(paths, user_inputs, strict=True)
    ]
    out_paths = [p for p, _ in flatten_with_paths(concrete.structured_outputs, "output")]
    outputs = [
        TensorInfo(p, t.dtype.name, _shape(t))
        for i, (p, t) in enumerate(zip(out_paths, concrete.outputs, strict=False))
    ]
    return GraphReport(
        function_name=graph.name,
        nodes=walker.nodes,
        inputs=inputs,
        outputs=outputs,
        captures=_captures(concrete),
        top_level_node_count=len(graph.get_operations()),
        expanded_calls=walker.expanded,
        concrete_function=concrete,
    )


class _Walker:
    """Turns FuncGraph ops into Nodes, inlining called functions when asked."""

    def __init__(self, expand_calls: bool) -> None:
        self.expand_calls = expand_calls
        self.nodes: list[Node] = []
        self.expanded: list[str] = []
        self.alias: dict[str, str] = {}  # tensor name -> name of the tensor that really feeds it
        self.rename: dict[str, str] = {}  # top-level op name -> name shown in the report

    def local(self, prefix: str, tensor_name: str) -> str:
        op_name, index = tensor_name.rsplit(":", 1)
        if not prefix:
            op_name = self.rename.get(op_name, op_name)
        return f"{prefix}{op_name}:{index}"

    def resolve(self, name: str) -> str:
        seen = 0
        while name in self.alias and seen < 10_000:
            name = self.alias[name]
            seen += 1
        return name

    def walk(
        self,
        graph: Any,
        prefix: str,
        input_aliases: dict[str, str],
        graph_stack: list[Any],
        inside: str | None = None,
    ) -> None:
        for alias, target in input_aliases.items():
            self.alias[alias] = target
        skip_placeholders = set(input_aliases)
        for op in graph.get_operations():
            name = prefix + (op.name if prefix else self.rename.get(op.name, op.name))
            if op.type == "Placeholder" and f"{name}:0" in skip_placeholders:
                continue  # the callee's parameter: wired straight to the caller's argument
            inputs = tuple(self.resolve(self.local(prefix, t.name)) for t in op.inputs)
            if self.expand_calls and op.type in _CALL_OPS:
                callee = _find_function_graph(op, graph_stack)
                if callee is not None and len(callee.inputs) == len(op.inputs):
                    inner_prefix = name + "/"
                    aliases = {
                        inner_prefix + p.name: src
                        for p, src in zip(callee.inputs, inputs, strict=True)
                    }
                    self.walk(callee, inner_prefix, aliases, [*graph_stack, callee], inside)
                    for i, out in enumerate(callee.outputs):
                        self.alias[f"{name}:{i}"] = self.resolve(inner_prefix + out.name)
                    self.expanded.append(name)
                    continue
            outs = tuple(
                TensorInfo(f"{name}:{i}", t.dtype.name, _shape(t)) for i, t in enumerate(op.outputs)
            )
            view = OpView(
                op.type,
                tuple(
                    TensorInfo(src, t.dtype.name, _shape(t))
                    for src, t in zip(inputs, op.inputs, strict=True)
                ),
                outs,
                _attr_getter(op),
            )
            cost, reason = cost_of(view)
            self.nodes.append(Node(name, op.type, inputs, outs, cost, reason, inside))
            if self.expand_calls and op.type in _CONTROL_FLOW_OPS:
                self._walk_bodies(op, name, inputs, graph_stack)

    def _walk_bodies(
        self, op: Any, name: str, inputs: tuple[str, ...], graph_stack: list[Any]
    ) -> None:
        """List the ops of an If's branches / a While's cond and body after the node itself;
        their parameters are wired to the op's inputs (for a loop: the initial values)."""
        attrs, skip = _CONTROL_FLOW_OPS[op.type]
        for attr in attrs:
            try:
                value = op.get_attr(attr)
            except ValueError:
                continue
            # One function (If, While) or a list of them (Case's branches).
            functions = (
                [(f"{attr}/{i}", f.name) for i, f in enumerate(value)]
                if isinstance(value, list)
                else [(attr, value.name)]
            )
            for label, fname in functions:
                body = _function_graph(fname, graph_stack)
                if body is None or len(body.inputs) != len(inputs) - skip:
                    continue  # body not found: the node stays listed alone, as before
                body_prefix = f"{name}/{label}/"
                aliases = {
                    body_prefix + p.name: src
                    for p, src in zip(body.inputs, inputs[skip:], strict=True)
                }
                self.walk(body, body_prefix, aliases, [*graph_stack, body], f"{name}/{label}")


def _attr_getter(op: Any) -> Callable[[str], Any]:
    def get(attr: str) -> Any:
        try:
            return op.get_attr(attr)
        except ValueError:
            return None

    return get


def _find_function_graph(op: Any, graph_stack: list[Any], attr: str = "f") -> Any | None:
    try:
        fname = op.get_attr(attr).name
    except ValueError:
        return None
    return _function_graph(fname, graph_stack)


def _function_graph(fname: str, graph_stack: list[Any]) -> Any | None:
    for g in reversed(graph_stack):
        fn = getattr(g, "_functions", {}).get(fname)
        if fn is not None and getattr(fn, "graph", None) is not None:
            return fn.graph
    # SavedModel functions live in the eager context's library rather than on the graph.
    try:
        from tensorflow.python.eager import context
        from tensorflow.python.framework import function_def_to_graph

        fdef = context.context().get_function_def(fname)
        return function_def_to_graph.function_def_to_graph(fdef)
    except Exception:  # noqa: BLE001 - not found: the call stays one (uncostable) node
        return None


def _shape(t: Any) -> tuple[int | None, ...] | None:
    if t.shape.rank is None:
        return None
    return tuple(t.shape.as_list())


def _tensor_dict(t: TensorInfo) -> dict[str, Any]:
    return {"name": t.name, "dtype": t.dtype, "shape": None if t.shape is None else list(t.shape)}


@dataclass(frozen=True)
class Container:
    """A list/tuple/dict node, yielded by ``flatten_with_paths(..., containers=True)`` before
    its leaves: the trace cache keys the container type too (a list is not a tuple)."""

    type_name: str


def flatten_with_paths(
    value: Any, path: str = "", containers: bool = False
) -> list[tuple[str, Any]]:
    """Leaves of a nested structure with their paths (``x``, ``batch[0]``, ``cfg['lr']``),
    in ``tf.nest`` order (dict keys sorted) so paths line up with graph inputs.

    ``containers=True`` also yields ``(path, Container(type name))`` for every list, tuple and
    dict, before its contents."""
    if isinstance(value, dict | list | tuple):
        out: list[tuple[str, Any]] = []
        if containers:
            out.append((path, Container(type(value).__qualname__)))
        if isinstance(value, dict):
            for key in sorted(value, key=repr):
                out += flatten_with_paths(value[key], f"{path}[{key!r}]", containers)
        else:
            for i, item in enumerate(value):
                out += flatten_with_paths(item, f"{path}[{i}]", containers)
        return out
    return [(path, value)]


def _graph_input_leaves(value: Any, path: str) -> list[str]:
    """Paths of the leaves that become graph inputs: TypeSpecs only (Python values in the
    signature are baked into the graph), a composite one (RaggedTensorSpec…) once per component."""
    import tensorflow as tf

    named: list[str] = []
    for p, leaf in flatten_with_paths(value, path):
        if not isinstance(leaf, tf.TypeSpec):
            continue
        parts = tf.nest.flatten(leaf, expand_composites=True)
        named += [p] if len(parts) == 1 else [f"{p}#{j}" for j in range(len(parts))]
    return named


def _input_paths(concrete: Any, count: int) -> list[str]:
    args, kwargs = concrete.structured_input_signature
    try:
        params = list(concrete.function_type.parameters)
    except Exception:  # noqa: BLE001 - no usable signature: positional names
        params = []
    named: list[str] = []
    for i, arg in enumerate(args):
        named += _graph_input_leaves(arg, params[i] if i < len(params) else f"arg{i}")
    for key in sorted(kwargs):
        named += _graph_input_leaves(kwargs[key], key)
    named += [f"input_{i}" for i in range(len(named), count)]
    return named[:count]


def _captures(concrete: Any) -> list[Capture]:
    variables = {id(v.handle): v for v in concrete.variables if hasattr(v, "handle")}
    result: list[Capture] = []
    for i, (external, _internal) in enumerate(concrete.graph.captures):
        var = variables.get(id(external))
        if var is not None:
            shape = tuple(var.shape.as_list())
            size = _safe_nbytes(TensorInfo(var.name, var.dtype.name, shape))
            result.append(Capture("variable", var.name, var.dtype.name, shape, size))
        elif external.dtype.name == "resource":
            result.append(Capture("resource", f"capture_{i}", "resource", (), 0))
        else:
            info = TensorInfo(f"capture_{i}", external.dtype.name, _shape(external))
            result.append(
                Capture("constant", info.name, info.dtype, info.shape, _safe_nbytes(info))
            )
    return result


def _safe_nbytes(t: TensorInfo) -> int:
    from graph_inspector.cost_rules import Uncostable, nbytes

    try:
        return nbytes(t)
    except Uncostable:
        return 0


def _human_count(n: float) -> str:
    for unit in ("", "K", "M", "G", "T"):
        if abs(n) < 1000:
            return f"{n:.3g} {unit}" if unit else f"{n:.0f} "
        n /= 1000
    return f"{n:.3g} P"


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


# --- drawing without Graphviz -----------------------------------------------------------------


def draw_graph_png(
    report: GraphReport, path: Path, hide_ops: Sequence[str] = (), float_only: bool = True
) -> Path:
    """Layered drawing of the graph with matplotlib (used when Graphviz is not installed).

    Layer = longest path from an input, so data flows top to bottom as in ``dot``'s layout.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    hidden = set(hide_ops)
    nodes = [n for n in report.nodes if n.op not in hidden]
    if float_only:
        # The tensor dataflow a reader cares about: drop shape arithmetic (int32), variable
        # handles (resource) and their reads; edges then jump over what was dropped.
        nodes = [
            n
            for n in nodes
            if n.op != "ReadVariableOp"
            and any(t.dtype.startswith(("float", "bfloat")) for t in n.outputs)
        ]
    shown = {n.name for n in nodes}
    by_name = {n.name: n for n in report.nodes}
    producer_of = {t.name: n.name for n in report.nodes for t in n.outputs}

    def shown_parents(node: Node) -> list[str]:
        found: list[str] = []
        stack = [producer_of[t] for t in node.inputs if t in producer_of]
        seen: set[str] = set()
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in shown:
                found.append(name)
            else:
                stack += [producer_of[t] for t in by_name[name].inputs if t in producer_of]
        return sorted(found)

    parents = {n.name: shown_parents(n) for n in nodes}
    depth: dict[str, int] = {}
    for n in nodes:  # graph order is topological, so one pass suffices
        depth[n.name] = 1 + max((depth[p] for p in parents[n.name] if p in depth), default=-1)
    layers: dict[int, list[str]] = {}
    for n in nodes:
        layers.setdefault(depth[n.name], []).append(n.name)
    width = max((len(v) for v in layers.values()), default=1)
    height = len(layers)
    pos: dict[str, tuple[float, float]] = {}
    for d in sorted(layers):
        names = layers[d]
        # Barycentre ordering: place a node under the mean x of its parents (fewer crossings).
        names.sort(
            key=lambda nm: (
                sum(pos[p][0] for p in parents[nm] if p in pos) / max(len(parents[nm]), 1),
                nm,
            )
        )
        for i, name in enumerate(names):
            pos[name] = ((i + 0.5) * width / len(names), -d)
    fig_w = min(max(6.0, 1.3 * width), 40.0)
    fig_h = min(max(4.0, 0.32 * height), 120.0)
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
    for n in nodes:
        for src in parents[n.name]:
            if src in pos:
                (x0, y0), (x1, y1) = pos[src], pos[n.name]
                ax.plot([x0, x1], [y0, y1], color="#999999", linewidth=0.4, zorder=1)
    font = 9 if width < 16 else 6  # readable when the page scales the drawing down
    for n in nodes:
        x, y = pos[n.name]
        ax.text(
            x,
            y,
            n.op,
            ha="center",
            va="center",
            fontsize=font,
            zorder=2,
            bbox={
                "boxstyle": "round,pad=0.2",
                "fc": _CATEGORY_COLOURS.get(category(n.op), "#ffffff"),
                "ec": "#555555",
                "lw": 0.3,
            },
        )
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_ylim(-height, 1)
    ax.axis("off")
    ax.set_title(
        f"{report.function_name}: {len(nodes)} of {report.node_count} nodes shown "
        f"({'float dataflow only; ' if float_only else ''}"
        f"hidden: {', '.join(sorted(hidden)) or 'none'})",
        fontsize=8,
    )
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


# --- SavedModel, XLA and MLIR -----------------------------------------------------------------


def check_savedmodel_dir(path: str | Path) -> Path:
    """The folder as a Path, or a clear error; no TensorFlow import (used by the CLI first)."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no such file or directory: {p}")
    if not p.is_dir():
        raise NotASavedModelError(f"{p} is a file, not a SavedModel directory")
    if not ((p / "saved_model.pb").is_file() or (p / "saved_model.pbtxt").is_file()):
        raise NotASavedModelError(f"{p} is not a SavedModel (no saved_model.pb inside)")
    return p


def inspect_savedmodel(path: str | Path, expand_calls: bool = True) -> dict[str, GraphReport]:
    """One GraphReport per serving signature of the SavedModel at ``path``."""
    import tensorflow as tf

    folder = check_savedmodel_dir(path)
    try:
        loaded = tf.saved_model.load(str(folder))
    except Exception as exc:  # noqa: BLE001 - corrupt protobufs raise many types
        raise NotASavedModelError(f"{folder} could not be loaded as a SavedModel: {exc}") from exc
    signatures = dict(loaded.signatures)
    if not signatures:
        raise NotASavedModelError(f"{folder} has no serving signatures to inspect")
    reports = {
        key: inspect_concrete_function(sig, expand_calls=expand_calls)
        for key, sig in sorted(signatures.items())
    }
    # Keep the loaded object alive while the reports' concrete functions are in use.
    for r in reports.values():
        r._loaded = loaded  # type: ignore[attr-defined]
    return reports


@dataclass(frozen=True)
class XlaStats:
    compile_seconds: float
    run_seconds: float
    hlo_op_counts: dict[str, int]

    @property
    def hlo_op_total(self) -> int:
        return sum(self.hlo_op_counts.values())


_HLO_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*.*?\s([a-z][a-z0-9\-]*)\(")


def hlo_op_counts(hlo_text: str) -> dict[str, int]:
    """Count HLO instructions by opcode in HLO text (``%x = f32[2] add(%a, %b)``)."""
    counts: Counter[str] = Counter()
    for line in hlo_text.splitlines():
        m = _HLO_INSTRUCTION.match(line)
        if m:
            counts[m.group(1)] += 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def xla_stats(fn: Callable[..., Any], *args: Any) -> XlaStats:
    """Compile ``fn`` with XLA (``jit_compile=True``) for these tensor arguments.

    compile_seconds = first call (compile + run) minus the median of three later calls (run).
    """
    import tensorflow as tf

    python_fn = getattr(fn, "python_function", fn)
    jitted = tf.function(python_fn, jit_compile=True)
    start = time.perf_counter()
    jitted(*args)
    first = time.perf_counter() - start
    runs = []
    for _ in range(3):
        start = time.perf_counter()
        jitted(*args)
        runs.append(time.perf_counter() - start)
    run = sorted(runs)[1]
    hlo = jitted.experimental_get_compiler_ir(*args)(stage="hlo")
    return XlaStats(max(first - run, 0.0), run, hlo_op_counts(hlo))


_MLIR_OP = re.compile(r'(?:=|^)\s*"?((?:tf|tf_executor|tfl|func|mhlo|stablehlo)\.[A-Za-z0-9_.]+)"?')


def mlir_op_counts(concrete: Any) -> dict[str, int]:
    """Op counts of the TF-dialect MLIR that ``tf.mlir.experimental.convert_function`` emits."""
    import tensorflow as tf

    text = tf.mlir.experimental.convert_function(concrete)
    counts: Counter[str] = Counter()
    for line in text.splitlines():
        m = _MLIR_OP.search(line.strip())
        if m:
            counts[m.group(1)] += 1
    return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


def example_inputs(concrete: Any, unknown_dim: int = 1) -> list[Any]:
    """Zeros matching a signature's inputs (unknown dimensions set to ``unknown_dim``)."""
    import tensorflow as tf

    specs = tf.nest.flatten(concrete.structured_input_signature)
    out = []
    for spec in specs:
        shape = [unknown_dim if d is None else d for d in spec.shape.as_list()]
        out.append(tf.zeros(shape, dtype=spec.dtype))
    return out
