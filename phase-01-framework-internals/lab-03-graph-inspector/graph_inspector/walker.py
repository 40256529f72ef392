"""Walking a FuncGraph into :class:`~graph_inspector.graph_model.Node`s.

The walk is plain: every op of the concrete function's FuncGraph becomes a Node (name, op type,
data inputs, output dtypes/shapes, cost from :mod:`graph_inspector.cost_rules`). Calls into
other tf.functions (``StatefulPartitionedCall`` / ``PartitionedCall``, which is how a Keras model
or a SavedModel signature shows up) are expanded in place by default: the callee's nodes are
inlined under the call's name, its placeholders wired to the call's inputs and the call's outputs
to the callee's results, so the report shows the ops that run, not one opaque call.

Control flow (``tf.cond`` -> ``If``/``StatelessIf``, ``tf.while_loop`` -> ``While``/
``StatelessWhile``, ``tf.switch_case`` -> ``Case``/``StatelessCase``) is listed the same way:
the node itself (not costed), then the ops of each branch / of the loop's cond and body, named
under it (``cond/then_branch/Relu``, ``switch_case/branches/1/Tanh``) and marked with
:attr:`Node.inside`. They count in the node list and the op histogram but not in the cost
totals: only one branch runs, and a loop body runs a number of times known only at run time.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from graph_inspector.cost_rules import OpView, TensorInfo, cost_of
from graph_inspector.graph_model import Capture, GraphReport, Node, safe_nbytes

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


def inspect_concrete_function(
    concrete: Any, expand_calls: bool = True, unknown_dim: int | None = None
) -> GraphReport:
    """Describe an already traced ConcreteFunction (for example a SavedModel signature).

    ``unknown_dim``: the size every unknown (``None``) dimension is costed at, the way ``--xla``
    compiles a serving signature (a None batch is a batch of that size). Without it, nodes with
    unknown dimensions are listed as not costed. Shapes shown stay as traced."""
    import tensorflow as tf

    if unknown_dim is not None and (isinstance(unknown_dim, bool) or unknown_dim < 1):
        raise ValueError(f"unknown_dim must be a positive int, got {unknown_dim!r}")
    graph = concrete.graph
    walker = _Walker(expand_calls, unknown_dim)
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
        unknown_dim=unknown_dim,
    )


class _Walker:
    """Turns FuncGraph ops into Nodes, inlining called functions when asked."""

    def __init__(self, expand_calls: bool, unknown_dim: int | None = None) -> None:
        self.expand_calls = expand_calls
        self.unknown_dim = unknown_dim
        self.nodes: list[Node] = []
        self.expanded: list[str] = []
        self.alias: dict[str, str] = {}  # tensor name -> name of the tensor that really feeds it
        self.rename: dict[str, str] = {}  # top-level op name -> name shown in the report

    def local(self, prefix: str, tensor_name: str) -> str:
        op_name, index = tensor_name.rsplit(":", 1)
        if not prefix:
            op_name = self.rename.get(op_name, op_name)
        return f"{prefix}{op_name}:{index}"

    def costed(self, t: TensorInfo) -> TensorInfo:
        """The tensor as the cost rules see it: unknown dimensions set to ``unknown_dim``."""
        if self.unknown_dim is None or t.shape is None or None not in t.shape:
            return t
        shape = tuple(self.unknown_dim if d is None else d for d in t.shape)
        return TensorInfo(t.name, t.dtype, shape)

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
                    self.costed(TensorInfo(src, t.dtype.name, _shape(t)))
                    for src, t in zip(inputs, op.inputs, strict=True)
                ),
                tuple(self.costed(t) for t in outs),
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


def tensor_dict(t: TensorInfo) -> dict[str, Any]:
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
            size = safe_nbytes(TensorInfo(var.name, var.dtype.name, shape))
            result.append(Capture("variable", var.name, var.dtype.name, shape, size))
        elif external.dtype.name == "resource":
            result.append(Capture("resource", f"capture_{i}", "resource", (), 0))
        else:
            info = TensorInfo(f"capture_{i}", external.dtype.name, _shape(external))
            result.append(Capture("constant", info.name, info.dtype, info.shape, safe_nbytes(info)))
    return result
