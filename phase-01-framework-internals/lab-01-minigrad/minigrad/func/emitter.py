"""The StableHLO emitter: what the lowering rules (minigrad.ops.lowering) write with.

The text uses MLIR's generic operation syntax (``"stablehlo.add"(%a, %b) : (...) -> ...``),
which every StableHLO consumer parses, so the emitter needs no per-op printing rules. A rule
gets the :class:`Emitter`, the equation (for the types) and its inputs (SSA names for
tensors, Python values for static arguments) and returns the SSA name of the result. Ops
that are compositions of others lower by *decomposition*: the rule traces a small function of
simpler primitives and the emitter lowers that IR inline (see ``decompose``; an op family
may declare one as a ``rulekit.Decomposition`` without loading this module).

Loaded with :mod:`minigrad.func.stablehlo`, never by ``import minigrad``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from minigrad import rules
from minigrad.func.ir import trace
from minigrad.function import Primitive
from minigrad.ops.rulekit import Decomposition
from minigrad.tensor import Tensor
from minigrad.tracer_base import is_tracer
from minigrad.tracing import IR, Eqn, Lit, Var

_ELEM = {
    "float32": "f32",
    "float64": "f64",
    "float16": "f16",
    "int64": "i64",
    "int32": "i32",
    "int8": "i8",
    "uint8": "ui8",
    "bool": "i1",
}


class LoweringError(NotImplementedError):
    """A program jit cannot lower (the message names the primitive and why)."""


def tensor_type(shape: tuple[int, ...], dtype: Any) -> str:
    dt = np.dtype(dtype)
    if dt.name not in _ELEM:
        raise LoweringError(f"no StableHLO element type for dtype {dt}")
    dims = "x".join(str(d) for d in shape)
    return f"tensor<{dims}x{_ELEM[dt.name]}>" if shape else f"tensor<{_ELEM[dt.name]}>"


class Emitter:
    """Collects the body of one ``func.func``: numbered SSA values and their types."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.types: dict[str, tuple[tuple[int, ...], np.dtype]] = {}
        self._n = 0
        self.indent = "    "
        self.const_values: dict[str, np.ndarray] = {}  # constants whose value a rule may read

    def fresh(self) -> str:
        self._n += 1
        return f"%{self._n}"

    def op(
        self,
        name: str,
        operands: list[str],
        shape: tuple[int, ...],
        dtype: Any,
        attrs: str = "",
        region: str = "",
    ) -> str:
        """Emit ``%r = "name"(operands) (region) {attrs} : (types) -> type``; returns %r."""
        out = self.fresh()
        in_types = ", ".join(tensor_type(*self.types[o]) for o in operands)
        attr = f" {{{attrs}}}" if attrs else ""
        reg = f" ({{\n{region}\n{self.indent}}})" if region else ""
        self.lines.append(
            f'{self.indent}{out} = "{name}"({", ".join(operands)}){reg}{attr} : '
            f"({in_types}) -> {tensor_type(shape, dtype)}"
        )
        self.types[out] = (tuple(shape), np.dtype(dtype))
        return out

    def constant(self, value: Any, dtype: Any = None, shape: tuple[int, ...] | None = None) -> str:
        """A constant tensor (a splat for a scalar broadcast to ``shape``); exact bits."""
        arr = np.asarray(value, dtype=dtype)
        shape = arr.shape if shape is None else tuple(shape)
        if arr.size == 1 and arr.shape != shape:
            arr = np.full(shape, arr.reshape(()), dtype=arr.dtype)
        if arr.dtype == bool and arr.size and not (arr == arr.flat[0]).all():
            # as i8 bytes, then converted (i1 has no byte-per-element hex form)
            return self.op("stablehlo.convert", [self.constant(arr.astype(np.int8))], shape, bool)
        out = self.fresh()
        typ = tensor_type(shape, arr.dtype)
        if arr.size and (arr == arr.flat[0]).all() and not np.isnan(arr.flat[0:1]).any():
            text = _scalar_text(arr.flat[0], arr.dtype)
        else:
            text = (
                '"0x'
                + np.ascontiguousarray(arr)
                .astype(arr.dtype.newbyteorder("<"))
                .tobytes()
                .hex()
                .upper()
                + '"'
            )
        attr = f"{{value = dense<{text}> : {typ}}}"
        self.lines.append(f'{self.indent}{out} = "stablehlo.constant"() {attr} : () -> {typ}')
        self.types[out] = (shape, arr.dtype)
        return out

    def convert(self, x: str, dtype: Any) -> str:
        shape, dt = self.types[x]
        return x if dt == np.dtype(dtype) else self.op("stablehlo.convert", [x], shape, dtype)

    def broadcast(self, x: str, shape: tuple[int, ...]) -> str:
        """Right-aligned (NumPy) broadcast of ``x`` to ``shape``."""
        xs, dt = self.types[x]
        if tuple(xs) == tuple(shape):
            return x
        dims = i64_array(i + len(shape) - len(xs) for i in range(len(xs)))
        return self.op(
            "stablehlo.broadcast_in_dim", [x], shape, dt, f"broadcast_dimensions = {dims}"
        )

    def operand(self, x: Any, shape: tuple[int, ...], dtype: Any) -> str:
        """An SSA value or a Python number as a tensor of ``shape`` and ``dtype``."""
        if not isinstance(x, str):
            return self.constant(x, dtype, shape)
        return self.broadcast(self.convert(x, dtype), shape)

    def reshape(self, x: str, shape: tuple[int, ...]) -> str:
        xs, dt = self.types[x]
        return x if tuple(xs) == tuple(shape) else self.op("stablehlo.reshape", [x], shape, dt)

    def reduce(self, x: str, axes: tuple[int, ...], kind: str) -> str:
        """Reduce ``x`` over ``axes`` with add / maximum / minimum (dims dropped)."""
        xs, dt = self.types[x]
        if not axes:
            return x
        init_value = {"add": 0, "maximum": -np.inf, "minimum": np.inf}[kind]
        if dt.kind != "f" and kind != "add":
            info = np.iinfo(dt) if dt.kind in "iu" else None
            init_value = (
                (info.min if kind == "maximum" else info.max) if info else kind == "minimum"
            )
        init = self.constant(init_value, dt, ())
        scalar = tensor_type((), dt)
        ind = self.indent
        region = (
            f"{ind}  ^bb0(%lhs: {scalar}, %rhs: {scalar}):\n"
            f'{ind}    %r = "stablehlo.{kind}"(%lhs, %rhs) : ({scalar}, {scalar}) -> {scalar}\n'
            f'{ind}    "stablehlo.return"(%r) : ({scalar}) -> ()'
        )
        out_shape = tuple(s for i, s in enumerate(xs) if i not in axes)
        dims = i64_array(sorted(axes))
        out = self.fresh()
        self.lines.append(
            f'{ind}{out} = "stablehlo.reduce"({x}, {init}) ({{\n{region}\n{ind}}}) '
            f"{{dimensions = {dims}}} : ({tensor_type(xs, dt)}, {scalar}) -> "
            f"{tensor_type(out_shape, dt)}"
        )
        self.types[out] = (out_shape, dt)
        return out


