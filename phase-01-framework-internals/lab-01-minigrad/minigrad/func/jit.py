"""jit: trace, lower to StableHLO, compile with XLA (through TensorFlow), cache per signature.

TensorFlow is imported only here, on the first compile: ``import minigrad`` and every other
transformation stay NumPy-only. XLA runs the StableHLO module through TensorFlow's
``XlaCallModule`` op (serialization version 9) inside ``tf.function(jit_compile=True)``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minigrad import rules
from minigrad.func.ir import trace
from minigrad.func.pytree import as_tensor, is_tensor_leaf, tree_flatten, tree_unflatten
from minigrad.func.stablehlo import lower_ir
from minigrad.tensor import Tensor
from minigrad.tracing import IR


@dataclass
class Compiled:
    """One cache entry: the IR, its StableHLO text, the XLA executable, timings."""

    ir: IR
    text: str
    out_spec: Any
    run: Any
    concrete: Any = None
    compile_seconds: float = 0.0
    out_types: list = field(default_factory=list)

    def optimized_hlo(self, arrays: list[np.ndarray]) -> str:
        """XLA's optimized HLO for this executable (fusions, layouts), as text."""
        return self.run.experimental_get_compiler_ir(*arrays)(stage="optimized_hlo")


def _signature(leaves: list) -> tuple:
    sig = []
    for x in leaves:
        if is_tensor_leaf(x):
            t = as_tensor(x)
            sig.append(("T", t.shape, t.dtype.str))
        else:
            sig.append(("S", repr(x)))
    return tuple(sig)


def _xla_callable(text: str, in_avals: list, out_avals: list) -> Any:
    try:
        import tensorflow as tf
        from tensorflow.compiler.tf2xla.python.xla import call_module
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("minigrad.func.jit needs TensorFlow (pip install tensorflow)") from e
    tout = [tf.as_dtype(dt) for _, dt in out_avals]
    sout = [tuple(shape) for shape, _ in out_avals]
    spec = [tf.TensorSpec(shape, tf.as_dtype(dt)) for shape, dt in in_avals]

    @tf.function(jit_compile=True, input_signature=spec, autograph=False)
    def run(*xs: Any) -> Any:
        return call_module(
            list(xs), version=9, module=text, Tout=tout, Sout=sout, platforms=["CPU"]
        )

    # Calling the concrete function skips tf.function's per-call argument matching, which
    # costs more than a small step itself (measured: ~2 ms against ~0.2 ms)
    return run, run.get_concrete_function()


def jit(func: Callable[..., Any]) -> Callable[..., Any]:
    """Compile ``func`` with XLA; one executable per input signature (shapes, dtypes, static
    arguments), built on first use. ``wrapped.cache`` holds the :class:`Compiled` entries."""
    cache: dict[tuple, Compiled] = {}

    def compile_for(args: tuple) -> Compiled:
        leaves, _ = tree_flatten(args)
        rules.RANDOMNESS.append("jit")
        try:
            ir, out_spec = trace(func, args)
        finally:
            rules.RANDOMNESS.pop()
        text = lower_ir(ir)
        in_avals = [(v.shape, v.dtype) for v in ir.invars]
        out_avals = []
        for o in ir.outs:
            shape, dt = (
                (o.shape, o.dtype) if hasattr(o, "shape") else ((), np.asarray(o.value).dtype)
            )
            out_avals.append((shape, dt))
        start = time.perf_counter()
        run, concrete = _xla_callable(text, in_avals, out_avals)
        arrays = [as_tensor(x).data for x in leaves if is_tensor_leaf(x)]
        concrete(*arrays)  # the first call compiles the XLA executable
        seconds = time.perf_counter() - start
        return Compiled(ir, text, out_spec, run, concrete, seconds, out_avals)

    def wrapped(*args: Any) -> Any:
        leaves, spec = tree_flatten(args)
        key = (_signature(leaves), repr(spec))
        entry = cache.get(key)
        if entry is None:
            entry = cache[key] = compile_for(args)
        arrays = [
            x.data if isinstance(x, Tensor) else np.asarray(x) for x in leaves if is_tensor_leaf(x)
        ]
        outs = entry.concrete(*arrays)
        values = [Tensor._wrap(np.asarray(o.numpy())) for o in outs]
        return tree_unflatten(entry.out_spec, values)

    wrapped.cache = cache  # type: ignore[attr-defined]
    return wrapped
