"""The graph model: what :func:`graph_inspector.trace_and_inspect` found in one FuncGraph.

:class:`Node` (one op, its data inputs, output dtypes/shapes, cost), :class:`Capture` (a value
the graph closes over) and :class:`GraphReport` (the nodes plus counts, totals, JSON and the
text summary). Drawing it (DOT, SVG, the op histogram) and writing a TensorBoard log are
:mod:`graph_inspector.render`'s functions, which take a report: the model does not know how it
is drawn.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from phase01_common.units import format_bytes, format_count

from graph_inspector.cost_rules import NodeCost, TensorInfo, Uncostable, nbytes

__all__ = ["Capture", "GraphReport", "Node", "NodeCost", "TensorInfo"]


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
    # The size unknown (None) dimensions were costed at; None: such nodes are not costed.
    unknown_dim: int | None = None

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
                total += safe_nbytes(t)
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
            "inputs": [tensor_dict(t) for t in self.inputs],
            "outputs": [tensor_dict(t) for t in self.outputs],
            "captured_variables": {"count": var_count, "bytes": var_bytes},
            "captured_constants": {"count": const_count, "bytes": const_bytes},
            "embedded_constants": {"count": emb_count, "bytes": emb_bytes},
            "total_flops": self.total_flops,
            "unknown_dims_costed_as": self.unknown_dim,
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
            lines.append(f"  captured {kind}s: {count} ({format_bytes(nbytes, binary=True)})")
        emb_count, emb_bytes = self.embedded_constants
        lines.append(f"  Const nodes: {emb_count} ({format_bytes(emb_bytes, binary=True)})")
        lines.append(
            f"  estimated cost: {format_count(self.total_flops)}FLOP, "
            f"{format_bytes(self.total_bytes, binary=True)} moved"
            f" ({len(self.uncostable)} node(s) not costed)"
            + (
                f", unknown dimensions costed as {self.unknown_dim}"
                if self.unknown_dim is not None
                else ""
            )
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


def tensor_dict(t: TensorInfo) -> dict[str, Any]:
    return {"name": t.name, "dtype": t.dtype, "shape": None if t.shape is None else list(t.shape)}


def safe_nbytes(t: TensorInfo) -> int:
    try:
        return nbytes(t)
    except Uncostable:
        return 0
