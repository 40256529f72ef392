"""StableHLO lowering rules ("lower"), one per primitive, for minigrad.func.to_stablehlo / jit.

Direct rules map an op to one StableHLO op (plus the explicit broadcasts and converts NumPy
does implicitly); composite ops lower by decomposition into simpler primitives, written as
ordinary minigrad code (``decompose``). Imported by minigrad.func.stablehlo, so plain
``import minigrad`` does not load it; written with :mod:`minigrad.func.emitter`.
"""

from __future__ import annotations

import math

import numpy as np

from minigrad.func.emitter import Emitter, LoweringError, const_or_static, decompose, i64_array
from minigrad.ops.rulekit import P, rules_for
from minigrad.tracing import Eqn

_UNARY = {
    "Neg": "negate",
    "Exp": "exponential",
    "Log": "log",
    "Tanh": "tanh",
    "Sigmoid": "logistic",
    "Abs": "abs",
    "Sqrt": "sqrt",
    "Rsqrt": "rsqrt",
}
_BINARY = {
    "Add": "add",
    "Sub": "subtract",
    "Mul": "multiply",
    "Div": "divide",
    "Pow": "power",
    "Maximum": "maximum",
    "Minimum": "minimum",
}
_DIRECTION = {"gt": "GT", "lt": "LT", "ge": "GE", "le": "LE", "eq": "EQ", "ne": "NE"}


def _elementwise(name: str):
    def rule(em: Emitter, eqn: Eqn, ins: list) -> str:
        shape, dt = eqn.out.shape, eqn.out.dtype
        return em.op(f"stablehlo.{name}", [em.operand(x, shape, dt) for x in ins], shape, dt)

    return rule


def _compare(em: Emitter, eqn: Eqn, ins: list) -> str:
    a, b, op = ins
    dts = [em.types[x][1] for x in (a, b) if isinstance(x, str)]
    dt = np.result_type(*dts) if len(dts) == 2 else dts[0]
    shape = eqn.out.shape
    kind = "FLOAT" if dt.kind == "f" else "SIGNED" if dt.kind == "i" else "UNSIGNED"
    attrs = (
        f"comparison_direction = #stablehlo<comparison_direction {_DIRECTION[op]}>, "
        f"compare_type = #stablehlo<comparison_type {kind}>"
    )
    return em.op(
        "stablehlo.compare",
        [em.operand(a, shape, dt), em.operand(b, shape, dt)],
        shape,
        bool,
        attrs,
    )


def _where(em: Emitter, eqn: Eqn, ins: list) -> str:
    cond, a, b = ins
    shape, dt = eqn.out.shape, eqn.out.dtype
    return em.op(
        "stablehlo.select",
        [em.operand(cond, shape, bool), em.operand(a, shape, dt), em.operand(b, shape, dt)],
        shape,
        dt,
    )


def _relu(em: Emitter, eqn: Eqn, ins: list) -> str:
    shape, dt = eqn.out.shape, eqn.out.dtype
    return em.op("stablehlo.maximum", [ins[0], em.constant(0, dt, shape)], shape, dt)


def _rounded_div(em: Emitter, eqn: Eqn, ins: list) -> str:
    a, b, mode = ins
    shape, dt = eqn.out.shape, eqn.out.dtype
    if dt.kind != "f":
        raise LoweringError("jit: RoundedDiv of integers has no lowering rule (floats only)")
    q = em.op("stablehlo.divide", [em.operand(a, shape, dt), em.operand(b, shape, dt)], shape, dt)
    down = em.op("stablehlo.floor", [q], shape, dt)
    if mode == "floor":
        return down
    up = em.op("stablehlo.ceil", [q], shape, dt)
    negative = em.op(
        "stablehlo.compare",
        [q, em.constant(0, dt, shape)],
        shape,
        bool,
        "comparison_direction = #stablehlo<comparison_direction LT>, "
        "compare_type = #stablehlo<comparison_type FLOAT>",
    )
    return em.op("stablehlo.select", [negative, up, down], shape, dt)


def _erf(em: Emitter, eqn: Eqn, ins: list) -> str:
    return em.op("chlo.erf", [ins[0]], eqn.out.shape, eqn.out.dtype)


def _cast(em: Emitter, eqn: Eqn, ins: list) -> str:
    return em.convert(ins[0], eqn.out.dtype)


