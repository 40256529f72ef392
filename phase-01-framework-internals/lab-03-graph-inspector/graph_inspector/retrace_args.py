"""How tf.function's trace cache sees an argument.

Every argument leaf is described the way the cache keys it (:class:`ArgState`): tensors and
tensor-likes such as keras.Variable by dtype and shape, RaggedTensor/SparseTensor by TypeSpec,
lists/tuples/dicts by type, Python values by value, other objects by hash (identity by default).
:func:`served_by` says whether a trace made for one state can serve another (TF's trace types
are subtypes, not equalities: a ``[None, 3]`` trace serves ``[4, 3]``).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from graph_inspector.walker import Container, flatten_with_paths

__all__ = ["ArgState", "describe", "describe_call", "describe_named", "served_by"]

PY_SCALARS = (bool, int, float, complex, str, bytes, type(None))


@dataclass(frozen=True)
class ArgState:
    """One argument leaf as the trace cache sees it."""

    # "tensor", "variable", "composite", "python", "callable", "object", "unhashable",
    # "container" (a list/tuple/dict node), "unknown" (a trace's non-tensor input TF did not keep)
    kind: str
    text: str  # how it is shown: "float32[4,3]", "True", "Config at 0x7f..."
    key: Any  # what decides reuse: equal keys -> the same trace can serve both calls
    dtype: str | None = None
    shape: tuple[int | None, ...] | None = None
    closure: tuple[tuple[str, str], ...] = ()  # for callables: captured names and values
    by_value: bool = False  # objects: hashed by value (own __hash__), not by identity


def describe(value: Any) -> ArgState:
    """Describe one leaf the way tf.function's trace cache distinguishes values."""
    import numpy as np
    import tensorflow as tf

    if isinstance(value, Container):
        return ArgState("container", value.type_name, ("container", value.type_name))
    if type(value).__name__ == "UnknownArgument":  # a trace's signature: a non-tensor TF hid
        return ArgState("unknown", "an object TF does not record", ("unknown",))
    if isinstance(value, tf.Variable) or type(value).__name__ == "VariableSpec":
        shape = _shape_of(value)
        dtype = _dtype_name(value)
        key = ("var", dtype, shape)
        return ArgState("variable", f"Variable {_fmt(dtype, shape)}", key, dtype, shape)
    # tf.__internal__.types.Tensor: tensor-like objects such as keras.Variable, which TF keys
    # by a TensorSpec (dtype and shape; a tensor of that shape reuses their trace), not by hash.
    if isinstance(
        value, tf.Tensor | tf.__internal__.types.Tensor | np.ndarray | np.generic | tf.TensorSpec
    ):
        shape = _shape_of(value)
        dtype = _dtype_name(value)
        return ArgState("tensor", _fmt(dtype, shape), ("tensor", dtype, shape), dtype, shape)
    if isinstance(value, tf.__internal__.CompositeTensor | tf.TypeSpec):
        # RaggedTensor, SparseTensor…: the trace cache keys them by their TypeSpec.
        try:
            spec = value if isinstance(value, tf.TypeSpec) else tf.type_spec_from_value(value)
        except (TypeError, ValueError):  # no spec: fall back to hashing the object
            spec = None
        if spec is not None:
            return _describe_spec(spec)
    if isinstance(value, PY_SCALARS):
        return ArgState("python", repr(value), ("py", type(value).__name__, value))
    if callable(value) and (inspect.isfunction(value) or inspect.ismethod(value)):
        closure = _closure_of(value)
        name = getattr(value, "__qualname__", type(value).__name__)
        shown = f"function {name} at 0x{id(value):x}"
        if closure:
            shown += " capturing " + ", ".join(f"{k}={v}" for k, v in closure)
        return ArgState("callable", shown, ("id", id(value)), closure=closure)
    try:
        h = hash(value)
    except TypeError:
        return ArgState("unhashable", f"{type_name(value)} (unhashable)", ("unhashable", id(value)))
    custom_hash = type(value).__hash__ is not object.__hash__
    shown = repr(value) if custom_hash else f"{type_name(value)} at 0x{id(value):x}"
    return ArgState("object", _clip(shown), ("obj", type_name(value), h), by_value=custom_hash)


def _describe_spec(spec: Any) -> ArgState:
    """A composite tensor's TypeSpec (RaggedTensorSpec, SparseTensorSpec…) as an ArgState."""
    name = type(spec).__name__.removesuffix("Spec")
    dtype_obj = getattr(spec, "dtype", None)
    dtype = getattr(dtype_obj, "name", None) if dtype_obj is not None else None
    shape = _shape_of(spec) if getattr(spec, "shape", None) is not None else None
    text = f"{name} {_fmt(dtype, shape)}" if dtype is not None else repr(spec)
    if getattr(spec, "ragged_rank", None) is not None:
        text += f" (ragged_rank={spec.ragged_rank})"
    return ArgState("composite", _clip(text, 80), ("spec", spec), dtype, shape)


def _fmt(dtype: str | None, shape: tuple[int | None, ...] | None) -> str:
    if shape is None:
        return f"{dtype}[?]"
    return f"{dtype}[{','.join('None' if d is None else str(d) for d in shape)}]"


