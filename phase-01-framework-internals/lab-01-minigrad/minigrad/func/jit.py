"""jit: trace, lower to StableHLO, compile with XLA on PJRT (minigrad.func.pjrt), cache per
signature.

A call walks its arguments once (``signature``): that one walk yields both the cache key and
the input arrays in the IR's input order. A new key traces, lowers and compiles; a known key
goes straight to the executable. jaxlib is imported on the first compile only:
``import minigrad`` and every other transformation stay NumPy-only.

A compiled executable sees arrays, not the graph around them. So when an input is being
traced by an outer transformation (``grad(jit(f))``, ``vmap(jit(f))``, ``jit(jit(f))``) or
requires grad while grad mode is on, ``jit`` calls ``func`` itself and the outer
transformation (or the tape) records its operations, as ``jax.jit`` under ``jax.grad``
differentiates the program it wraps; only a call on plain values runs the executable.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from minigrad import grad_mode, rules
from minigrad.func.ir import trace
from minigrad.func.pjrt import Executable
from minigrad.func.pytree import tree_builder
from minigrad.func.stablehlo import lower_ir
from minigrad.tensor import Tensor
from minigrad.tracer_base import is_tracer
from minigrad.tracing import IR


@dataclass
class Compiled:
    """One cache entry: the IR, its StableHLO text, the XLA executable, what each stage of
    the first call took (trace, lower to StableHLO, XLA compile), and ``build``, which puts
    the output Tensors back into the traced output structure. Calling it runs the program."""

    ir: IR
    text: str
    out_spec: Any
    executable: Executable
    trace_seconds: float
    lower_seconds: float

    def __post_init__(self) -> None:
        self.build = tree_builder(self.out_spec)

    @property
    def compile_seconds(self) -> float:
        return self.executable.compile_seconds

    def optimized_hlo(self) -> str:
        """XLA's optimized HLO for this executable (fusions, layouts), as text."""
        return self.executable.optimized_hlo()

    def __call__(self, arrays: list[np.ndarray]) -> Any:
        """The outputs for these input arrays (``signature``'s), as the traced function
        returned them: Tensors in the same containers."""
        wrap = Tensor._wrap
        return self.build([wrap(o) for o in self.executable(arrays)])


def signature(args: tuple) -> tuple[tuple, list[np.ndarray]]:
    """The cache key of a call and its input arrays, from one walk of ``args``.

    The key holds the container structure (types, lengths, dict keys), each tensor's shape
    and dtype, and the repr of every other leaf (a static argument: a new value is a new
    program). The walk visits leaves in ``tree_flatten``'s order, which is the order
    ``trace`` makes them IR inputs."""
    key: list = []
    arrays: list[np.ndarray] = []
    _walk(args, key, arrays)
    return tuple(key), arrays


class _Recorded(Exception):
    """An input a compiled call would cut from its graph (see the module docstring)."""


def _walk(x: Any, key: list, arrays: list) -> None:
    # exact types first (a plain Tensor, dict, tuple, list), and a container's plain-Tensor
    # children read in its own loop: a call's arguments are mostly that, and a type identity
    # test is cheaper than a chain of isinstance tests and a recursive call per leaf.
    # Subclasses (a Parameter, a Tracer, a namedtuple) take the isinstance branches.
    kind = type(x)
    if kind is dict:
        key.append((dict, tuple(x)))
        children = x.values()
    elif kind is tuple or kind is list:
        key.append((kind, len(x)))
        children = x
    elif kind is Tensor and not x._requires_grad:
        a = x.data
        arrays.append(a)
        key.append((a.shape, a.dtype))
        return
    else:
        _walk_other(x, key, arrays)
        return
    for child in children:
        if type(child) is Tensor and not child._requires_grad:
            a = child.data
            arrays.append(a)
            key.append((a.shape, a.dtype))
        else:
            _walk(child, key, arrays)


def _walk_other(x: Any, key: list, arrays: list) -> None:
    if isinstance(x, Tensor):
        if is_tracer(x) or (x.requires_grad and grad_mode.state.enabled):
            raise _Recorded
        a = x.data
        arrays.append(a)
        key.append((a.shape, a.dtype))
    elif isinstance(x, (tuple, list)):
        key.append((type(x), len(x)))
        for child in x:
            _walk(child, key, arrays)
    elif isinstance(x, dict):
        key.append((dict, tuple(x)))
        for child in x.values():
            _walk(child, key, arrays)
    elif isinstance(x, np.ndarray):
        arrays.append(x)
        key.append((x.shape, x.dtype))
    else:
        key.append(("static", repr(x)))


def _out_types(ir: IR) -> list[tuple[tuple[int, ...], np.dtype]]:
    types = []
    for o in ir.outs:
        if hasattr(o, "shape"):
            types.append((tuple(o.shape), np.dtype(o.dtype)))
        else:  # a literal output: lower_ir emits it as a constant of its own type
            value = np.asarray(getattr(o.value, "data", o.value))
            types.append((value.shape, value.dtype))
    return types


def jit(func: Callable[..., Any]) -> Callable[..., Any]:
    """Compile ``func`` with XLA; one executable per input signature (structure, shapes,
    dtypes, static arguments), built on first use. ``wrapped.cache`` maps each signature to
    its :class:`Compiled` entry (so ``len(wrapped.cache)`` counts compiles)."""
    cache: dict[tuple, Compiled] = {}

    def compile_for(args: tuple) -> Compiled:
        start = time.perf_counter()
        rules.RANDOMNESS.append("jit")
        try:
            ir, out_spec = trace(func, args)
        finally:
            rules.RANDOMNESS.pop()
        traced = time.perf_counter()
        text = lower_ir(ir)
        lowered = time.perf_counter()
        executable = Executable(text, _out_types(ir))
        return Compiled(ir, text, out_spec, executable, traced - start, lowered - traced)

    def wrapped(*args: Any) -> Any:
        try:
            key, arrays = signature(args)
        except _Recorded:
            return func(*args)
        entry = cache.get(key)
        if entry is None:
            entry = cache[key] = compile_for(args)
        return entry(arrays)

    wrapped.cache = cache  # type: ignore[attr-defined]
    return wrapped
