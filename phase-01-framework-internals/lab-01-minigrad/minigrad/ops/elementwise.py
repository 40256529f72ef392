"""Elementwise primitives: arithmetic with torch's broadcasting and dtypes, and unary maps."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from minigrad.function import Primitive
from minigrad.ops.dtypes import _in_dtypes, _like_torch, _torch_result_type
from minigrad.ops.dual import (
    _shape,
    exp,
    log,
    np_erf,
    sum_to,
    value,
)
from minigrad.ops.rulekit import (
    P,
    bcast,
    cmp,
    is_array,
    rules_for,
    tangent_sum,
    unary_jvp,
    vmap_elementwise,
    where0,
)
from minigrad.tensor import Tensor


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
        with np.errstate(invalid="ignore", divide="ignore"):  # (-8) ** 0.5 is nan, as torch
            out = _like_torch(ctx, a**b, a, b)
        ctx.save_for_backward(a, b, out)
        return out

    @staticmethod
    def backward(ctx, g):
        with np.errstate(invalid="ignore", divide="ignore"):  # nan where torch has nan too
            return Pow._backward(ctx, g)

    @staticmethod
    def _backward(ctx, g):
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


def _floating(a: np.ndarray) -> np.ndarray:
    """An integer or bool input of a float-valued unary op becomes float32, torch's default
    float dtype (NumPy would compute in float64)."""
    return a if a.dtype.kind == "f" else a.astype(np.float32)


class Exp(Primitive):
    @staticmethod
    def forward(ctx, a):
        a = _floating(a)
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
        a = _floating(a)
        ctx.save_for_backward(a)
        return np.log(a)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g / a


class Tanh(Primitive):
    @staticmethod
    def forward(ctx, a):
        a = _floating(a)
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
        a = _floating(a)
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


class Erf(Primitive):
    @staticmethod
    def forward(ctx, a):
        a = _floating(a)
        ctx.save_for_backward(a)
        return np_erf(a)

    @staticmethod
    def backward(ctx, g):
        (a,) = ctx.saved_tensors
        return g * (2 / math.sqrt(math.pi)) * exp(-(a * a))


class Abs(Primitive):
    @staticmethod
    def forward(ctx, a):
        ctx.sign = np.sign(a)  # 0 at 0: torch's subgradient
        return np.abs(a)

    @staticmethod
    def backward(ctx, g):
        return g * ctx.sign


class Sqrt(Primitive):
    @staticmethod
    def forward(ctx, a):
        a = _floating(a)
        out = np.sqrt(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g / (2 * out)


class Rsqrt(Primitive):
    @staticmethod
    def forward(ctx, a):
        a = _floating(a)
        with np.errstate(divide="ignore"):  # rsqrt(0) = inf, as torch
            out = 1 / np.sqrt(a)
        ctx.save_for_backward(out)
        return out

    @staticmethod
    def backward(ctx, g):
        (out,) = ctx.saved_tensors
        return g * -0.5 * out * out * out


class Clamp(Primitive):
    """``min(max(a, lo), hi)``; bounds are numbers, arrays or None. As torch: where lo > hi the
    result is hi; the input gets the gradient where lo <= a <= hi, a tensor bound where it
    is the one that took effect."""

    @staticmethod
    def forward(ctx, a, lo, hi):
        if lo is None and hi is None:
            raise ValueError("clamp: at least one of min and max must be given")
        out = a
        if lo is not None:
            out = np.maximum(out, lo)
        if hi is not None:
            out = np.minimum(out, hi)
        keep = np.ones(np.shape(out), dtype=bool)
        if lo is not None:
            keep &= a >= lo
        if hi is not None:
            keep &= a <= hi
        ctx.keep = keep
        ctx.lo_wins = None if lo is None else (a < lo) & (True if hi is None else lo <= hi)
        ctx.hi_wins = None if hi is None else (a > hi) | (False if lo is None else lo > hi)
        ctx.shapes = (np.shape(a), _shape(lo), _shape(hi))
        ctx.dtypes = tuple(getattr(x, "dtype", None) for x in (a, lo, hi))
        return out

    @staticmethod
    def backward(ctx, g):
        sa, sl, sh = ctx.shapes
        na, nl, nh = ctx.needs_input_grad
        ga = sum_to(g * ctx.keep, sa) if na else None
        gl = sum_to(g * ctx.lo_wins, sl) if nl else None
        gh = sum_to(g * ctx.hi_wins, sh) if nh else None
        return ga, gl, gh


class _Extremum(Primitive):
    """maximum / minimum: where the two are equal each gets half the gradient (as torch)."""

    pick = staticmethod(np.maximum)

    @classmethod
    def forward(cls, ctx, a, b):
        out = _like_torch(ctx, cls.pick(a, b), a, b)
        av, bv = np.asarray(a), np.asarray(b)
        ctx.to_a = (cls.pick(av, bv) == av) * 1.0 - (av == bv) * 0.5
        ctx.shapes = (_shape(a), _shape(b))
        return out

    @staticmethod
    def backward(ctx, g):
        sa, sb = ctx.shapes
        na, nb = ctx.needs_input_grad
        ga = sum_to(g * ctx.to_a, sa) if na else None
        gb = sum_to(g * (1.0 - ctx.to_a), sb) if nb else None
        return _in_dtypes(ctx, ga, gb) if ctx.in_dtypes else (ga, gb)


class Maximum(_Extremum):
    pick = staticmethod(np.maximum)


class Minimum(_Extremum):
    pick = staticmethod(np.minimum)


class Where(Primitive):
    """``torch.where(cond, a, b)``: ``cond`` is a constant boolean array."""

    @staticmethod
    def forward(ctx, cond, a, b):
        cond = np.asarray(cond, dtype=bool)
        ctx.cond = cond
        ctx.shapes = (_shape(a), _shape(b))
        out = np.where(cond, a, b)
        want = _torch_result_type(a, b, False)
        return out if out.dtype == want else out.astype(want)

    @staticmethod
    def backward(ctx, g):
        sa, sb = ctx.shapes
        _, na, nb = ctx.needs_input_grad
        ga = sum_to(g * ctx.cond, sa) if na else None
        gb = sum_to(g * ~ctx.cond, sb) if nb else None
        return None, ga, gb


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
# (see minigrad.ops.rulekit for the four kinds and their signatures)
def _sum_to(ct: Any, aval: Any) -> Any:
    return sum_to(ct, aval[0]) if aval is not None else ct


def _binary_transpose(linear_terms):
    def rule(ct, args, linear, avals):
        return tuple(
            _sum_to(term(ct, args), avals[i]) if linear[i] else None
            for i, term in enumerate(linear_terms)
        )

    return rule


def _add_jvp(args, tans):
    out = Add.apply(*args)
    return out, tangent_sum(list(tans), out.shape)


def _sub_jvp(args, tans):
    out = Sub.apply(*args)
    return out, tangent_sum([tans[0], None if tans[1] is None else -tans[1]], out.shape)


def _mul_jvp(args, tans):
    a, b = args
    out = Mul.apply(a, b)
    ta, tb = tans
    terms = [None if ta is None else ta * b, None if tb is None else a * tb]
    return out, tangent_sum(terms, out.shape)


def _div_jvp(args, tans):
    a, b = args
    out = Div.apply(a, b)
    ta, tb = tans
    terms = [None if ta is None else ta / b, None if tb is None else tb * -(out / b)]
    return out, tangent_sum(terms, out.shape)


def _pow_jvp(args, tans):
    a, b = args
    out = Pow.apply(a, b)
    ta, tb = tans
    terms = []
    if ta is not None:
        if not is_array(b):
            terms.append(ta * 0.0 if b == 0 else ta * (b * a ** (b - 1)))
        else:  # torch's masking: d/da is 0 where b == 0
            terms.append(ta * P["Where"].apply(cmp(b, 0, "eq"), 0.0, b * a ** (b - 1)))
    if tb is not None:
        if is_array(a):  # d/db is 0 where a == 0 and b >= 0 (log(0) replaced by log(1))
            zero_base = cmp(a, 0, "eq") * cmp(b, 0, "ge")
            log_a = log(P["Where"].apply(zero_base, 1.0, a))
            terms.append(tb * (out * log_a))
        elif a == 0:  # a zero constant base: 0 where b >= 0, as above
            with np.errstate(divide="ignore", invalid="ignore"):
                terms.append(tb * where0(cmp(b, 0, "lt"), out * float("-inf")))
        else:
            terms.append(tb * (out * float(np.log(a))))
    return out, tangent_sum(terms, out.shape)


def _sign(a):
    cast = P["Cast"]
    return cast.apply(cmp(a, 0, "gt"), a.dtype) - cast.apply(cmp(a, 0, "lt"), a.dtype)


def _clamp_jvp(args, tans):
    a, lo, hi = args
    out = Clamp.apply(a, lo, hi)
    ta, tlo, thi = tans
    terms = []
    if ta is not None:
        keep = None
        if lo is not None:
            keep = cmp(a, lo, "ge")
        if hi is not None:
            keep = cmp(a, hi, "le") if keep is None else keep * cmp(a, hi, "le")
        terms.append(where0(keep, ta))
    if tlo is not None:
        lo_wins = cmp(a, lo, "lt") if hi is None else cmp(a, lo, "lt") * cmp(lo, hi, "le")
        terms.append(where0(lo_wins, tlo))
    if thi is not None:
        hi_wins = cmp(a, hi, "gt") if lo is None else cmp(a, hi, "gt") + cmp(lo, hi, "gt")
        terms.append(where0(hi_wins, thi))
    return out, tangent_sum(terms, out.shape)


def _extremum_jvp(prim):
    def rule(args, tans):
        a, b = args
        out = prim.apply(a, b)
        dt = out.dtype
        cast = P["Cast"]
        to_a = cast.apply(cmp(out, a, "eq"), dt) - cast.apply(cmp(a, b, "eq"), dt) * 0.5
        ta, tb = tans
        terms = [None if ta is None else ta * to_a, None if tb is None else tb * (1.0 - to_a)]
        return out, tangent_sum(terms, out.shape)

    return rule


def _where_jvp(args, tans):
    cond, a, b = args
    out = Where.apply(cond, a, b)
    _, ta, tb = tans
    t = Where.apply(cond, 0.0 if ta is None else ta, 0.0 if tb is None else tb)
    return out, bcast(t, out.shape)


_SQRT_PI = math.sqrt(math.pi)
_UNARY = {
    Neg: lambda t, a, out: -t,
    Exp: lambda t, a, out: t * out,
    Log: lambda t, a, out: t / a,
    Tanh: lambda t, a, out: t * (1.0 - out * out),
    Sigmoid: lambda t, a, out: t * (out * (1.0 - out)),
    ReLU: lambda t, a, out: where0(cmp(a, 0, "gt"), t),
    Erf: lambda t, a, out: t * (exp(-(a * a)) * (2.0 / _SQRT_PI)),
    Abs: lambda t, a, out: t * _sign(a),
    Sqrt: lambda t, a, out: t / (out * 2.0),
    Rsqrt: lambda t, a, out: t * (out * out * out * -0.5),
}
for _prim, _derivative in _UNARY.items():
    rules_for(_prim, vmap=vmap_elementwise(_prim, (0,)), jvp=unary_jvp(_prim, _derivative))

rules_for(Add, jvp=_add_jvp, transpose=_binary_transpose([lambda c, a: c, lambda c, a: c]))
rules_for(Sub, jvp=_sub_jvp, transpose=_binary_transpose([lambda c, a: c, lambda c, a: -c]))
rules_for(
    Mul, jvp=_mul_jvp, transpose=_binary_transpose([lambda c, a: c * a[1], lambda c, a: c * a[0]])
)
rules_for(Div, jvp=_div_jvp, transpose=_binary_transpose([lambda c, a: c / a[1], None]))
rules_for(Neg, transpose=lambda ct, args, linear, avals: (-ct,))
for _prim in (Add, Sub, Mul, Div, Pow, Maximum, Minimum, Compare):
    rules_for(_prim, vmap=vmap_elementwise(_prim, (0, 1)))
rules_for(Pow, jvp=_pow_jvp)
rules_for(Maximum, jvp=_extremum_jvp(Maximum))
rules_for(Minimum, jvp=_extremum_jvp(Minimum))
rules_for(Compare, jvp=lambda args, tans: (Compare.apply(*args), None))
rules_for(Clamp, vmap=vmap_elementwise(Clamp, (0, 1, 2)), jvp=_clamp_jvp)
rules_for(
    Where,
    vmap=vmap_elementwise(Where, (0, 1, 2)),
    jvp=_where_jvp,
    transpose=lambda ct, args, linear, avals: (
        None,
        _sum_to(where0(args[0], ct), avals[1]) if linear[1] else None,
        _sum_to(P["Where"].apply(args[0], 0.0, ct), avals[2]) if linear[2] else None,
    ),
)
