"""Lowering an IR to StableHLO MLIR text: ``lower_ir`` (a whole module) and ``to_stablehlo``.

The rules, one per primitive, are in :mod:`minigrad.ops.lowering` (imported here, so that
they are registered before anything is lowered); what they write with is
:mod:`minigrad.func.emitter`. ``import minigrad`` loads none of the three.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from minigrad.func.emitter import Emitter, lower_eqns, tensor_type
from minigrad.func.ir import trace
from minigrad.ops import lowering  # noqa: F401  (registers the lowering rules)
from minigrad.tracing import IR


def lower_ir(ir: IR, name: str = "main") -> str:
    """The whole module: ``func.func public @main(inputs) -> outputs``."""
    em = Emitter()
    env = {}
    params = []
    for i, v in enumerate(ir.invars):
        env[v] = f"%arg{i}"
        em.types[f"%arg{i}"] = (v.shape, v.dtype)
        params.append(f"%arg{i}: {tensor_type(v.shape, v.dtype)}")
    outs = lower_eqns(em, ir, env)
    outs = [o if isinstance(o, str) else em.constant(o) for o in outs]
    ret_types = ", ".join(tensor_type(*em.types[o]) for o in outs)
    body = "\n".join(em.lines)
    return (
        f"module @minigrad {{\n  func.func public @{name}({', '.join(params)}) "
        f"-> ({ret_types}) {{\n"
        f'{body}\n    "func.return"({", ".join(outs)}) : ({ret_types}) -> ()\n  }}\n}}\n'
    )


def to_stablehlo(f: Callable[..., Any]) -> Callable[..., str]:
    """``to_stablehlo(f)(*args)``: the StableHLO module of ``f`` at these argument types."""

    def lowered(*args: Any) -> str:
        ir, _ = trace(f, args)
        return lower_ir(ir)

    return lowered
