"""Every built-in differentiable op: one ``Primitive`` per op, forward and backward side by side.

``forward`` receives ndarrays. ``backward`` receives the upstream gradient ``g`` and reads
``ctx.saved_tensors``; both are ndarrays on the fast path and Tensors under
``create_graph=True``. So a backward is written only with Python operators (+ - * / @ **),
``.reshape``/``.mT`` (which ndarray and Tensor share) and the *dual helpers* below, which pick
the NumPy or the recorded minigrad version by the argument's type. That is what makes second
order work without a second set of rules.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minigrad.function import Primitive
from minigrad.tensor import Tensor

# ----------------------------------------------------------------------------- dual helpers


def _np_sum_to(x: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    lead = x.ndim - len(shape)
    axes = tuple(range(lead)) + tuple(
        i + lead for i, s in enumerate(shape) if s == 1 and x.shape[i + lead] != 1
    )
    if axes:
        x = x.sum(axis=axes, keepdims=True)
    return x.reshape(shape)


def sum_to(x: Any, shape: tuple[int, ...]) -> Any:
    """Undo broadcasting: sum ``x`` down to ``shape``."""
    if x.shape == shape:
        return x
    if isinstance(x, Tensor):
        return SumTo.apply(x, shape)
    return _np_sum_to(x, shape)


def expand(x: Any, shape: tuple[int, ...]) -> Any:
    if x.shape == shape:
        return x
    if isinstance(x, Tensor):
        return BroadcastTo.apply(x, shape)
    return np.broadcast_to(x, shape)


def reduce_sum(x: Any, axis: Any, keepdims: bool) -> Any:
    if isinstance(x, Tensor):
        return Sum.apply(x, axis, keepdims)
    return x.sum(axis=axis, keepdims=keepdims)


def exp(x: Any) -> Any:
    return Exp.apply(x) if isinstance(x, Tensor) else np.exp(x)


def log(x: Any) -> Any:
    return Log.apply(x) if isinstance(x, Tensor) else np.log(x)


def softmax(x: Any, axis: int) -> Any:
    if isinstance(x, Tensor):
        return Softmax.apply(x, axis)
    return _np_softmax(x, axis)


def permute(x: Any, axes: tuple[int, ...]) -> Any:
    return Permute.apply(x, axes) if isinstance(x, Tensor) else x.transpose(axes)


def cast(x: Any, dtype: Any) -> Any:
    """``x`` in ``dtype`` (recorded for a Tensor, so create_graph sees through it)."""
    if x.dtype == dtype:
        return x
    return Cast.apply(x, dtype) if isinstance(x, Tensor) else x.astype(dtype)


def value(x: Any) -> Any:
    """The raw array (for non-differentiable uses such as masks)."""
    return x.data if isinstance(x, Tensor) else x


def _shape(x: Any) -> tuple[int, ...]:
    if isinstance(x, (np.ndarray, Tensor)):
        return x.shape
    return () if isinstance(x, (int, float)) else np.shape(x)  # np.shape is slow on scalars


def _np_softmax(x: np.ndarray, axis: int) -> np.ndarray:
    # initial=-inf: a size-0 dim has no max, and softmax over it is just empty (as torch)
    e = np.exp(x - x.max(axis=axis, keepdims=True, initial=-np.inf))
    e /= e.sum(axis=axis, keepdims=True)
    return e


# ----------------------------------------------------------------------------- dtypes
# NumPy 2 and torch promote alike when both operands share a dtype, or one is a Python number
# and the other a float array: the hot path, which _like_torch only checks. Elsewhere they
# differ: torch treats a 0-dim tensor as "weak" beside a dimensioned one (float32 * 0-dim
# float64 stays float32), puts any float above any int (int64 * float32 is float32), and gives
# float32 where NumPy's default is float64 (int / int, int * 0.5). NumPy scalars (np.float64)
# arrive here as Python numbers (Primitive.apply converts them), weak as in torch.
_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2}
_DEFAULT = {0: np.dtype(bool), 1: np.dtype(np.int64), 2: np.dtype(np.float32)}


def _promote(d1: np.dtype, d2: np.dtype) -> np.dtype:
    c1, c2 = _CATEGORY[d1.kind], _CATEGORY[d2.kind]
    if c1 != c2:  # torch: the higher category wins whatever the size (int64 * float16 -> f16)
        return d1 if c1 > c2 else d2
    return np.promote_types(d1, d2)


def _torch_result_type(a: Any, b: Any, true_div: bool) -> np.dtype:
    """torch.result_type: promote the dimensioned operands; a 0-dim one, then a Python
    number, counts only where it raises the category (float over int over bool)."""
    groups: list[list[np.dtype]] = [[], [], []]  # dimensioned, 0-dim, Python numbers
    for x in (a, b):
        if isinstance(x, np.ndarray):
            groups[0 if x.ndim else 1].append(x.dtype)
        elif isinstance(x, (bool, int, float)):
            groups[2].append(_DEFAULT[2 if isinstance(x, float) else int(not isinstance(x, bool))])
    result = None
    for group in groups:
        if not group:
            continue
        d = group[0] if len(group) == 1 else _promote(*group)
        if result is None:
            result = d
        elif _CATEGORY[d.kind] > _CATEGORY[result.kind]:
            result = _promote(result, d)
    if true_div and result.kind != "f":  # torch's true division of ints gives float32
        result = _DEFAULT[2]
    return result


def _like_torch(ctx: Any, out: Any, a: Any, b: Any, true_div: bool = False) -> Any:
    """Cast ``out`` (NumPy's result of a binary op) to torch's result dtype. When that
    mixes dtypes, remember the inputs' dtypes: each gradient must come back in its own."""
    dt = out.dtype
    da = a.dtype if isinstance(a, np.ndarray) else None
    db = b.dtype if isinstance(b, np.ndarray) else None
    if (da is None or da == dt) and (db is None or db == dt):  # the hot path: NumPy agrees
        ctx.in_dtypes = None
        return out
    ctx.in_dtypes = (da, db)
    want = _torch_result_type(a, b, true_div)
    return out if want == dt else out.astype(want)


def _in_dtypes(ctx: Any, ga: Any, gb: Any) -> tuple[Any, Any]:
    """Each gradient in its input's dtype (only after a mixed-dtype forward)."""
    da, db = ctx.in_dtypes
    if ga is not None and da is not None:
        ga = cast(ga, da)
    if gb is not None and db is not None:
        gb = cast(gb, db)
    return ga, gb


class Cast(Primitive):
    """A copy, possibly in another dtype: ``x.clone()``, ``x.to(dtype)``, ``x.double()``."""

    @staticmethod
    def forward(ctx, a, dtype):
        ctx.in_dtype = a.dtype
        return np.array(a, dtype=dtype, copy=True)

    @staticmethod
    def backward(ctx, g):
        return cast(g, ctx.in_dtype), None


# ----------------------------------------------------------------------------- elementwise


class Add(Primitive):
    @staticmethod
    def forward(ctx, a, b):
        ctx.shapes = (_shape(a), _shape(b))
        return _like_torch(ctx, a + b, a, b)

    @staticmethod
    def backward(ctx, g):
        sa, sb = ctx.shapes
        na, nb = ctx.needs_input_grad
        ga, gb = (sum_to(g, sa) if na else None, sum_to(g, sb) if nb else None)
        return _in_dtypes(ctx, ga, gb) if ctx.in_dtypes else (ga, gb)


class Sub(Primitive):
    @staticmethod
    def forward(ctx, a, b):
        ctx.shapes = (_shape(a), _shape(b))
        return _like_torch(ctx, a - b, a, b)

    @staticmethod
    def backward(ctx, g):
        sa, sb = ctx.shapes
        na, nb = ctx.needs_input_grad
        ga, gb = (sum_to(g, sa) if na else None, sum_to(-g, sb) if nb else None)
        return _in_dtypes(ctx, ga, gb) if ctx.in_dtypes else (ga, gb)


class Mul(Primitive):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return _like_torch(ctx, a * b, a, b)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        na, nb = ctx.needs_input_grad
        ga = sum_to(g * b, _shape(a)) if na else None
        gb = sum_to(g * a, _shape(b)) if nb else None
        return _in_dtypes(ctx, ga, gb) if ctx.in_dtypes else (ga, gb)


class Div(Primitive):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return _like_torch(ctx, a / b, a, b, true_div=True)

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        na, nb = ctx.needs_input_grad
        ga = sum_to(g / b, _shape(a)) if na else None
        gb = sum_to(-g * a / (b * b), _shape(b)) if nb else None
        return _in_dtypes(ctx, ga, gb) if ctx.in_dtypes else (ga, gb)


class Neg(Primitive):
    @staticmethod
    def forward(ctx, a):
        return -a

    @staticmethod
    def backward(ctx, g):
        return -g


class Pow(Primitive):
    """``a ** b``; b is usually a Python number, but a tensor exponent is differentiable too."""

    @staticmethod
    def forward(ctx, a, b):
        out = _like_torch(ctx, a**b, a, b)
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx, g):
        # torch's pow_backward masking: d/da is 0 where b == 0 (not 0 * a**-1 = nan at a = 0),
        # d/db is 0 where a == 0 and b >= 0 (not 0 * log(0) = nan).
        a, b, out = ctx.saved_tensors
        na, nb = ctx.needs_input_grad
        ga = gb = None
        if na:
            bv = value(b)
            if isinstance(bv, np.ndarray):
                # where b == 0 the exponent b - 1 becomes 0, so b * a**0 = 0 exactly
                ga = sum_to(g * b * a ** (b - 1 + (bv == 0)), _shape(a))
            elif bv == 0:
                ga = sum_to(g * 0.0, _shape(a))
            else:
                ga = sum_to(g * b * a ** (b - 1), _shape(a))
        if nb:
            zero_base = (value(a) == 0) & (value(b) >= 0)
            # log(a) at those points is replaced by log(1) = 0
            safe_a = a + zero_base if np.any(zero_base) else a
            if isinstance(a, (Tensor, np.ndarray)):
                log_a = log(safe_a)
            else:  # a constant base (2 ** x): its log is a constant in the output's dtype,
                # not a float64 NumPy value that would promote a float32 gradient
                log_a = np.log(np.asarray(safe_a, dtype=value(out).dtype))
            gb = sum_to(g * out * log_a, _shape(b))
        return _in_dtypes(ctx, ga, gb) if ctx.in_dtypes else (ga, gb)


