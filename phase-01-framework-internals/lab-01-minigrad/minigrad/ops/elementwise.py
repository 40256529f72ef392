"""Elementwise primitives: arithmetic with torch's broadcasting and dtypes, and unary maps.

Each op states its derivative once. A unary map (:class:`UnaryMap`) gives ``chain(g, a, out)``
= g·f'(a); a broadcasting op of several inputs (:class:`Elementwise`) gives one ``partials``
entry per input, g·∂out/∂input before broadcasting is undone. The Jacobian of an elementwise
op is diagonal, so that one formula serves as the backward (g a cotangent, then summed down
to the input's shape), the jvp (g a tangent) and, for the inputs the op is linear in, the
transpose: PyTorch's ``derivatives.yaml`` with ``auto_element_wise``. The formulas are written
with operators and the helpers of :mod:`minigrad.ops.array_or_tensor`, so they run on arrays
(a first-order backward), on Tensors (``create_graph=True``) and on tracers (minigrad.func).
Defining a subclass registers its vmap, jvp and transpose rules.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from minigrad.function import Primitive
from minigrad.ops.array_or_tensor import (
    cast,
    eq,
    exp,
    ge,
    gt,
    le,
    log,
    lt,
    np_erf,
    shape_of,
    sign,
    sum_to,
    where,
)
from minigrad.ops.dtypes import cast_to_torch_result, grads_in_input_dtypes, torch_result_type
from minigrad.ops.rulekit import (
    Decomposition,
    is_array,
    rules_for,
    tangent_sum,
    vmap_elementwise,
)


class UnaryMap(Primitive):
    """An elementwise map f, declared once: ``compute(a, *params)`` on arrays and
    ``chain(g, a, out, *params)`` = g·f'(a). ``chain`` is the backward (g the upstream
    gradient) and the jvp (g the tangent); for a linear map it is the transpose too.

    ``saves`` says which value ``chain`` reads ("input", "output" or "none": backward gets
    only that one, the other is None); ``float_only`` computes an integer input in float32,
    torch's default float dtype (NumPy would use float64); ``decomposition`` (optional, the
    map written with other primitives) is its lowering for jit.
    """

    abstract = True
    saves = "input"
    float_only = True
    linear = False
    decomposition: Callable[..., Any] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__dict__.get("abstract", False):
            rules_for(
                cls,
                vmap=vmap_elementwise(cls, (0,)),
                jvp=_unary_jvp(cls),
                transpose=_unary_transpose(cls) if cls.linear else None,
                lower=Decomposition(cls.decomposition) if cls.decomposition else None,
            )

    @staticmethod
    def compute(a: np.ndarray, *params: Any) -> np.ndarray:
        raise NotImplementedError

    @staticmethod
    def chain(g: Any, a: Any, out: Any, *params: Any) -> Any:
        raise NotImplementedError

    @classmethod
    def forward(cls, ctx, a, *params):
        if cls.float_only and a.dtype.kind != "f":
            a = a.astype(np.float32)
        out = cls.compute(a, *params)
        if params:
            ctx.params = params
        if cls.saves == "input":
            ctx.save_for_backward(a)
        elif cls.saves == "output":
            ctx.save_for_backward(out)
        return out

    @classmethod
    def backward(cls, ctx, g):
        saves = cls.saves
        a = out = None
        if saves == "input":
            (a,) = ctx.saved_tensors
        elif saves == "output":
            (out,) = ctx.saved_tensors
        params = getattr(ctx, "params", None)
        if params is None:
            return cls.chain(g, a, out)
        return (cls.chain(g, a, out, *params),) + (None,) * len(params)


def _unary_jvp(prim: type[UnaryMap]) -> Callable[..., Any]:
    def rule(args: tuple, tans: tuple) -> tuple[Any, Any]:
        out = prim.apply(*args)
        t = tans[0]
        return out, None if t is None else prim.chain(t, args[0], out, *args[1:])

    return rule


def _unary_transpose(prim: type[UnaryMap]) -> Callable[..., Any]:
    def rule(ct: Any, args: tuple, linear: tuple, avals: tuple) -> tuple:
        return (prim.chain(ct, None, None, *args[1:]),) + (None,) * (len(args) - 1)

    return rule


class Elementwise(Primitive):
    """A broadcasting elementwise op of several inputs, declared once: ``compute(ctx, *args)``
    on arrays and ``partials``, one per input: ``(g, *inputs, out) -> g·∂out/∂input`` at the
    output's shape (None for an input without a derivative).

    Backward sums each partial down to its input's shape; jvp adds the partials of the
    tangents; the transpose for an input in ``linear_in`` (where the op is linear in it, the
    others held constant) is its backward term. ``saves`` lists what the partials read
    (input positions, and "out"); the others reach them as None. ``decomposition`` as for
    UnaryMap.
    """

    abstract = True
    partials: tuple = ()
    saves: tuple = ()
    linear_in: tuple[int, ...] = ()
    decomposition: Callable[..., Any] | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__dict__.get("abstract", False):
            return
        n = len(cls.partials)
        slots = tuple(n if s == "out" else s for s in cls.saves)
        if slots not in (tuple(range(len(slots))), (*range(n), n)):
            raise TypeError(
                f"{cls.__name__}.saves must be the leading inputs, or all inputs and 'out'"
            )
        # what backward pads the saved values with to get (*inputs, out)
        cls._unsaved = (None,) * (n + 1 - len(slots))
        rules_for(
            cls,
            vmap=vmap_elementwise(cls, tuple(range(n))),
            jvp=_elementwise_jvp(cls),
            transpose=_elementwise_transpose(cls) if cls.linear_in else None,
            lower=Decomposition(cls.decomposition) if cls.decomposition else None,
        )

    @staticmethod
    def compute(ctx: Any, *args: Any) -> Any:
        raise NotImplementedError

    @classmethod
    def forward(cls, ctx, *args):
        out = cls.compute(ctx, *args)
        ctx.shapes = tuple(map(shape_of, args))
        saves = cls.saves
        if saves:
            if saves[-1] == "out":
                ctx.save_for_backward(*args, out)
            else:
                ctx.save_for_backward(*args[: len(saves)])
        return out

    @classmethod
    def backward(cls, ctx, g):
        # (the hot path of every binary op: written out rather than as a loop)
        vals = ctx.saved_tensors + cls._unsaved if cls.saves else cls._unsaved
        needs, shapes, partials = ctx.needs_input_grad, ctx.shapes, cls.partials
        if len(partials) == 2:
            pa, pb = partials
            ga = sum_to(pa(g, *vals), shapes[0]) if needs[0] else None
            gb = sum_to(pb(g, *vals), shapes[1]) if needs[1] else None
            grads = (ga, gb)
        else:
            grads = tuple(
                [
                    sum_to(p(g, *vals), shape) if need and p is not None else None
                    for p, need, shape in zip(partials, needs, shapes, strict=True)
                ]
            )
        if getattr(ctx, "in_dtypes", None):  # a mixed-dtype forward: each in its own dtype
            return grads_in_input_dtypes(ctx, *grads)
        return grads


def _elementwise_jvp(prim: type[Elementwise]) -> Callable[..., Any]:
    def rule(args: tuple, tans: tuple) -> tuple[Any, Any]:
        out = prim.apply(*args)
        terms = [
            None if t is None or p is None else p(t, *args, out)
            for p, t in zip(prim.partials, tans, strict=True)
        ]
        return out, tangent_sum(terms, out.shape)

    return rule


def _elementwise_transpose(prim: type[Elementwise]) -> Callable[..., Any]:
    def rule(ct: Any, args: tuple, linear: tuple, avals: tuple) -> tuple:
        return tuple(
            sum_to(prim.partials[i](ct, *args, None), avals[i][0]) if lin else None
            for i, lin in enumerate(linear)
        )

    return rule


# ----------------------------------------------------------------------------- arithmetic
class Add(Elementwise):
    partials = (lambda g, a, b, out: g, lambda g, a, b, out: g)
    linear_in = (0, 1)

    @staticmethod
    def compute(ctx, a, b):
        return cast_to_torch_result(ctx, a + b, a, b)


class Sub(Elementwise):
    partials = (lambda g, a, b, out: g, lambda g, a, b, out: -g)
    linear_in = (0, 1)

    @staticmethod
    def compute(ctx, a, b):
        return cast_to_torch_result(ctx, a - b, a, b)


class Mul(Elementwise):
    partials = (lambda g, a, b, out: g * b, lambda g, a, b, out: g * a)
    saves = (0, 1)
    linear_in = (0, 1)  # in each factor, the other held constant

    @staticmethod
    def compute(ctx, a, b):
        return cast_to_torch_result(ctx, a * b, a, b)


class Div(Elementwise):
    partials = (lambda g, a, b, out: g / b, lambda g, a, b, out: -g * a / (b * b))
    saves = (0, 1)
    linear_in = (0,)

    @staticmethod
    def compute(ctx, a, b):
        return cast_to_torch_result(ctx, a / b, a, b, true_div=True)


def _zero_derivative(g: Any, *args: Any) -> Any:
    return g * 0.0  # a step function: its derivative is 0 (torch returns zeros, not None)


class RoundedDiv(Elementwise):
    """``torch.div(a, b, rounding_mode="trunc" | "floor")``: the quotient rounded toward zero
    or down, in torch's result dtype (integers stay integers). Not differentiable in any
    useful sense: the gradient is zero, as torch's."""

    partials = (_zero_derivative, _zero_derivative, None)

    @staticmethod
    def compute(ctx, a, b, mode):
        if mode not in ("trunc", "floor"):
            raise ValueError(f"div: rounding_mode must be 'trunc', 'floor' or None, not {mode!r}")
        with np.errstate(divide="ignore", invalid="ignore"):  # x / 0: inf or nan, as torch
            q = np.floor_divide(a, b)  # Python's (and torch's) floor division, ints and floats
            if mode == "trunc":
                q = np.where((np.fmod(a, b) != 0) & ((np.asarray(a) < 0) != (np.asarray(b) < 0)),
                             q + 1, q)  # fmt: skip
                if np.asarray(q).dtype.kind == "f":  # a float quotient: trunc(a / b) exactly
                    q = np.trunc(np.true_divide(a, b))
        return cast_to_torch_result(ctx, np.asarray(q), a, b)