def _shape_of(value: Any) -> tuple[int | None, ...] | None:
    shape = getattr(value, "shape", None)
    if shape is None:
        return None
    if hasattr(shape, "rank") and shape.rank is None:
        return None
    return tuple(None if d is None else int(d) for d in (list(shape)))


def _dtype_name(value: Any) -> str:
    dtype = value.dtype
    return getattr(dtype, "name", str(dtype))


def type_name(value: Any) -> str:
    return type(value).__qualname__


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short_value(value: Any) -> str:
    if isinstance(value, PY_SCALARS):
        return repr(value)
    try:
        import tensorflow as tf

        if isinstance(value, tf.Tensor) and value.shape.rank == 0:
            return f"{value.numpy()!r} (tensor at 0x{id(value):x})"
    except Exception:  # noqa: BLE001 - symbolic tensor: show its type only
        pass
    return f"{type_name(value)} at 0x{id(value):x}"


def _closure_of(fn: Callable[..., Any]) -> tuple[tuple[str, str], ...]:
    """Captured free variables of a Python function, as (name, shown value)."""
    fn = inspect.unwrap(getattr(fn, "__func__", fn))
    code = getattr(fn, "__code__", None)
    cells = getattr(fn, "__closure__", None) or ()
    if code is None:
        return ()
    out = []
    for name, cell in zip(code.co_freevars, cells, strict=False):
        try:
            out.append((name, _short_value(cell.cell_contents)))
        except ValueError:  # empty cell
            out.append((name, "<unset>"))
    return tuple(out)


def captured_values(fn: Callable[..., Any]) -> dict[str, tuple[str, Any]]:
    """Closure cells and plain-value globals the function body reads: name -> (shown, key).

    These are baked into the graph at trace time; TF does not retrace when they change.
    """
    import numpy as np
    import tensorflow as tf

    fn = inspect.unwrap(getattr(fn, "__func__", fn))
    code = getattr(fn, "__code__", None)
    if code is None:
        return {}
    values: dict[str, Any] = {}
    for name, cell in zip(code.co_freevars, fn.__closure__ or (), strict=False):
        try:
            values[name] = cell.cell_contents
        except ValueError:
            continue
    for name in code.co_names:
        if name in fn.__globals__:
            values[name] = fn.__globals__[name]
    out = {}
    for name, value in values.items():
        if isinstance(value, PY_SCALARS):
            out[name] = (repr(value), ("py", type(value).__name__, value))
        elif isinstance(value, tf.Tensor | np.ndarray) and not isinstance(value, tf.Variable):
            # Captured by value: rebinding the name to another tensor goes unseen by TF.
            out[name] = (_short_value(value), ("id", id(value)))
    return out


def bind_arguments(python_fn: Callable[..., Any], args: tuple, kwargs: dict) -> dict[str, Any]:
    """Argument name -> value, the way the function sees them (defaults included)."""
    try:
        sig = inspect.signature(python_fn)
        bound = sig.bind(*args, **kwargs)
        bound.apply_defaults()
        return dict(bound.arguments)
    except (TypeError, ValueError):
        named = {f"arg{i}": a for i, a in enumerate(args)}
        named.update(kwargs)
        return named


def describe_call(python_fn: Callable[..., Any], args: tuple, kwargs: dict) -> dict[str, ArgState]:
    return describe_named(bind_arguments(python_fn, args, kwargs))


def describe_named(named: dict[str, Any]) -> dict[str, ArgState]:
    """Argument name -> value, described per leaf (and per container: its type is keyed too)."""
    states: dict[str, ArgState] = {}
    for name, value in named.items():
        for path, leaf in flatten_with_paths(value, name, containers=True):
            states[path] = describe(leaf)
    return states


def traced_states(concrete: Any) -> dict[str, ArgState] | None:
    """What TF actually traced, read from a concrete function's input signature: tensors with the
    shapes of the trace (None where reduce_retracing generalized), Python values, containers."""
    try:
        args, kwargs = concrete.structured_input_signature
        params = list(concrete.function_type.parameters)
    except Exception:  # noqa: BLE001 - private layout changed: no traced view
        return None
    named = {params[i] if i < len(params) else f"arg{i}": a for i, a in enumerate(args)}
    named.update(kwargs)
    return describe_named(named)


def non_value_leaves(args: tuple, kwargs: dict) -> list[Any]:
    leaves = [leaf for _, leaf in flatten_with_paths([list(args), kwargs])]
    return [x for x in leaves if not isinstance(x, PY_SCALARS) and not hasattr(x, "dtype")]


def served_by(now: ArgState, before: ArgState) -> bool:
    """Could a trace made for ``before`` serve ``now``? Equal keys, or a tensor whose earlier
    trace had None where this one has a size (TF's trace types are subtypes, not equalities)."""
    if now.key == before.key or before.kind == "unknown":  # unknown: no difference provable
        return True
    if now.kind == before.kind == "composite":
        try:
            return bool(now.key[1].is_subtype_of(before.key[1]))
        except Exception:  # noqa: BLE001 - a spec without the TraceType relation
            return False
    if now.kind == before.kind and now.kind in ("tensor", "variable"):
        if now.dtype != before.dtype or before.shape is None:
            return now.dtype == before.dtype and before.shape is None
        if now.shape is None or len(now.shape) != len(before.shape):
            return False
        return all(b is None or a == b for a, b in zip(now.shape, before.shape, strict=True))
    return False