class Exp(Primitive):
    @staticmethod
    def forward(ctx, a):
        out = np.exp(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * out


class Log(Primitive):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return np.log(a)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g / a


class Tanh(Primitive):
    @staticmethod
    def forward(ctx, a):
        out = np.tanh(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * (1 - y * y)


class Sigmoid(Primitive):
    @staticmethod
    def forward(ctx, a):
        # Two branches on e = exp(-|a|) <= 1, so nothing overflows: 1 / (1 + e) for a >= 0,
        # e / (1 + e) for a < 0. The latter keeps full relative accuracy in the negative tail,
        # where 1 - (something close to 1) would cancel (as 0.5 * (1 + tanh(a / 2)) does).
        with np.errstate(under="ignore"):  # exp(-1000) underflowing to 0 is right
            e = np.exp(-np.abs(a))
        d = 1 + e
        out = np.where(a >= 0, 1 / d, e / d)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y * (1 - y)


class ReLU(Primitive):
    @staticmethod
    def forward(ctx, a):
        ctx.save_for_backward(a)
        return np.maximum(a, 0)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g * (value(a) > 0)


# ----------------------------------------------------------------------------- linear algebra


class MatMul(Primitive):
    """``a @ b`` with NumPy semantics: 1-D operands and broadcast batch dims."""

    @staticmethod
    def forward(ctx, a, b):
        if np.ndim(a) == 0 or np.ndim(b) == 0:
            raise ValueError("matmul needs operands with at least 1 dim (use * for scalars)")
        # torch refuses mixed dtypes too, rather than promoting a float32 model to float64
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype != b.dtype:
            raise RuntimeError(
                f"expected m1 and m2 to have the same dtype, but got: {a.dtype} != {b.dtype}"
            )
        ctx.save_for_backward(a, b)
        return a @ b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        na, nb = ctx.needs_input_grad
        if a.ndim == 2 and b.ndim == 2:  # the common case, without reshapes
            return (g @ b.mT if na else None, a.mT @ g if nb else None)
        if a.ndim == 1 and b.ndim == 1:
            return (g * b if na else None, g * a if nb else None)
        # Promote 1-D operands to matrices as NumPy does, then undo the promotion.
        a2 = a.reshape((1, a.shape[0])) if a.ndim == 1 else a
        b2 = b.reshape((b.shape[0], 1)) if b.ndim == 1 else b
        g2 = g
        if a.ndim == 1:
            g2 = g2.reshape(g2.shape[:-1] + (1, g2.shape[-1]))
        if b.ndim == 1:
            g2 = g2.reshape(g2.shape + (1,))
        ga = sum_to(g2 @ b2.mT, a2.shape).reshape(a.shape) if na else None
        gb = sum_to(a2.mT @ g2, b2.shape).reshape(b.shape) if nb else None
        return ga, gb


class Linear(Primitive):
    """``x @ weight.T + bias`` fused (torch's layout: weight is (out, in))."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        if weight.ndim != 2 or x.shape[-1] != weight.shape[1]:
            raise ValueError(
                f"linear: input of shape {x.shape} does not fit weight of shape "
                f"{weight.shape} (expects (..., {weight.shape[-1]}))"
            )
        if isinstance(x, np.ndarray) and x.dtype != weight.dtype:  # as torch: no promotion
            raise RuntimeError(
                f"linear: input and weight must have the same dtype, got {x.dtype} and "
                f"{weight.dtype}"
            )
        ctx.save_for_backward(x, weight)
        out = x @ weight.T
        if bias is not None:
            out += bias  # in place: out is a fresh array, saves one allocation
        return out

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        nx, nw, nb = ctx.needs_input_grad
        if x.ndim != 2:
            g2 = g.reshape((-1, g.shape[-1]))
            x2 = x.reshape((-1, x.shape[-1]))
        else:
            g2, x2 = g, x
        gx = g @ w if nx else None
        gw = g2.mT @ x2 if nw else None
        gb = reduce_sum(g2, 0, False) if nb else None
        return gx, gw, gb


# ----------------------------------------------------------------------------- reductions


def _kept_shape(shape: tuple[int, ...], axis: Any) -> tuple[int, ...]:
    if axis is None:
        return (1,) * len(shape)
    axes = axis if isinstance(axis, tuple) else (axis,)
    return tuple(1 if i in axes else s for i, s in enumerate(shape))


class Sum(Primitive):
    @staticmethod
    def forward(ctx, a, axis, keepdims):
        ctx.in_shape = a.shape
        ctx.kept = _kept_shape(a.shape, axis)
        return a.sum(axis=axis, keepdims=keepdims)

    @staticmethod
    def backward(ctx, g):
        return expand(g.reshape(ctx.kept), ctx.in_shape), None, None


class Mean(Primitive):
    @staticmethod
    def forward(ctx, a, axis, keepdims):
        ctx.in_shape = a.shape
        ctx.kept = _kept_shape(a.shape, axis)
        out = a.mean(axis=axis, keepdims=keepdims)
        ctx.count = a.size // max(out.size, 1) if a.size else 1
        return out

    @staticmethod
    def backward(ctx, g):
        return expand(g.reshape(ctx.kept) / ctx.count, ctx.in_shape), None, None


def _check_reduced_dims(a: np.ndarray, axis: Any) -> None:
    """max over a size-0 dim has no value (torch raises too); over other dims of an empty
    tensor it is just empty, e.g. (0, 3) -> (0,) along dim 1."""
    if a.size:
        return
    axes = range(a.ndim) if axis is None else axis if isinstance(axis, tuple) else (axis,)
    for d in axes:
        if a.shape[d] == 0:
            raise ValueError(f"max: reduction dim {d} has size 0 (input shape {a.shape})")


class Max(Primitive):
    """Max over one ``axis`` (or all); the gradient goes to the first arg-max, as in
    torch.max(dim)."""

    @staticmethod
    def forward(ctx, a, axis, keepdims):
        _check_reduced_dims(a, axis)
        ctx.in_shape = a.shape
        ctx.kept = _kept_shape(a.shape, axis)
        if axis is None:
            mask = np.zeros(a.shape, dtype=bool)
            mask.flat[np.argmax(a)] = True
        else:
            if isinstance(axis, tuple):
                raise ValueError("max over several dims at once is not supported; use amax")
            idx = np.expand_dims(np.argmax(a, axis=axis), axis)
            mask = np.zeros(a.shape, dtype=bool)
            np.put_along_axis(mask, idx, True, axis=axis)
        ctx.mask = mask
        return a.max(axis=axis, keepdims=keepdims)

    @staticmethod
    def backward(ctx, g):
        return expand(g.reshape(ctx.kept), ctx.in_shape) * ctx.mask, None, None


class AMax(Primitive):
    """Max over ``axis`` (None, an int or a tuple); tied maxima share the gradient evenly, as
    in torch.amax and torch.max() without dim."""

    @staticmethod
    def forward(ctx, a, axis, keepdims, nan_is_max=False):
        _check_reduced_dims(a, axis)
        ctx.in_shape = a.shape
        ctx.kept = _kept_shape(a.shape, axis)
        top = a.max(axis=axis, keepdims=True)
        hits = a == top
        if nan_is_max and np.isnan(top).any():
            # torch.max() without dim (evenly_distribute_backward) routes the gradient to the
            # NaN elements; amax leaves it NaN everywhere (NaN == NaN is false: 0 / 0)
            hits = np.isnan(a)
        with np.errstate(invalid="ignore"):  # 0 / 0 -> NaN on purpose (amax of a NaN row)
            weights = hits / hits.sum(axis=axis, keepdims=True)
        ctx.weights = weights.astype(a.dtype, copy=False)
        return top if keepdims else np.squeeze(top, axis=axis)

    @staticmethod
    def backward(ctx, g):
        return expand(g.reshape(ctx.kept), ctx.in_shape) * ctx.weights, None, None, None


# ----------------------------------------------------------------------------- shape ops


class Reshape(Primitive):
    may_view = True

    @staticmethod
    def forward(ctx, a, shape):
        ctx.in_shape = a.shape
        try:
            return a.reshape(shape)
        except ValueError:
            raise ValueError(f"cannot reshape a tensor of shape {a.shape} to {shape}") from None

    @staticmethod
    def backward(ctx, g):
        return g.reshape(ctx.in_shape), None


class Permute(Primitive):
    may_view = True

    @staticmethod
    def forward(ctx, a, axes):
        ctx.inverse = tuple(np.argsort(axes))
        return a.transpose(axes)

    @staticmethod
    def backward(ctx, g):
        return permute(g, ctx.inverse), None


class BroadcastTo(Primitive):
    may_view = True

    @staticmethod
    def forward(ctx, a, shape):
        ctx.in_shape = a.shape
        return np.broadcast_to(a, shape)

    @staticmethod
    def backward(ctx, g):
        return sum_to(g, ctx.in_shape), None


class SumTo(Primitive):
    @staticmethod
    def forward(ctx, a, shape):
        ctx.in_shape = a.shape
        return _np_sum_to(a, shape)

    @staticmethod
    def backward(ctx, g):
        return expand(g, ctx.in_shape), None


def _is_basic_index(key: Any) -> bool:
    keys = key if isinstance(key, tuple) else (key,)
    return all(isinstance(k, (int, slice, type(None), type(Ellipsis))) for k in keys)


def _unwrap_key(key: Any) -> Any:
    if isinstance(key, Tensor):
        return key.data
    if isinstance(key, tuple):
        return tuple(k.data if isinstance(k, Tensor) else k for k in key)
    return key


class Index(Primitive):
    """``a[key]``: basic indexing (ints, slices, None, ...) and integer-array indexing."""

    may_view = True  # basic indexing returns a view; integer-array indexing a copy

    @staticmethod
    def forward(ctx, a, key):
        key = _unwrap_key(key)
        ctx.in_shape = a.shape
        ctx.key = key
        try:
            return a[key]
        except IndexError as e:
            msg = f"index {key!r} is invalid for a tensor of shape {a.shape}: {e}"
            raise IndexError(msg) from None

    @staticmethod
    def backward(ctx, g):
        return IndexBackward.apply(g, ctx.in_shape, ctx.key), None


class IndexBackward(Primitive):
    """Scatter-add ``g`` into zeros of ``shape`` at ``key`` (repeated indices accumulate)."""

    @staticmethod
    def forward(ctx, g, shape, key):
        ctx.key = key
        out = np.zeros(shape, dtype=g.dtype)
        if _is_basic_index(key):
            out[key] = g
        else:
            np.add.at(out, key, g)
        return out

    @staticmethod
    def backward(ctx, gg):
        return Index.apply(gg, ctx.key), None, None

    @classmethod
    def apply(cls, g: Any, shape: tuple[int, ...], key: Any) -> Any:  # type: ignore[override]
        if isinstance(g, Tensor):
            return super().apply(g, shape, key)
        return cls.forward(_Scratch(), g, shape, key)  # fast path: plain NumPy


class _Scratch:
    """A throwaway ctx for calling a forward directly on arrays."""


# ----------------------------------------------------------------------------- softmax family


class Softmax(Primitive):
    @staticmethod
    def forward(ctx, a, axis):
        ctx.axis = axis
        out = _np_softmax(a, axis)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return y * (g - reduce_sum(g * y, ctx.axis, True)), None


class LogSoftmax(Primitive):
    @staticmethod
    def forward(ctx, a, axis):
        ctx.axis = axis
        if a.size == 0:  # nothing to normalise (NumPy's max would have no identity)
            out = a.copy()
        else:
            shifted = a - a.max(axis=axis, keepdims=True)
            out = shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g - exp(out) * reduce_sum(g, ctx.axis, True), None


def _target_out_of_bounds(target: np.ndarray, n_classes: int) -> IndexError:
    """torch's message, naming the first bad target and where it sits."""
    bad = np.flatnonzero((target < 0) | (target >= n_classes))[0]
    return IndexError(
        f"cross_entropy: Target {target.flat[bad]} is out of bounds (target[{bad}]; "
        f"class ids must lie in [0, {n_classes - 1}])"
    )


class CrossEntropy(Primitive):
    """Fused log_softmax + negative log-likelihood over class logits of shape (N, C)."""

    @staticmethod
    def forward(ctx, logits, target, reduction):
        if logits.ndim != 2:
            raise ValueError(f"cross_entropy expects logits of shape (N, C), got {logits.shape}")
        target = np.asarray(target)
        n, c = logits.shape
        if target.shape != (n,):
            raise ValueError(
                f"cross_entropy: target shape {target.shape} does not match logits "
                f"{logits.shape} (expected ({n},))"
            )
        if target.dtype.kind not in "iu":
            raise TypeError(f"cross_entropy: targets must be integer class ids, got {target.dtype}")
        if reduction not in ("mean", "sum"):
            raise ValueError(f"cross_entropy: reduction must be 'mean' or 'sum', not {reduction!r}")
        rows = np.arange(n)
        shifted = logits - logits.max(axis=1, keepdims=True)
        if n and (target.min() < 0 or target.max() >= c):  # NumPy would wrap a negative id
            raise _target_out_of_bounds(target, c)
        picked = shifted[rows, target]
        e = np.exp(shifted)
        s = e.sum(axis=1, keepdims=True)
        losses = np.log(s[:, 0]) - picked
        e /= s  # now the softmax probabilities, kept for the fast backward
        ctx.probs, ctx.target, ctx.rows = e, target, rows
        # the mean of no losses is nan, as in torch (the sum is 0)
        ctx.scale = (1.0 / n if n else np.nan) if reduction == "mean" else 1.0
        ctx.save_for_backward(logits)
        return losses.sum() * ctx.scale

    @staticmethod
    def backward(ctx, g):
        (logits,) = ctx.saved_tensors
        if isinstance(g, Tensor):  # create_graph: recompute softmax as a recorded op
            onehot = np.zeros(logits.shape, dtype=logits.dtype)
            onehot[ctx.rows, ctx.target] = 1
            return (softmax(logits, 1) - onehot) * (g * ctx.scale), None, None
        d = ctx.probs.copy()
        d[ctx.rows, ctx.target] -= 1
        d *= g * ctx.scale
        return d, None, None