def _pow_d_base(g: Any, a: Any, b: Any, out: Any) -> Any:
    # torch's pow_backward masking: 0 where b == 0 (not 0 * a**-1 = nan at a = 0); there the
    # exponent b - 1 becomes 0, so b * a**0 = 0 exactly
    if not is_array(b):
        return g * 0.0 if b == 0 else g * (b * a ** (b - 1))
    return g * (b * a ** (b - 1 + eq(b, 0)))


def _pow_d_exponent(g: Any, a: Any, b: Any, out: Any) -> Any:
    # out * log(a), and 0 where a == 0 and b >= 0 (log(0) replaced by log(1) = 0), as torch
    if is_array(a):
        log_a = log(a + eq(a, 0) * ge(b, 0))
    elif a == 0:  # a zero constant base: log is 0 where b >= 0, else -inf
        log_a = cast(where(ge(b, 0), 0.0, -np.inf), out.dtype)
    else:  # a constant base: its log is a (weak) Python number, nan below 0
        log_a = float(np.log(a))
    return g * (out * log_a)


class Pow(Elementwise):
    """``a ** b``; b is usually a Python number, but a tensor exponent is differentiable too."""

    partials = (_pow_d_base, _pow_d_exponent)
    saves = (0, 1, "out")

    @staticmethod
    def compute(ctx, a, b):
        with np.errstate(invalid="ignore", divide="ignore"):  # (-8) ** 0.5 is nan, as torch
            return cast_to_torch_result(ctx, a**b, a, b)

    @classmethod
    def backward(cls, ctx, g):
        with np.errstate(invalid="ignore", divide="ignore"):  # nan where torch has nan too
            return super().backward(ctx, g)


