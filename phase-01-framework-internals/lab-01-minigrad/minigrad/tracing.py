"""Tracing: run a function on ``Tracer`` tensors and record every primitive it applies.

This is the one thing the transformations of :mod:`minigrad.func` share. ``Function.apply``
asks :func:`dispatch` first whenever a trace is active; when an argument is a ``Tracer``, the
op is *recorded* as an equation of that tracer's trace instead of being run for real. The
recorded program is an :class:`IR` (a list of typed equations, printed like a jaxpr).

A Tracer carries a *representative value*: a real array of the right shape and dtype (the
example being traced, or zeros for a tangent). Running the op's NumPy forward on it gives the
output's shape and dtype for free, exactly as eager minigrad would, so no op needs a separate
shape function. Only the equation (the primitive and its static arguments) is kept; nothing
the forward stored on its ``ctx`` leaks into the IR.

Traces nest (``vmap(grad(f))``): each has a level; an op whose arguments come from several
traces is recorded in the innermost (highest level) one, and the outer tracers become
constants of that IR, read back when the IR is interpreted (where they are recorded into
the outer trace in turn). Nothing here knows any op.
"""

from __future__ import annotations

import inspect
import itertools
from typing import Any

import numpy as np

from minigrad.grad_mode import grad_mode
from minigrad.rules import PRIMITIVES
from minigrad.tensor import Tensor
from minigrad.tracer_base import Traced, TracingError, is_tracer

TRACES: list[Trace] = []  # the active traces, innermost last (Function.apply checks it)
_levels = itertools.count()


class Var:
    """A typed value of the IR: shape and dtype (the name is given when printed)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype) -> None:
        self.shape, self.dtype = tuple(shape), np.dtype(dtype)


class Lit:
    """A static argument (a Python number, an axis, a shape, a string, None)."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value


class Eqn:
    """``out = prim(*ins)``: ins are Vars (traced or constant) or Lits."""

    __slots__ = ("prim", "ins", "out")

    def __init__(self, prim: type, ins: list, out: Var) -> None:
        self.prim, self.ins, self.out = prim, ins, out


class IR:
    """A traced program: typed inputs, constants (captured arrays or outer tracers), equations
    in order, outputs (Vars or Lits)."""

    def __init__(self, invars: list, constvars: list, consts: list, eqns: list, outs: list):
        self.invars, self.constvars, self.consts = invars, constvars, consts
        self.eqns, self.outs = eqns, outs

    def const_env(self) -> dict:
        return dict(zip(self.constvars, self.consts, strict=True))

    def __str__(self) -> str:
        return format_ir(self)

    __repr__ = __str__


class Trace:
    """Collects the equations of one traced function."""

    def __init__(self) -> None:
        self.level = next(_levels)
        self.eqns: list[Eqn] = []
        self.const_vars: dict[int, tuple[Var, Any]] = {}  # id(object) -> (var, object)
        self.done = False

    def __enter__(self) -> Trace:
        TRACES.append(self)
        return self

    def __exit__(self, *exc: Any) -> None:
        TRACES.remove(self)
        self.done = True

    def new_arg(self, rep: np.ndarray) -> Tracer:
        rep = np.asarray(rep)
        return Tracer._make(self, Var(rep.shape, rep.dtype), rep)

    def const(self, value: Any) -> Var:
        entry = self.const_vars.get(id(value))
        if entry is None:
            data = value.data if isinstance(value, Tensor) else np.asarray(value)
            entry = self.const_vars[id(value)] = (Var(data.shape, data.dtype), value)
        return entry[0]

    def record(self, prim: type, args: tuple) -> Tracer:
        ins, reps = [], []
        for a in args:
            if isinstance(a, Traced) and a._trace is self:  # is_tracer, inlined (hot)
                ins.append(a._var)
                reps.append(Tensor._wrap(a.data))
            elif isinstance(a, (Tensor, np.ndarray)):
                ins.append(self.const(a))
                reps.append(Tensor._wrap(a.data) if isinstance(a, Traced) else a)
            else:
                ins.append(Lit(a))
                reps.append(a)
        with grad_mode(False):
            out = prim.apply(*reps)
        data = out.data if isinstance(out, Tensor) else np.asarray(out)
        var = Var(data.shape, data.dtype)
        self.eqns.append(Eqn(prim, ins, var))
        out = Tracer._make(self, var, data)
        if getattr(prim, "may_view", False):  # so an in-place op on it is refused (see
            out._view = True  # Tracer._inplace): the base it may alias would not see it
        return out

    def to_ir(self, invars: list[Var], outputs: list) -> IR:
        outs = []
        for o in outputs:
            if is_tracer(o) and o._trace is self:
                outs.append(o._var)
            elif isinstance(o, (Tensor, np.ndarray)):
                outs.append(self.const(o))
            else:
                outs.append(Lit(o))
        constvars = [v for v, _ in self.const_vars.values()]
        consts = [c for _, c in self.const_vars.values()]
        return IR(invars, constvars, consts, self.eqns, outs)


