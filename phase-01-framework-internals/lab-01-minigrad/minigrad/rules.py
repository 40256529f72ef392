"""Per-primitive rule tables: the extension point beside each op (autodidax style).

The engine only ever calls ``Function.backward``. Other interpretations of an op, for example a
vmap batching rule or an HLO-style lowering, register here keyed by (rule kind, primitive) and
are looked up by whatever transformation needs them, so adding one never touches the engine::

    from minigrad import ops, rules

    @rules.register("flops", ops.MatMul)
    def matmul_flops(a_shape, b_shape): ...

``rules.get("flops", ops.MatMul)`` returns it; a missing rule raises a NotImplementedError that
names both the kind and the primitive.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# name -> Primitive subclass; filled by Primitive.__init_subclass__.
PRIMITIVES: dict[str, type] = {}
# kind -> {primitive class -> rule}
RULES: dict[str, dict[type, Callable[..., Any]]] = {}


def register(kind: str, primitive: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorator: attach ``rule`` of ``kind`` to ``primitive``."""
    if primitive not in PRIMITIVES.values():
        raise TypeError(f"{primitive!r} is not a registered minigrad primitive")

    def decorator(rule: Callable[..., Any]) -> Callable[..., Any]:
        RULES.setdefault(kind, {})[primitive] = rule
        return rule

    return decorator


def unregister(primitive: type) -> None:
    """Remove a primitive and all its rules (for a throwaway primitive, e.g. in a test)."""
    PRIMITIVES.pop(primitive.__name__, None)
    for table in RULES.values():
        table.pop(primitive, None)


def get(kind: str, primitive: type) -> Callable[..., Any]:
    try:
        return RULES[kind][primitive]
    except KeyError:
        raise NotImplementedError(
            f"no {kind!r} rule registered for primitive {primitive.__name__}"
        ) from None


def missing(kind: str) -> list[str]:
    """Primitives that still lack a rule of this kind (a to-do list for a new transform)."""
    have = RULES.get(kind, {})
    return sorted(name for name, p in PRIMITIVES.items() if p not in have)


class RuleCtx:
    """The one stand-in ``ctx`` outside the engine: for running a primitive's forward on
    arrays directly (an in-place update, a fast path) and for reusing its backward as another
    rule (a transpose). Forward sets attributes on it as on a graph node."""

    saved_tensors: tuple = ()
    needs_input_grad: tuple = ()

    def save_for_backward(self, *tensors: Any) -> None:
        self.saved_tensors = tensors


# How random draws are treated, innermost transformation last: vmap's "error" or "same" (see
# minigrad.func.vmap), or "jit" (refused: a traced draw would be frozen into the program).
RANDOMNESS: list[str] = []


def check_randomness(what: str) -> None:
    """Called before a random draw: under ``vmap(..., randomness="error")`` it is an error, as
    in torch.func (with "same", one draw serves every example)."""
    if RANDOMNESS and RANDOMNESS[-1] == "jit":
        raise RuntimeError(
            f"jit: {what} draws random numbers while tracing; the compiled program would reuse "
            "that one draw on every call. Draw the mask outside and pass it in as an argument"
        )
    if RANDOMNESS and RANDOMNESS[-1] == "error":
        raise RuntimeError(
            f"vmap: {what} draws random numbers inside vmap; pass randomness='same' to use one "
            "draw for every example (randomness='different' is not supported by minigrad)"
        )