def _extremum_partials(loses: Callable[..., Any]) -> tuple:
    """maximum / minimum: the input that lost gets 0, each gets half where they tie (torch's
    rule; with a NaN neither loses, so both get the gradient)."""

    def d_a(g, a, b, out):
        return where(loses(a, b), 0.0, where(eq(a, b), g * 0.5, g))

    def d_b(g, a, b, out):
        return where(loses(b, a), 0.0, where(eq(a, b), g * 0.5, g))

    return d_a, d_b


class Maximum(Elementwise):
    partials = _extremum_partials(lt)
    saves = (0, 1)

    @staticmethod
    def compute(ctx, a, b):
        return cast_to_torch_result(ctx, np.maximum(a, b), a, b)


class Minimum(Elementwise):
    partials = _extremum_partials(gt)
    saves = (0, 1)

    @staticmethod
    def compute(ctx, a, b):
        return cast_to_torch_result(ctx, np.minimum(a, b), a, b)


def _clamp_keeps_input(a: Any, lo: Any, hi: Any) -> Any:
    keep = None if lo is None else ge(a, lo)
    if hi is not None:
        keep = le(a, hi) if keep is None else keep * le(a, hi)
    return keep


def _clamp_lower_wins(a: Any, lo: Any, hi: Any) -> Any:
    return lt(a, lo) if hi is None else lt(a, lo) * le(lo, hi)


def _clamp_upper_wins(a: Any, lo: Any, hi: Any) -> Any:
    return gt(a, hi) if lo is None else gt(a, hi) + gt(lo, hi)  # + of masks: or