class Tracer(Tensor, Traced):
    """A Tensor standing for a traced value; ``data`` is its representative array."""

    __slots__ = ("_trace", "_var")

    @classmethod
    def _make(cls, trace: Trace, var: Var, rep: np.ndarray) -> Tracer:
        t = object.__new__(cls)
        t.data, t.grad, t.grad_fn, t._requires_grad, t._version_counter = (
            rep,
            None,
            None,
            False,
            [0],
        )
        t._trace, t._var = trace, var
        return t

    def __repr__(self) -> str:
        return f"Tracer({_type_str(self._var)}, level={self._trace.level})"

    def _concrete(self, what: str) -> Any:
        raise TracingError(
            f"{what} of a traced tensor: its value depends on the input, which a trace does not "
            "know (data-dependent Python control flow); use minigrad.where / masks instead"
        )

    def __bool__(self) -> bool:
        return self._concrete("bool()")

    def item(self) -> float:
        return self._concrete("item()")

    def tolist(self) -> Any:
        return self._concrete("tolist()")

    def __float__(self) -> float:
        return self._concrete("float()")

    # Comparisons stay traced (a boolean Tracer via the Compare primitive), so that masks
    # built from traced values follow the batch/level they belong to.
    def _cmp(self, other: Any, op: str) -> Tracer:
        return PRIMITIVES["Compare"].apply(self, other, op)

    def __gt__(self, other: Any) -> Any:
        return self._cmp(other, "gt")

    def __lt__(self, other: Any) -> Any:
        return self._cmp(other, "lt")

    def __ge__(self, other: Any) -> Any:
        return self._cmp(other, "ge")

    def __le__(self, other: Any) -> Any:
        return self._cmp(other, "le")

    def __eq__(self, other: Any) -> Any:  # type: ignore[override]
        return self._cmp(other, "eq")

    def __ne__(self, other: Any) -> Any:  # type: ignore[override]
        return self._cmp(other, "ne")

    __hash__ = Tensor.__hash__

    def _inplace(self, op: str, other: Any, alpha: float = 1.0) -> Tracer:
        """Inside a transformation (vmap, grad, jit): the op is recorded and the tracer takes
        the result's place, so the update is part of the traced program (NumPy on the
        representative array would change one example and record nothing)."""
        if getattr(self, "_view", False):
            raise TracingError(
                "in-place operation on a view (indexing, reshape, ...) inside a transformation "
                "is not supported; use an out-of-place op"
            )
        result = PRIMITIVES[op].apply(self, other if alpha == 1.0 else other * alpha)
        if result.shape != self.shape:
            raise RuntimeError(
                f"output with shape {self.shape} doesn't match the broadcast shape {result.shape}"
            )
        if result.dtype != self.dtype:
            if not np.can_cast(result.dtype, self.dtype, "same_kind"):
                raise RuntimeError(
                    f"result type {result.dtype} can't be cast to the desired output type "
                    f"{self.dtype}"
                )
            result = PRIMITIVES["Cast"].apply(result, self.dtype)
        self.data, self._trace, self._var = result.data, result._trace, result._var
        return self