def i64_array(values: Any) -> str:
    """An MLIR ``array<i64: ...>`` attribute (``array<i64>`` when empty)."""
    values = list(values)
    return f"array<i64: {', '.join(str(int(v)) for v in values)}>" if values else "array<i64>"


def _scalar_text(v: Any, dtype: np.dtype) -> str:
    if dtype.kind == "b":
        return "true" if v else "false"
    if dtype.kind in "iu":
        return str(int(v))
    if np.isinf(v):
        return "0x" + np.asarray(v, dtype.newbyteorder("<")).tobytes()[::-1].hex().upper()
    # MLIR float literals need a mantissa with a dot; 17 / 9 digits round-trip exactly
    return f"{float(v):.17e}" if dtype == np.float64 else f"{float(np.float32(v)):.9e}"


def lower_eqns(em: Emitter, ir: IR, env: dict) -> list:
    """Emit every equation of ``ir``; ``env`` maps its input Vars to SSA names."""
    for var, value in zip(ir.constvars, ir.consts, strict=True):
        if var not in env:
            if is_tracer(value):
                raise LoweringError(
                    "the function closes over a traced value of an outer transformation"
                )
            array = np.asarray(value.data if isinstance(value, Tensor) else value)
            env[var] = em.constant(array)
            em.const_values[env[var]] = array
    for eqn in ir.eqns:
        prim = eqn.prim
        rule = rules.RULES.get("lower", {}).get(prim)
        if isinstance(rule, Decomposition):
            rule = decompose(rule.fn)
        if rule is None:
            kind = "primitive" if issubclass(prim, Primitive) else "user Function"
            raise LoweringError(f"jit: the {kind} {prim.__name__} has no StableHLO lowering rule")
        ins = [x.value if isinstance(x, Lit) else env[x] for x in eqn.ins]
        env[eqn.out] = rule(em, eqn, ins)
    return [o.value if isinstance(o, Lit) else env[o] for o in ir.outs]


def decompose(fn: Callable[..., Any]) -> Callable[[Emitter, Eqn, list], str]:
    """A lowering rule that traces ``fn`` (same arguments as the primitive, built of simpler
    primitives) on stand-ins of the equation's input types and lowers that IR inline."""

    def rule(em: Emitter, eqn: Eqn, ins: list) -> str:
        fixed, traced_at, stand_ins, ssa = [], [], [], []
        for i, (x, v) in enumerate(zip(eqn.ins, ins, strict=True)):
            known = (
                em.const_values.get(v) if isinstance(v, str) else v if isinstance(x, Var) else None
            )
            if isinstance(x, Var) and (known is None or known.dtype.kind == "f"):
                traced_at.append(i)
                stand_ins.append(np.zeros(x.shape, x.dtype))
                ssa.append(v)
                fixed.append(None)
            else:  # a static argument, or an integer/boolean constant (an index, a mask)
                fixed.append(known if isinstance(x, Var) else x.value)

        def call(*traced: Any) -> Any:
            args = list(fixed)
            for i, t in zip(traced_at, traced, strict=True):
                args[i] = t
            return fn(*args)

        with np.errstate(all="ignore"):
            ir, _ = trace(call, tuple(stand_ins))
        env = dict(zip(ir.invars, ssa, strict=True))
        (out,) = lower_eqns(em, ir, env)
        if isinstance(out, str):
            return em.operand(out, eqn.out.shape, eqn.out.dtype)
        return em.constant(out, eqn.out.dtype, eqn.out.shape)

    return rule


def const_or_static(em: Emitter, x: Any) -> Any:
    """A rule's input as a value when it is a constant the emitter knows (an index array)."""
    return em.const_values.get(x, x) if isinstance(x, str) else x
