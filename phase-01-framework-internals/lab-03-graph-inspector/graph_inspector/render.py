"""Renderers of a :class:`~graph_inspector.graph_model.GraphReport`: Graphviz DOT, a drawing
(SVG via ``dot`` where it exists, else a layered SVG of its own), the readable SVG overview
grouped by name scope (with the full graph in a linked file), the op-type histogram, and a
TensorBoard log.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from phase01_common.units import format_count

from graph_inspector.cost_rules import category
from graph_inspector.graph_model import GraphReport, Node

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


def to_dot(report: GraphReport, hide_ops: Sequence[str] = ()) -> str:
    """Graphviz source: one box per node (op, name, output shape, FLOPs), edges = tensors."""
    hidden = set(hide_ops)
    shown = {n.name for n in report.nodes if n.op not in hidden}
    ids = {n.name: f"n{i}" for i, n in enumerate(report.nodes)}
    lines = [
        f"digraph {json.dumps(report.function_name)} {{",
        "  rankdir=TB;",
        '  node [shape=box, style="rounded,filled", fontname="Helvetica", fontsize=9];',
        '  edge [fontname="Helvetica", fontsize=7, color="#777777"];',
    ]
    producers = {t.name: n for n in report.nodes for t in n.outputs}
    for n in report.nodes:
        if n.name not in shown:
            continue
        shape = n.outputs[0].shape_str() if n.outputs else ""
        cost = f"{format_count(n.cost.flops)}FLOP" if n.cost and n.cost.flops else ""
        label = "\\n".join(x for x in (n.op, n.name, shape, cost) if x)
        label = label.replace('"', '\\"')
        color = _CATEGORY_COLOURS.get(category(n.op), "#eeeeee")
        lines.append(f'  {ids[n.name]} [label="{label}", fillcolor="{color}"];')
    for n in report.nodes:
        if n.name not in shown:
            continue
        for tensor in n.inputs:
            src = producers.get(tensor)
            if src is None or src.name not in shown:
                continue
            lines.append(f"  {ids[src.name]} -> {ids[n.name]};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def draw_svg(
    report: GraphReport, out_base: Path, hide_ops: Sequence[str] = ("Const", "NoOp")
) -> Path:
    """Draw the graph as SVG: through Graphviz ``dot`` where it exists, else with the layered
    drawing of :func:`draw_full_graph_svg` (float dataflow)."""
    out_base = Path(out_base)
    out_base.parent.mkdir(parents=True, exist_ok=True)
    svg = out_base.with_suffix(".svg")
    dot = shutil.which("dot")
    if dot:
        subprocess.run(
            [dot, "-Tsvg", "-o", str(svg)],
            input=to_dot(report, hide_ops).encode(),
            check=True,
            timeout=120,
        )
        return svg
    return draw_full_graph_svg(report, svg, hide_ops)


def plot_op_histogram(report: GraphReport, path: Path, top: int = 25) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    items = list(report.op_histogram.items())[:top]
    fig, ax = plt.subplots(figsize=(8, 0.28 * len(items) + 1.2))
    ax.barh(
        [op for op, _ in items][::-1],
        [c for _, c in items][::-1],
        color=[_CATEGORY_COLOURS.get(category(op), "#cccccc") for op, _ in items][::-1],
        edgecolor="#555555",
        linewidth=0.5,
    )
    ax.set_xlabel("nodes")
    ax.set_title(f"Op types in {report.function_name} ({report.node_count} nodes)", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_tensorboard(report: GraphReport, logdir: Path) -> Path:
    """Write the FuncGraph as a TensorBoard event file (``tensorboard --logdir`` shows it)."""
    import tensorflow as tf

    if report.concrete_function is None:
        raise ValueError("this report has no concrete function attached (built from JSON?)")
    logdir = Path(logdir)
    logdir.mkdir(parents=True, exist_ok=True)
    writer = tf.summary.create_file_writer(str(logdir))
    with writer.as_default():
        tf.summary.graph(report.concrete_function.graph)
    writer.flush()
    writer.close()
    return logdir


# --- readable SVG: name scopes as boxes, the full graph in a linked file -------------------------


def scope_of(name: str, depth: int) -> str:
    """A node's name scope, ``depth`` levels deep, without TF's call wrappers and ``_1``
    uniquifiers: ``model_1/StatefulPartitionedCall/bert_1/layer_0_1/attention_1/MatMul`` ->
    ``model/bert/layer_0/attention`` at depth 4."""
    parts = [p for p in name.split("/")[:-1] if "PartitionedCall" not in p]
    parts = [p[:-2] if p.endswith("_1") and p[:-2] else p for p in parts]
    return "/".join(parts[:depth]) or "(top level)"


def _scope_groups(nodes: list[Node], parents: dict[str, list[str]], depth: int) -> dict[str, str]:
    """Node -> group: its scope at ``depth``, split into pieces connected inside the scope, so a
    scope with ops at both ends of the graph (BERT's mask at the start and [CLS] slice at the
    end, both directly in ``bert/``) is two boxes, not one box that loops the drawing back."""
    scope = {n.name: scope_of(n.name, depth) for n in nodes}
    root = {n.name: n.name for n in nodes}

    def find(x: str) -> str:
        while root[x] != x:
            root[x] = root[root[x]]
            x = root[x]
        return x

    for n in nodes:
        for p in parents[n.name]:
            if scope[p] == scope[n.name]:
                root[find(p)] = find(n.name)
    pieces: dict[str, dict[str, int]] = {}
    group = {}
    for n in nodes:
        numbers = pieces.setdefault(scope[n.name], {})
        number = numbers.setdefault(find(n.name), len(numbers))
        group[n.name] = scope[n.name] + (f" #{number + 1}" if number else "")
    return group


def _float_dataflow(report: GraphReport, hide_ops: Sequence[str]) -> tuple[list[Node], dict]:
    """The nodes a reader cares about (float outputs, no variable reads) and, for each, its
    nearest shown ancestors (edges jump over what was dropped)."""
    hidden = set(hide_ops)
    nodes = [
        n
        for n in report.nodes
        if n.op not in hidden
        and n.op != "ReadVariableOp"
        and any(t.dtype.startswith(("float", "bfloat")) for t in n.outputs)
    ]
    shown = {n.name for n in nodes}
    by_name = {n.name: n for n in report.nodes}
    producer_of = {t.name: n.name for n in report.nodes for t in n.outputs}
    parents: dict[str, list[str]] = {}
    for node in nodes:
        found: set[str] = set()
        stack = [producer_of[t] for t in node.inputs if t in producer_of]
        seen: set[str] = set()
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            if name in shown:
                found.add(name)
            else:
                stack += [producer_of[t] for t in by_name[name].inputs if t in producer_of]
        parents[node.name] = sorted(found)
    return nodes, parents


def _layers(names: list[str], parents: dict[str, list[str]]) -> dict[str, int]:
    """Longest path from a source (names are in topological order)."""
    depth: dict[str, int] = {}
    for name in names:
        depth[name] = 1 + max((depth[p] for p in parents.get(name, []) if p in depth), default=-1)
    return depth


def write_layered_svg(
    path: Path,
    title: str,
    boxes: list[tuple[str, list[str], str]],
    parents: dict[str, list[str]],
    box_width: int = 210,
) -> Path:
    """A top-to-bottom layered drawing as SVG: ``boxes`` are (id, label lines, fill colour) in
    topological order, ``parents`` the edges. Vector text stays sharp at any zoom."""
    from xml.sax.saxutils import escape

    ids = [b[0] for b in boxes]
    depth = _layers(ids, parents)
    rows: dict[int, list[str]] = {}
    for box_id in ids:
        rows.setdefault(depth[box_id], []).append(box_id)
    line_h, gap_x, gap_y = 13, 16, 34
    height_of = {b[0]: 8 + line_h * len(b[1]) for b in boxes}
    width = max(len(r) for r in rows.values()) * (box_width + gap_x) + gap_x
    pos: dict[str, tuple[float, float]] = {}
    y = 40.0
    for d in sorted(rows):
        row = rows[d]
        offset = (width - len(row) * (box_width + gap_x)) / 2 + gap_x
        for i, box_id in enumerate(row):
            pos[box_id] = (offset + i * (box_width + gap_x), y)
        y += max(height_of[b] for b in row) + gap_y
    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{y:.0f}" '
        f'viewBox="0 0 {width:.0f} {y:.0f}" font-family="Helvetica,Arial,sans-serif">',
        '<defs><marker id="a" viewBox="0 0 10 10" refX="10" refY="5" markerWidth="6" '
        'markerHeight="6" orient="auto"><path d="M0,0L10,5L0,10z" fill="#888"/></marker></defs>',
        f'<text x="{gap_x}" y="22" font-size="14" font-weight="bold">{escape(title)}</text>',
    ]
    for box_id in ids:
        x1, y1 = pos[box_id]
        for parent in parents.get(box_id, []):
            if parent in pos:
                x0, y0 = pos[parent]
                out.append(
                    f'<line x1="{x0 + box_width / 2:.0f}" y1="{y0 + height_of[parent]:.0f}" '
                    f'x2="{x1 + box_width / 2:.0f}" y2="{y1:.0f}" stroke="#999" '
                    'stroke-width="0.8" marker-end="url(#a)"/>'
                )
    for box_id, lines, colour in boxes:
        x, y0 = pos[box_id]
        out.append(
            f'<rect x="{x:.0f}" y="{y0:.0f}" width="{box_width}" height="{height_of[box_id]}" '
            f'rx="5" fill="{colour}" stroke="#555" stroke-width="0.6"/>'
        )
        for i, text in enumerate(lines):
            weight = ' font-weight="bold"' if i == 0 else ""
            out.append(
                f'<text x="{x + 6:.0f}" y="{y0 + 15 + i * line_h:.0f}" font-size="11"{weight}>'
                f"{escape(text[:34])}</text>"
            )
    out.append("</svg>")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(out) + "\n")
    return path


def draw_scope_overview_svg(
    report: GraphReport,
    path: Path,
    max_groups: int = 40,
    hide_ops: Sequence[str] = ("Const", "NoOp"),
) -> Path:
    """One box per name scope (a layer, an attention block), the deepest grouping that keeps at
    most ``max_groups`` boxes; each box lists its node count, main op types and FLOPs."""
    nodes, parents = _float_dataflow(report, hide_ops)
    depth = 1
    while depth < 12 and len(set(_scope_groups(nodes, parents, depth + 1).values())) <= max_groups:
        depth += 1
    group_of = _scope_groups(nodes, parents, depth)
    members: dict[str, list[Node]] = {}
    for n in nodes:
        members.setdefault(group_of[n.name], []).append(n)
    group_parents = {
        g: sorted({group_of[p] for n in ms for p in parents[n.name]} - {g})
        for g, ms in members.items()
    }
    order = _topological(list(members), group_parents)
    boxes = []
    for g in order:
        ops = Counter(n.op for n in members[g]).most_common(3)
        flops = sum(n.cost.flops for n in members[g] if n.cost and n.inside is None)
        main = max(ops, key=lambda kv: kv[1])[0]
        label = [
            g.split("/", 1)[-1] if "/" in g else g,
            f"{len(members[g])} nodes, {format_count(flops)}FLOP",
            ", ".join(f"{op}×{c}" for op, c in ops),
        ]
        boxes.append((g, label, _CATEGORY_COLOURS.get(category(main), "#ffffff")))
    title = f"{report.function_name}: {len(nodes)} float-dataflow nodes in {len(order)} name scopes"
    return write_layered_svg(Path(path), title, boxes, group_parents, box_width=230)


def draw_full_graph_svg(
    report: GraphReport, path: Path, hide_ops: Sequence[str] = ("Const", "NoOp")
) -> Path:
    """Every float-dataflow node as its own box (op, scope, shape): the whole graph."""
    nodes, parents = _float_dataflow(report, hide_ops)
    boxes = [
        (
            n.name,
            [
                n.op,
                scope_of(n.name, 12).split("/", 1)[-1],
                n.outputs[0].shape_str() if n.outputs else "",
            ],
            _CATEGORY_COLOURS.get(category(n.op), "#ffffff"),
        )
        for n in nodes
    ]
    title = f"{report.function_name}: all {len(nodes)} float-dataflow nodes"
    return write_layered_svg(Path(path), title, boxes, parents)


def _topological(names: list[str], parents: dict[str, list[str]]) -> list[str]:
    """Kahn's order, ties by first appearance; a cycle between scopes keeps the input order."""
    remaining = {n: set(parents.get(n, [])) & set(names) for n in names}
    order: list[str] = []
    while remaining:
        ready = [n for n in names if n in remaining and not remaining[n]]
        if not ready:  # scopes can feed each other both ways: break the cycle in input order
            ready = [next(n for n in names if n in remaining)]
        for n in ready:
            del remaining[n]
            for deps in remaining.values():
                deps.discard(n)
        order += ready
    return order