def _matmul(em: Emitter, eqn: Eqn, ins: list) -> str:
    a, b = ins
    sa, sb = eqn.ins[0].shape, eqn.ins[1].shape
    if len(sa) == 1:
        a, sa = em.reshape(a, (1,) + sa), (1,) + sa
    if len(sb) == 1:
        b, sb = em.reshape(b, sb + (1,)), sb + (1,)
    if len(sb) == 2 and len(sa) > 2:  # b shared by a's batch: one product, b not broadcast
        sa = (int(np.prod(sa[:-1])), sa[-1])
        a = em.reshape(a, sa)
    batch = np.broadcast_shapes(sa[:-2], sb[:-2])
    a = em.broadcast(a, batch + sa[-2:])
    b = em.broadcast(b, batch + sb[-2:])
    nb = len(batch)
    bd = ", ".join(map(str, range(nb)))
    dims = (
        f"dot_dimension_numbers = #stablehlo.dot<lhs_batching_dimensions = [{bd}], "
        f"rhs_batching_dimensions = [{bd}], lhs_contracting_dimensions = [{nb + 1}], "
        f"rhs_contracting_dimensions = [{nb}]>"
    )
    out = em.op("stablehlo.dot_general", [a, b], batch + (sa[-2], sb[-1]), eqn.out.dtype, dims)
    return em.reshape(out, eqn.out.shape)


def _axes(axis, ndim: int) -> tuple[int, ...]:
    if axis is None:
        return tuple(range(ndim))
    axes = axis if isinstance(axis, tuple) else (axis,)
    return tuple(a % max(ndim, 1) for a in axes) if ndim else ()


def _reduction(kind: str):
    def rule(em: Emitter, eqn: Eqn, ins: list) -> str:
        x, axis = ins[0], ins[1]
        return em.reshape(em.reduce(x, _axes(axis, len(eqn.ins[0].shape)), kind), eqn.out.shape)

    return rule


def _transpose(em: Emitter, eqn: Eqn, ins: list) -> str:
    perm = i64_array(a % len(ins[1]) for a in ins[1])
    return em.op(
        "stablehlo.transpose",
        [ins[0]],
        eqn.out.shape,
        eqn.out.dtype,
        f"permutation = {perm}",
    )


def _reshape(em: Emitter, eqn: Eqn, ins: list) -> str:
    return em.reshape(ins[0], eqn.out.shape)


def _broadcast_to(em: Emitter, eqn: Eqn, ins: list) -> str:
    return em.broadcast(ins[0], eqn.out.shape)


def _concatenate(em: Emitter, eqn: Eqn, ins: list) -> str:
    dim, *xs = ins
    if any(x.shape == (0,) and len(eqn.out.shape) > 1 for x in eqn.ins[1:]):
        raise LoweringError("jit: Cat of a legacy empty (0,) tensor has no lowering rule")
    return em.op(
        "stablehlo.concatenate",
        [em.convert(x, eqn.out.dtype) for x in xs],
        eqn.out.shape,
        eqn.out.dtype,
        f"dimension = {dim} : i64",
    )


def _stack(em: Emitter, eqn: Eqn, ins: list) -> str:
    dim, *xs = ins
    pieces = []
    for x, v in zip(xs, eqn.ins[1:], strict=True):
        shape = v.shape[:dim] + (1,) + v.shape[dim:]
        pieces.append(em.reshape(em.convert(x, eqn.out.dtype), shape))
    return em.op(
        "stablehlo.concatenate", pieces, eqn.out.shape, eqn.out.dtype, f"dimension = {dim} : i64"
    )


# ----------------------------------------------------------------------------- indexing
def _basic_key(key, shape: tuple[int, ...]):
    """(start, limit, stride) per input dim, and the output shape before int dims drop and
    None dims appear; None if the key is not basic."""
    key = key if isinstance(key, tuple) else (key,)
    if not all(isinstance(k, (int, slice, type(None), type(Ellipsis))) for k in key):
        return None
    n_real = sum(1 for k in key if k is not None and k is not Ellipsis)
    expanded = []
    for k in key:
        if k is Ellipsis:
            expanded += [slice(None)] * (len(shape) - n_real)
        else:
            expanded.append(k)
    expanded += [slice(None)] * (len(shape) - sum(1 for k in expanded if k is not None))
    starts, limits, strides, dim = [], [], [], 0
    for k in expanded:
        if k is None:
            continue
        if isinstance(k, int):
            i = k % shape[dim]
            starts.append(i), limits.append(i + 1), strides.append(1)
        else:
            start, stop, step = k.indices(shape[dim])
            if step < 0:
                return None
            stop = max(stop, start)
            starts.append(start), limits.append(stop), strides.append(step)
        dim += 1
    return starts, limits, strides