class Clamp(Elementwise):
    """``min(max(a, lo), hi)``; bounds are numbers, arrays or None. As torch: where lo > hi the
    result is hi; the input gets the gradient where lo <= a <= hi, a tensor bound where it
    is the one that took effect."""

    partials = (
        lambda g, a, lo, hi, out: where(_clamp_keeps_input(a, lo, hi), g, 0.0),
        lambda g, a, lo, hi, out: where(_clamp_lower_wins(a, lo, hi), g, 0.0),
        lambda g, a, lo, hi, out: where(_clamp_upper_wins(a, lo, hi), g, 0.0),
    )
    saves = (0, 1, 2)

    @staticmethod
    def compute(ctx, a, lo, hi):
        if lo is None and hi is None:
            raise ValueError("clamp: at least one of min and max must be given")
        out = a
        if lo is not None:
            out = np.maximum(out, lo)
        if hi is not None:
            out = np.minimum(out, hi)
        return out


class Where(Elementwise):
    """``torch.where(cond, a, b)``: ``cond`` is a boolean array (no derivative)."""

    partials = (
        None,
        lambda g, cond, a, b, out: where(cond, g, 0.0),
        lambda g, cond, a, b, out: where(cond, 0.0, g),
    )
    saves = (0,)
    linear_in = (1, 2)

    @staticmethod
    def compute(ctx, cond, a, b):
        out = np.where(np.asarray(cond, dtype=bool), a, b)
        want = torch_result_type(a, b, False)
        return out if out.dtype == want else out.astype(want)


# ----------------------------------------------------------------------------- unary maps
class Neg(UnaryMap):
    saves, float_only, linear = "none", False, True
    compute = staticmethod(np.negative)

    @staticmethod
    def chain(g, a, out):
        return -g


class Exp(UnaryMap):
    saves = "output"
    compute = staticmethod(np.exp)

    @staticmethod
    def chain(g, a, out):
        return g * out


class Log(UnaryMap):
    compute = staticmethod(np.log)

    @staticmethod
    def chain(g, a, out):
        return g / a


class Tanh(UnaryMap):
    saves = "output"
    compute = staticmethod(np.tanh)

    @staticmethod
    def chain(g, a, out):
        return g * (1 - out * out)


class Sigmoid(UnaryMap):
    saves = "output"

    @staticmethod
    def compute(a):
        # Two branches on e = exp(-|a|) <= 1, so nothing overflows: 1 / (1 + e) for a >= 0,
        # e / (1 + e) for a < 0. The latter keeps full relative accuracy in the negative tail,
        # where 1 - (something close to 1) would cancel (as 0.5 * (1 + tanh(a / 2)) does).
        with np.errstate(under="ignore"):  # exp(-1000) underflowing to 0 is right
            e = np.exp(-np.abs(a))
        d = 1 + e
        return np.where(a >= 0, 1 / d, e / d)

    @staticmethod
    def chain(g, a, out):
        return g * (out * (1 - out))


class ReLU(UnaryMap):
    float_only = False

    @staticmethod
    def compute(a):
        return np.maximum(a, 0)

    @staticmethod
    def chain(g, a, out):
        return g * gt(a, 0)  # a mask product: several times faster than where(mask, g, 0)


_TWO_OVER_SQRT_PI = 2 / math.sqrt(math.pi)


class Erf(UnaryMap):
    compute = staticmethod(np_erf)

    @staticmethod
    def chain(g, a, out):
        return g * (exp(-(a * a)) * _TWO_OVER_SQRT_PI)


class Abs(UnaryMap):
    float_only = False
    compute = staticmethod(np.abs)

    @staticmethod
    def chain(g, a, out):
        return g * sign(a)  # 0 at 0: torch's subgradient


class Sqrt(UnaryMap):
    saves = "output"
    compute = staticmethod(np.sqrt)

    @staticmethod
    def chain(g, a, out):
        return g / (out * 2)


class Rsqrt(UnaryMap):
    saves = "output"

    @staticmethod
    def compute(a):
        with np.errstate(divide="ignore"):  # rsqrt(0) = inf, as torch
            return 1 / np.sqrt(a)

    @staticmethod
    def chain(g, a, out):
        return g * (out * out * out * -0.5)


class Compare(Primitive):
    """``a <op> b`` elementwise (op: gt, lt, ge, le, eq, ne): a boolean mask, no gradient.
    Traced comparisons use it, so a mask follows the batch and level of its inputs."""

    differentiable = False
    _OPS = {
        "gt": np.greater,
        "lt": np.less,
        "ge": np.greater_equal,
        "le": np.less_equal,
        "eq": np.equal,
        "ne": np.not_equal,
    }

    @staticmethod
    def forward(ctx, a, b, op):
        return np.asarray(Compare._OPS[op](a, b))

    @staticmethod
    def backward(ctx, g):
        return None, None, None


# ----------------------------------------------------------------------------- rules
# Everything above derives its rules; Compare has no derivative (its jvp: a zero tangent).
rules_for(
    Compare,
    vmap=vmap_elementwise(Compare, (0, 1)),
    jvp=lambda args, tans: (Compare.apply(*args), None),
)