def dispatch(prim: type, args: tuple) -> Any:
    """Called by ``Function.apply`` while a trace is active: record the op in the innermost
    trace among its arguments' tracers, or return NotImplemented to run it for real."""
    top = None
    for a in args:
        if isinstance(a, Traced):  # is_tracer, inlined: every op under a trace comes here
            if a._trace.done:
                raise TracingError(
                    f"{prim.__name__}: a tracer escaped from a finished transformation "
                    "(a traced value was stored outside the function and used later)"
                )
            if top is None or a._trace.level > top.level:
                top = a._trace
    if top is None:
        return NotImplemented
    for i in getattr(prim, "shape_from_values", ()):
        key = args[i] if isinstance(args[i], tuple) else (args[i],)
        if any(is_tracer(k) and k.dtype == bool for k in key):
            raise TracingError(
                f"{prim.__name__}: a boolean mask computed from a traced value gives an output "
                "whose shape depends on the data (data-dependent shape); use where() instead"
            )
    return top.record(prim, args)


# ----------------------------------------------------------------------------- printing
_DTYPE = {"float32": "f32", "float64": "f64", "int64": "i64", "int32": "i32", "bool": "bool"}


def _type_str(v: Var) -> str:
    return f"{_DTYPE.get(v.dtype.name, v.dtype.name)}[{','.join(map(str, v.shape))}]"


def _names() -> Any:
    for n in itertools.count(1):
        for combo in itertools.product("abcdefghijklmnopqrstuvwxyz", repeat=n):
            yield "".join(combo)


def _lit_str(v: Any) -> str:
    if isinstance(v, np.ndarray):  # a constant index array inside a key: its type only
        return _type_str(Var(v.shape, v.dtype))
    if isinstance(v, tuple) and v and all(isinstance(k, (slice, int, type(None))) for k in v):
        return "[" + ",".join(_key_str(k) for k in v) + "]"
    if isinstance(v, tuple):
        return "(" + ",".join(_lit_str(x) for x in v) + ")"
    if isinstance(v, slice):
        return _key_str(v)
    if isinstance(v, float):
        return f"{v:g}"
    return repr(v)


def _key_str(k: Any) -> str:
    if isinstance(k, slice):
        parts = ["" if x is None else str(x) for x in (k.start, k.stop)]
        return ":".join(parts) + (f":{k.step}" if k.step is not None else "")
    return "None" if k is None else str(k)


# Arguments printed as [name=value] parameters (jaxpr style) rather than as operands.
_STATIC = {
    "approximate",
    "axes",
    "axis",
    "correction",
    "dim",
    "dtype",
    "eps",
    "keepdims",
    "key",
    "n_dims",
    "nan_is_max",
    "op",
    "padding_idx",
    "reduction",
    "shape",
}


def _arg_names(prim: type) -> list[str | None]:
    try:
        params = list(inspect.signature(prim.forward).parameters.values())[1:]
        compute = getattr(prim, "compute", None)
        if compute is not None and any(p.kind is p.VAR_POSITIONAL for p in params):
            # a declared elementwise op: its compute(...) names the arguments
            params = [p for p in inspect.signature(compute).parameters.values() if p.name != "ctx"]
    except (TypeError, ValueError):
        return []
    return [None if p.kind is p.VAR_POSITIONAL else p.name for p in params]


def format_ir(ir: IR) -> str:
    """A jaxpr-like listing: ``{ lambda consts ; inputs. let eqns in (outputs) }``."""
    gen, names = _names(), {}

    def name(v: Any) -> str:
        if isinstance(v, Lit):
            return _lit_str(v.value)
        if v not in names:
            names[v] = next(gen)
        return names[v]

    def decl(v: Var) -> str:
        return f"{name(v)}:{_type_str(v)}"

    consts = " ".join(decl(v) for v in ir.constvars)
    ins = " ".join(decl(v) for v in ir.invars)
    lines = [f"{{ lambda {consts} ; {ins}. let"]
    for e in ir.eqns:
        arg_names = _arg_names(e.prim)
        params, operands = [], []
        for i, x in enumerate(e.ins):
            arg = arg_names[i] if i < len(arg_names) else None
            if isinstance(x, Lit) and arg in _STATIC:
                params.append(f"{arg}={_lit_str(x.value)}")
            else:
                operands.append(name(x))
        head = e.prim.__name__.lower() + (f"[{' '.join(params)}]" if params else "")
        lines.append(f"    {decl(e.out)} = {head} {' '.join(operands)}")
    lines.append(f"  in ({', '.join(name(o) for o in ir.outs)}) }}")
    return "\n".join(lines)