def _index(em: Emitter, eqn: Eqn, ins: list) -> str:
    ins = [ins[0], const_or_static(em, ins[1])]
    spec = _basic_key(ins[1], eqn.ins[0].shape)
    if spec is None:
        return _index_by_one_hot(em, eqn, ins)
    starts, limits, strides = spec
    sliced = tuple(-(-(lim - s) // st) for s, lim, st in zip(starts, limits, strides, strict=True))
    out = em.op(
        "stablehlo.slice",
        [ins[0]],
        sliced,
        eqn.out.dtype,
        f"start_indices = {i64_array(starts)}, limit_indices = {i64_array(limits)}, "
        f"strides = {i64_array(strides)}",
    )
    return em.reshape(out, eqn.out.shape)


def _index_backward(em: Emitter, eqn: Eqn, ins: list) -> str:
    g, shape, key = ins[0], ins[1], const_or_static(em, ins[2])
    ins = [g, shape, key]
    spec = _basic_key(key, shape)
    if spec is None:
        return decompose(_scatter_rows)(em, eqn, ins)
    starts, limits, strides = spec
    sliced = tuple(-(-(lim - s) // st) for s, lim, st in zip(starts, limits, strides, strict=True))
    g = em.reshape(g, sliced)
    high = [
        n - (s + (k - 1) * st + 1) if k else n - s
        for n, s, k, st in zip(shape, starts, sliced, strides, strict=True)
    ]
    zero = em.constant(0, eqn.out.dtype, ())
    return em.op(
        "stablehlo.pad",
        [g, zero],
        tuple(shape),
        eqn.out.dtype,
        f"edge_padding_low = {i64_array(starts)}, edge_padding_high = {i64_array(high)}, "
        f"interior_padding = {i64_array(st - 1 for st in strides)}",
    )


def _one_hot(index, n: int, dtype):
    """(index.shape + (n,)) one-hot rows, as traceable ops (Compare with an arange)."""
    idx = P["Reshape"].apply(index, index.shape + (1,))
    return P["Cast"].apply(P["Compare"].apply(idx, np.arange(n), "eq"), dtype)


def _rows_key(key, ndim: int) -> tuple[int, np.ndarray] | None:
    """(dim, integer array) of a key that indexes one dim with an array and takes every
    other dim whole (``a[idx]``, ``a[:, idx]``), else None."""
    key = key if isinstance(key, tuple) else (key,)
    arrays = [i for i, k in enumerate(key) if isinstance(k, np.ndarray)]
    if len(arrays) > 1 and arrays == list(range(len(arrays))):  # a[i0, i1, ...]: leading dims
        return -len(arrays), np.broadcast_arrays(*[key[i] for i in arrays])
    if len(arrays) != 1 or len(key) > ndim or key[arrays[0]].dtype.kind not in "iu":
        return None
    if not all(k == slice(None) for i, k in enumerate(key) if i != arrays[0]):
        return None
    return arrays[0], key[arrays[0]]


def _index_by_one_hot(em: Emitter, eqn: Eqn, ins: list) -> str:
    if _rows_key(ins[1], len(eqn.ins[0].shape)) is None:
        raise LoweringError(f"jit: Index with the key {ins[1]!r} has no StableHLO lowering rule")
    return decompose(_pick_rows)(em, eqn, ins)


def _to_front(x, d: int):
    return P["Permute"].apply(x, (d,) + tuple(i for i in range(x.ndim) if i != d))


def _flat_rows(shape: tuple[int, ...], k: int, idxs: list) -> np.ndarray:
    """a[i0, i1, ...] over the k leading dims as rows of a (prod(shape[:k]), ...) matrix."""
    return np.ravel_multi_index(tuple(i % n for i, n in zip(idxs, shape, strict=False)), shape[:k])


def _pick_rows(a, key):
    """a[..., idx, ...] along one dim d: a one-hot matrix product, then idx's dims at d."""
    d, idx = _rows_key(key, a.ndim)
    if d < 0:  # several leading index arrays: rows of the flattened leading dims
        k = -d
        flat = P["Reshape"].apply(a, (int(np.prod(a.shape[:k])),) + a.shape[k:])
        return _pick_rows(flat, (_flat_rows(a.shape, k, idx),))
    n = a.shape[d]
    moved = _to_front(a, d)
    flat = P["Reshape"].apply(moved, (n, -1))
    picked = P["MatMul"].apply(_one_hot((idx % n).reshape(-1), n, a.dtype), flat)
    out = P["Reshape"].apply(picked, idx.shape + moved.shape[1:])
    k = idx.ndim  # idx's dims are first; the dims before d go back in front of them
    order = tuple(range(k, k + d)) + tuple(range(k)) + tuple(range(k + d, out.ndim))
    return P["Permute"].apply(out, order)


def _scatter_rows(g, shape, key):
    found = _rows_key(key, len(shape))
    if found is None:
        raise LoweringError(
            f"jit: IndexBackward with the key {key!r} has no StableHLO lowering rule"
        )
    d, idx = found
    if d < 0:
        k = -d
        flat_shape = (int(np.prod(shape[:k])),) + tuple(shape[k:])
        rows = _scatter_rows(g, flat_shape, (_flat_rows(tuple(shape), k, idx),))
        return P["Reshape"].apply(rows, tuple(shape))
    n, k = shape[d], idx.ndim
    # g has idx's dims at position d: bring them to the front, then rows of a (n, rest) matrix
    order = tuple(range(d, d + k)) + tuple(range(d)) + tuple(range(d + k, g.ndim))
    flat = P["Reshape"].apply(P["Permute"].apply(g, order), (idx.size, -1))
    one_hot = _one_hot((idx % n).reshape(-1), n, g.dtype)
    rows = P["MatMul"].apply(P["Permute"].apply(one_hot, (1, 0)), flat)
    moved_shape = (n,) + tuple(s for i, s in enumerate(shape) if i != d)
    moved = P["Reshape"].apply(rows, moved_shape)
    back = tuple(range(1, d + 1)) + (0,) + tuple(range(d + 1, len(shape)))
    return P["Permute"].apply(moved, back)


def _gather(a, dim, index):
    """out[.., k@dim, ..] = sum_m a[.., m@dim, ..] * (index[.., k@dim, ..] == m)."""
    n = a.shape[dim]
    sl = tuple(slice(0, s) if i != dim else slice(None) for i, s in enumerate(index.shape))
    a = P["Index"].apply(a, sl)
    hot = _one_hot(index % n if isinstance(index, np.ndarray) else index, n, a.dtype)
    order = tuple(i for i in range(a.ndim) if i != dim) + (dim,)
    moved = P["Permute"].apply(a, order)  # (.. other dims .., n)
    shape = list(moved.shape)
    shape.insert(dim, 1)
    a_b = P["Reshape"].apply(moved, tuple(shape))
    return P["Sum"].apply(hot * a_b, -1, False)


def _scatter_add(g, shape, dim, index, key):
    n = shape[dim]
    hot = _one_hot(index, n, g.dtype)  # index.shape + (n,)
    spread = hot * P["Reshape"].apply(g, g.shape + (1,))
    summed = P["Sum"].apply(spread, dim, False)  # other dims of index, then n
    order = list(range(summed.ndim - 1))
    order.insert(dim, summed.ndim - 1)
    out = P["Permute"].apply(summed, tuple(order))
    if tuple(out.shape) != tuple(shape):
        pad = tuple(slice(0, s) for s in out.shape)
        out = P["IndexBackward"].apply(out, shape, pad)
    return out


# ----------------------------------------------------------------------------- decompositions
def _kept(x, axis, keepdims, out):
    return out if keepdims else P["Reshape"].apply(out, _reduced_shape(x.shape, axis))


def _reduced_shape(shape, axis):
    axes = _axes(axis, len(shape))
    return tuple(s for i, s in enumerate(shape) if i not in axes)


def _count(shape, axis) -> int:
    return int(np.prod([shape[i] for i in _axes(axis, len(shape))], dtype=np.int64))


def _mean(a, axis, keepdims):
    return P["Sum"].apply(a, axis, keepdims) / max(_count(a.shape, axis), 1)


def _var(a, axis, correction, keepdims):
    d = a - P["Sum"].apply(a, axis, True) / _count(a.shape, axis)
    return P["Sum"].apply(d * d, axis, keepdims) / max(_count(a.shape, axis) - correction, 0)


def _logsumexp(a, axis, keepdims):
    m = P["AMax"].apply(a, axis, True)
    out = m + P["Log"].apply(P["Sum"].apply(P["Exp"].apply(a - m), axis, True))
    return _kept(a, axis, keepdims, out)


def _softmax(a, axis):
    e = P["Exp"].apply(a - P["AMax"].apply(a, axis, True))
    return e / P["Sum"].apply(e, axis, True)


def _log_softmax(a, axis):
    s = a - P["AMax"].apply(a, axis, True)
    return s - P["Log"].apply(P["Sum"].apply(P["Exp"].apply(s), axis, True))


def _cross_entropy(logits, target, reduction):
    n = logits.shape[0]
    picked = _gather(_log_softmax(logits, 1), 1, P["Reshape"].apply(target, (n, 1)))
    scale = (1.0 / n if n else math.nan) if reduction == "mean" else 1.0
    return P["Sum"].apply(picked, None, False) * -scale


def _linear(x, w, b):
    y = P["MatMul"].apply(x, P["Permute"].apply(w, (1, 0)))
    return y if b is None else y + b


def _clamp(a, lo, hi):
    out = a if lo is None else P["Maximum"].apply(a, lo)
    return out if hi is None else P["Minimum"].apply(out, hi)


def _sum_to(a, shape):
    lead = a.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        i + lead for i, s in enumerate(shape) if s == 1 and a.shape[i + lead] != 1
    )
    return P["Reshape"].apply(P["Sum"].apply(a, axes, False) if axes else a, tuple(shape))


def _first_max(a, axis):
    flat = a if axis is not None else P["Reshape"].apply(a, (-1,))
    ax = 0 if axis is None else axis % a.ndim
    n = flat.shape[ax]
    iota = np.arange(n, dtype=a.dtype).reshape((n,) + (1,) * (flat.ndim - ax - 1))
    hits = P["Compare"].apply(flat, P["AMax"].apply(flat, ax, True), "eq")
    first = -P["AMax"].apply(-P["Where"].apply(hits, iota, float(n)), ax, True)
    mask = P["Compare"].apply(first, iota, "eq")
    return mask if axis is not None else P["Reshape"].apply(mask, a.shape)


def _masked_fill(a, mask, fill):
    return P["Where"].apply(
        mask, P["Cast"].apply(fill, a.dtype) if not isinstance(fill, (int, float)) else fill, a
    )


def _embedding(ids, weight, padding_idx):
    picked = P["MatMul"].apply(_one_hot(ids, weight.shape[0], weight.dtype), weight)
    return picked


def _layer_norm(x, w, b, n_dims, eps):
    axes = tuple(range(x.ndim - n_dims, x.ndim))
    xc = x - _mean(x, axes, True)
    out = xc * P["Rsqrt"].apply(_mean(xc * xc, axes, True) + eps)
    out = out if w is None else out * w
    return out if b is None else out + b


def _gelu(x, approximate):
    if approximate == "tanh":
        inner = (x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)
        return x * 0.5 * (P["Tanh"].apply(inner) + 1.0)
    return x * 0.5 * (P["Erf"].apply(x * (1 / math.sqrt(2.0))) + 1.0)


for _name, _op in _UNARY.items():
    rules_for(P[_name], lower=_elementwise(_op))
for _name, _op in _BINARY.items():
    rules_for(P[_name], lower=_elementwise(_op))
_DECOMPOSED = {
    "Mean": _mean,
    "Var": _var,
    "LogSumExp": _logsumexp,
    "Softmax": _softmax,
    "LogSoftmax": _log_softmax,
    "CrossEntropy": _cross_entropy,
    "Linear": _linear,
    "Clamp": _clamp,
    "SumTo": _sum_to,
    "FirstMax": _first_max,
    "MaskedFill": _masked_fill,
    "Embedding": _embedding,
    "LayerNorm": _layer_norm,
    "GELU": _gelu,
    "Dropout": lambda x, mask: x * mask,
    "Gather": _gather,
    "ScatterAdd": _scatter_add,
}
for _name, _fn in _DECOMPOSED.items():
    rules_for(P[_name], lower=decompose(_fn))
rules_for(P["Compare"], lower=_compare)
rules_for(P["Where"], lower=_where)
rules_for(P["ReLU"], lower=_relu)
rules_for(P["Erf"], lower=_erf)
rules_for(P["RoundedDiv"], lower=_rounded_div)
rules_for(P["Cast"], lower=_cast)
rules_for(P["StopGradient"], lower=lambda em, eqn, ins: ins[0])  # the value itself
rules_for(P["MatMul"], lower=_matmul)
rules_for(P["Sum"], lower=_reduction("add"))
rules_for(P["Max"], lower=_reduction("maximum"))
rules_for(P["AMax"], lower=_reduction("maximum"))
rules_for(P["Permute"], lower=_transpose)
rules_for(P["Reshape"], lower=_reshape)
rules_for(P["BroadcastTo"], lower=_broadcast_to)
rules_for(P["Cat"], lower=_concatenate)
rules_for(P["Stack"], lower=_stack)
rules_for(P["Index"], lower=_index)
rules_for(P["IndexBackward"], lower=_index_backward)
