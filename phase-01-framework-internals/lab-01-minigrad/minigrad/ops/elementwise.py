"""Elementwise primitives: arithmetic with torch's broadcasting and dtypes, and unary maps."""

from __future__ import annotations

import math

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


class Erf(Primitive):
    @staticmethod
    def forward(ctx, a):
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
