"""Per-op cost rules: FLOPs and bytes moved from static shapes, one small rule per op type.

The engine in :mod:`graph_inspector.inspect_graph` knows no op: it looks the op type up in
:data:`COST_RULES` and calls the rule with an :class:`OpView`. An op type with no rule, or a rule
that meets an unknown dimension, is reported as *uncostable* with the reason — never guessed.

Conventions (documented so the numbers can be checked by hand):

- one multiply-add is 2 FLOPs, so MatMul ``[m,k] @ [k,n]`` costs ``2·m·n·k``;
- an elementwise op costs 1 FLOP per output element (transcendentals too: we count work items,
  not cycles); a reduction costs 1 FLOP per *input* element; Softmax costs 5 per element
  (max, subtract, exp, sum, divide);
- bytes moved = bytes of every data input read + bytes of every output written, from the
  static shapes and dtypes (resource handles and shape vectors count as what they are);
- metadata ops (Reshape, Identity, Const, Placeholder, Shape...) cost 0 FLOPs and 0 bytes: they
  alias or describe a buffer, they do not stream it.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TensorInfo:
    """A tensor as the report sees it: name, dtype name, static shape (None = unknown rank)."""

    name: str
    dtype: str
    shape: tuple[int | None, ...] | None

    def shape_str(self) -> str:
        if self.shape is None:
            return f"{self.dtype}[?]"
        dims = ",".join("None" if d is None else str(d) for d in self.shape)
        return f"{self.dtype}[{dims}]"


@dataclass(frozen=True)
class NodeCost:
    flops: int
    bytes_moved: int


class Uncostable(Exception):
    """Raised by a rule when the static information is not enough to cost the op."""


# Bytes per element of the dtypes a FuncGraph carries; resource/variant/string have no fixed size.
_ITEMSIZE = {
    "float16": 2,
    "bfloat16": 2,
    "float32": 4,
    "float64": 8,
    "int8": 1,
    "uint8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "int64": 8,
    "uint64": 8,
    "bool": 1,
    "complex64": 8,
    "complex128": 16,
}


@dataclass(frozen=True)
class OpView:
    """What a rule may look at: the op type, its data inputs and outputs, and its attributes."""

    op_type: str
    inputs: tuple[TensorInfo, ...]
    outputs: tuple[TensorInfo, ...]
    get_attr: Callable[[str], Any]


def numel(t: TensorInfo) -> int:
    if t.shape is None:
        raise Uncostable("unknown rank")
    if any(d is None for d in t.shape):
        # No name in the message, so the summary can group identical reasons.
        raise Uncostable(f"dynamic shape {t.shape_str()}")
    return math.prod(t.shape)  # type: ignore[arg-type]


def nbytes(t: TensorInfo) -> int:
    if t.dtype in ("resource", "variant"):
        return 0  # a handle: the data it points to is counted by the op that reads it
    if t.dtype not in _ITEMSIZE:
        raise Uncostable(f"no fixed element size for dtype {t.dtype}")
    return numel(t) * _ITEMSIZE[t.dtype]


def _io_bytes(v: OpView) -> int:
    return sum(nbytes(t) for t in v.inputs) + sum(nbytes(t) for t in v.outputs)


def _out_numel(v: OpView) -> int:
    return sum(numel(t) for t in v.outputs)


# --- rules ---------------------------------------------------------------------------------


def metadata(v: OpView) -> NodeCost:
    return NodeCost(0, 0)


def read_variable(v: OpView) -> NodeCost:
    return NodeCost(0, sum(nbytes(t) for t in v.outputs))


def data_movement(v: OpView) -> NodeCost:
    return NodeCost(0, _io_bytes(v))


def gather(v: OpView) -> NodeCost:
    # Reads only the gathered rows (= output size) plus the indices, writes the output.
    out = sum(nbytes(t) for t in v.outputs)
    indices = nbytes(v.inputs[1]) if len(v.inputs) > 1 else 0
    return NodeCost(0, 2 * out + indices)


def elementwise(v: OpView) -> NodeCost:
    return NodeCost(_out_numel(v), _io_bytes(v))


def add_n(v: OpView) -> NodeCost:
    return NodeCost(max(len(v.inputs) - 1, 0) * _out_numel(v), _io_bytes(v))


def reduction(v: OpView) -> NodeCost:
    flops = numel(v.inputs[0])
    if v.op_type == "Mean":
        flops += _out_numel(v)  # the final divide per output element
    return NodeCost(flops, _io_bytes(v))


def softmax(v: OpView) -> NodeCost:
    return NodeCost(5 * _out_numel(v), _io_bytes(v))


def batch_norm(v: OpView) -> NodeCost:
    # Inference form: (x - mean) * rsqrt(var + eps) * gamma + beta, 4 ops per element.
    return NodeCost(4 * numel(v.outputs[0]), _io_bytes(v))


def _matmul_dims(a: TensorInfo, b: TensorInfo, ta: bool, tb: bool) -> tuple[int, int, int]:
    numel(a), numel(b)  # raises Uncostable on dynamic dims
    assert a.shape is not None and b.shape is not None
    m, k = (a.shape[-1], a.shape[-2]) if ta else (a.shape[-2], a.shape[-1])
    k2, n = (b.shape[-1], b.shape[-2]) if tb else (b.shape[-2], b.shape[-1])
    if k != k2:
        raise Uncostable(f"inner dimensions differ: {a.shape_str()} @ {b.shape_str()}")
    return int(m), int(n), int(k)  # type: ignore[arg-type]


def matmul(v: OpView) -> NodeCost:
    m, n, k = _matmul_dims(
        v.inputs[0], v.inputs[1], bool(v.get_attr("transpose_a")), bool(v.get_attr("transpose_b"))
    )
    return NodeCost(2 * m * n * k, _io_bytes(v))


def batch_matmul(v: OpView) -> NodeCost:
    m, n, k = _matmul_dims(
        v.inputs[0], v.inputs[1], bool(v.get_attr("adj_x")), bool(v.get_attr("adj_y"))
    )
    out = v.outputs[0]
    batch = numel(out) // (m * n) if m * n else 0
    return NodeCost(2 * batch * m * n * k, _io_bytes(v))


def einsum(v: OpView) -> NodeCost:
    """Einsum (TF's op takes one or two operands), costed the way it can be computed:

    1. a label summed away that appears in one operand only is a reduction of that operand
       first: 1 FLOP per element of the operand, like any reduction ("ij,k->k" sums the [i,j]
       operand to a scalar: i·j FLOPs, not i·j·k);
    2. the two reduced operands are then combined over the union of their remaining labels:
       2 FLOPs per point (multiply-add) if a shared label is contracted, else 1 (a product).

    One operand: 1 FLOP per point of its index space (a reduction, transpose or diagonal).
    """
    equation = v.get_attr("equation")
    equation = equation.decode() if isinstance(equation, bytes) else str(equation)
    if "..." in equation:
        raise Uncostable(f"einsum with ellipsis '{equation}' (label sizes not resolved)")
    lhs, out_labels = equation.replace(" ", "").split("->")
    operands = lhs.split(",")
    if len(operands) not in (1, 2):
        raise Uncostable(f"einsum with {len(operands)} operands '{equation}'")
    sizes: dict[str, int] = {}
    for labels, t in zip(operands, v.inputs, strict=False):
        numel(t)
        assert t.shape is not None
        for label, size in zip(labels, t.shape, strict=True):
            sizes[label] = int(size)  # type: ignore[arg-type]

    def points(labels: set[str]) -> int:
        return math.prod(sizes[label] for label in labels)

    if len(operands) == 1:
        return NodeCost(points(set(operands[0])), _io_bytes(v))
    a, b = set(operands[0]), set(operands[1])
    flops = 0
    remaining = []
    for own, other in ((a, b), (b, a)):
        private_sums = own - other - set(out_labels)
        if private_sums:
            flops += points(own)  # reduce this operand over its private labels first
        remaining.append(own - private_sums)
    contracted = (remaining[0] & remaining[1]) - set(out_labels)
    flops += (2 if contracted else 1) * points(remaining[0] | remaining[1])
    return NodeCost(flops, _io_bytes(v))


def conv2d(v: OpView) -> NodeCost:
    kh, kw, cin, _ = (int(d) for d in _static(v.inputs[1]))  # HWIO filter
    return NodeCost(2 * numel(v.outputs[0]) * kh * kw * cin, _io_bytes(v))


def depthwise_conv2d(v: OpView) -> NodeCost:
    kh, kw, _, _ = (int(d) for d in _static(v.inputs[1]))
    return NodeCost(2 * numel(v.outputs[0]) * kh * kw, _io_bytes(v))


def _static(t: TensorInfo) -> tuple[int, ...]:
    numel(t)
    assert t.shape is not None
    return tuple(int(d) for d in t.shape)  # type: ignore[arg-type]


_METADATA_OPS = (
    "Placeholder Const NoOp Identity IdentityN Reshape Squeeze ExpandDims Shape ShapeN Size Rank "
    "StopGradient PreventGradient VarHandleOp VarIsInitializedOp DestroyResourceOp "
    "EnsureShape CheckNumerics"
).split()
_DATA_MOVEMENT_OPS = (
    "Transpose ConcatV2 Concat Pack Unpack StridedSlice Slice Tile Split SplitV Pad PadV2 "
    "MirrorPad BroadcastTo Fill ZerosLike OnesLike Range OneHot ReverseV2 AssignVariableOp "
    "TensorScatterUpdate"
).split()
_GATHER_OPS = "GatherV2 Gather ResourceGather GatherNd".split()
_ELEMENTWISE_OPS = (
    "Add AddV2 Sub Mul RealDiv Div DivNoNan FloorDiv FloorMod Mod Maximum Minimum Pow "
    "SquaredDifference BiasAdd Greater GreaterEqual Less LessEqual Equal NotEqual LogicalAnd "
    "LogicalOr LogicalNot Select SelectV2 Relu Relu6 Elu Selu LeakyRelu Softplus Sigmoid Tanh "
    "Exp Log Log1p Sqrt Rsqrt Square Neg Abs Sign Reciprocal Inv Erf Erfc Floor Ceil Round Cast "
    "IsNan IsInf IsFinite Sin Cos ClipByValue"
).split()
_REDUCTION_OPS = "Sum Mean Max Min Prod All Any ArgMax ArgMin EuclideanNorm".split()

# The rule table: op type -> rule. Add a line here to teach the inspector a new op.
COST_RULES: dict[str, Callable[[OpView], NodeCost]] = {
    **dict.fromkeys(_METADATA_OPS, metadata),
    "ReadVariableOp": read_variable,
    **dict.fromkeys(_DATA_MOVEMENT_OPS, data_movement),
    **dict.fromkeys(_GATHER_OPS, gather),
    **dict.fromkeys(_ELEMENTWISE_OPS, elementwise),
    "AddN": add_n,
    **dict.fromkeys(_REDUCTION_OPS, reduction),
    "Softmax": softmax,
    "LogSoftmax": softmax,
    "FusedBatchNorm": batch_norm,
    "FusedBatchNormV3": batch_norm,
    "MatMul": matmul,
    "BatchMatMul": batch_matmul,
    "BatchMatMulV2": batch_matmul,
    "BatchMatMulV3": batch_matmul,
    "Einsum": einsum,
    "Conv2D": conv2d,
    "DepthwiseConv2dNative": depthwise_conv2d,
}

# Why some well-known ops have no rule: said instead of a generic "no rule".
_NO_RULE_REASONS = {
    "While": "control flow: cost depends on the number of iterations at run time (body ops "
    "listed after it)",
    "StatelessWhile": "control flow: cost depends on the number of iterations at run time (body "
    "ops listed after it)",
    "If": "control flow: cost depends on which branch runs (branch ops listed after it)",
    "StatelessIf": "control flow: cost depends on which branch runs (branch ops listed after it)",
    "Case": "control flow: cost depends on which branch runs (branch ops listed after it)",
    "StatelessCase": "control flow: cost depends on which branch runs (branch ops listed after it)",
    "PartitionedCall": "function call whose body is not available to expand",
    "StatefulPartitionedCall": "function call whose body is not available to expand",
}


def cost_of(view: OpView) -> tuple[NodeCost | None, str | None]:
    """(cost, None) when the op can be costed, else (None, reason)."""
    rule = COST_RULES.get(view.op_type)
    if rule is None:
        reason = _NO_RULE_REASONS.get(view.op_type, f"no cost rule for op type '{view.op_type}'")
        return None, reason
    try:
        return rule(view), None
    except Uncostable as exc:
        return None, str(exc)


_CATEGORY_OF_RULE = {
    metadata: "metadata",
    read_variable: "variable",
    data_movement: "data movement",
    gather: "data movement",
    elementwise: "elementwise",
    add_n: "elementwise",
    reduction: "reduction",
    softmax: "softmax",
    batch_norm: "normalization",
    matmul: "matmul/conv",
    batch_matmul: "matmul/conv",
    einsum: "matmul/conv",
    conv2d: "matmul/conv",
    depthwise_conv2d: "matmul/conv",
}


def category(op_type: str) -> str:
    """Coarse family of an op type, used to colour drawings."""
    rule = COST_RULES.get(op_type)
    return _CATEGORY_OF_RULE.get(rule, "other") if rule else "other"
