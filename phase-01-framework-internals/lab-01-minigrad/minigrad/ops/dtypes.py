"""torch's dtype promotion for binary ops, and Cast (a recorded copy in a dtype)."""

from __future__ import annotations

from typing import Any

import numpy as np

from minigrad.function import Primitive
from minigrad.ops.array_or_tensor import cast
from minigrad.ops.rulekit import rules_for, vmap_elementwise

# NumPy 2 and torch promote alike when both operands share a dtype, or one is a Python number
# and the other a float array: the hot path, which cast_to_torch_result only checks. Elsewhere they
# differ: torch treats a 0-dim tensor as "weak" beside a dimensioned one (float32 * 0-dim
# float64 stays float32), puts any float above any int (int64 * float32 is float32), and gives
# float32 where NumPy's default is float64 (int / int, int * 0.5). NumPy scalars (np.float64)
# arrive here as Python numbers (Primitive.apply converts them), weak as in torch.
_CATEGORY = {"b": 0, "u": 1, "i": 1, "f": 2}
_DEFAULT = {0: np.dtype(bool), 1: np.dtype(np.int64), 2: np.dtype(np.float32)}


def promote_types(d1: np.dtype, d2: np.dtype) -> np.dtype:
    c1, c2 = _CATEGORY[d1.kind], _CATEGORY[d2.kind]
    if c1 != c2:  # torch: the higher category wins whatever the size (int64 * float16 -> f16)
        return d1 if c1 > c2 else d2
    return np.promote_types(d1, d2)


def torch_result_type(a: Any, b: Any, true_div: bool) -> np.dtype:
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
        d = group[0] if len(group) == 1 else promote_types(*group)
        if result is None:
            result = d
        elif _CATEGORY[d.kind] > _CATEGORY[result.kind]:
            result = promote_types(result, d)
    if true_div and result.kind != "f":  # torch's true division of ints gives float32
        result = _DEFAULT[2]
    return result


def cast_to_torch_result(ctx: Any, out: Any, a: Any, b: Any, true_div: bool = False) -> Any:
    """Cast ``out`` (NumPy's result of a binary op) to torch's result dtype. When that
    mixes dtypes, remember the inputs' dtypes: each gradient must come back in its own."""
    dt = out.dtype
    da = a.dtype if isinstance(a, np.ndarray) else None
    db = b.dtype if isinstance(b, np.ndarray) else None
    if (da is None or da == dt) and (db is None or db == dt):  # the hot path: NumPy agrees
        ctx.in_dtypes = None
        return out
    ctx.in_dtypes = (da, db)
    want = torch_result_type(a, b, true_div)
    return out if want == dt else out.astype(want)


def grads_in_input_dtypes(ctx: Any, ga: Any, gb: Any) -> tuple[Any, Any]:
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


class StopGradient(Primitive):
    """``x.detach()`` of a traced tensor: the value, with no derivative (eagerly, detach shares
    the array and needs no op; under vmap/jit it must stay traced, not become a constant)."""

    differentiable = False

    @staticmethod
    def forward(ctx, a):
        return a

    @staticmethod
    def backward(ctx, g):
        return None


# ----------------------------------------------------------------------------- rules
rules_for(Cast, linear=(0,), vmap=vmap_elementwise(Cast, (0,)))
rules_for(
    StopGradient,
    vmap=lambda size, args, batched: StopGradient.apply(args[0]),
    jvp=lambda args, tans: (StopGradient.apply(args[0]), None),
)
