"""Explain every retrace of a tf.function: which argument, what it is now, what it was before.

TensorFlow only counts traces (``experimental_get_tracing_count``) and warns "N out of the last
M calls triggered retracing". The monitor here watches calls, notices each one that traced (the
tracing count went up), describes every argument leaf the way the trace cache keys it (tensors
and tensor-likes such as keras.Variable by dtype and shape, RaggedTensor/SparseTensor by
TypeSpec, lists/tuples/dicts by type, Python values by value, other objects by hash — identity
by default) and diffs the call against the
*closest* earlier trace, as TF traced it (read from the new concrete function's input signature,
so reduce_retracing's generalized [None, 3] is what later calls meet; traces made before
monitoring began are read the same way). Each difference becomes a :class:`Cause`
("x: now float32[4,3], before float32[2,3]") with the fix to apply.

Two ways to use it::

    monitor = RetraceMonitor(step)           # call monitor(...) instead of step(...)
    with explain_retracing(step) as log:     # or keep calling step(...) inside the block
        ...
    print(log.report())

``explain_retracing()`` with no target, or with a plain Python function, watches every
tf.function object built from that code — the only way to see a tf.function *redefined in a
loop*, where each new object starts with an empty trace cache.
"""

from __future__ import annotations

import inspect
import itertools
import logging
import re
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

from graph_inspector.inspect_graph import Container, flatten_with_paths

__all__ = ["ArgState", "CallRecord", "Cause", "RetraceLog", "RetraceMonitor", "explain_retracing"]

_GENERALIZED = re.compile(r"shape=\([^)]*None")
_PY_SCALARS = (bool, int, float, complex, str, bytes, type(None))


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


@dataclass(frozen=True)
class Cause:
    """Why one call traced again (or failed to trace): one argument, now versus before."""

    arg: str
    kind: str
    now: str
    before: str
    fix: str

    def __str__(self) -> str:
        return f"{self.arg}: now {self.now}, before {self.before}"

    def explain(self) -> str:
        return f"{self} [{self.kind}]\n      fix: {self.fix}"


@dataclass
class CallRecord:
    """One observed call of a watched tf.function."""

    call_index: int
    function: str
    new_traces: int  # how much experimental_get_tracing_count() went up during the call
    causes: list[Cause] = field(default_factory=list)
    warnings: list[Cause] = field(default_factory=list)  # e.g. a stale closure, no retrace
    error: str | None = None
    traced_as: list[str] = field(default_factory=list)  # input signatures of the new traces

    @property
    def retraced(self) -> bool:
        """True when this call traced although the function had been traced before."""
        return self.new_traces > 0 and not any(c.kind == "first trace" for c in self.causes)

    def explain(self) -> str:
        head = f"call {self.call_index} of {self.function}: "
        if self.new_traces:
            head += f"traced ({self.new_traces} new trace{'s' * (self.new_traces > 1)})"
        elif self.error:
            head += "failed before tracing"
        else:
            head += "reused an existing trace"
        if [c.kind for c in self.causes] == ["first trace"]:
            return head + ": first call"
        lines = [head]
        lines += [f"    because {c.explain()}" for c in self.causes]
        lines += [f"    warning {c.explain()}" for c in self.warnings]
        lines += [f"    traced as {sig}" for sig in self.traced_as]
        if self.error:
            lines.append(f"    error: {self.error}")
        return "\n".join(lines)


# --- describing arguments ---------------------------------------------------------------------


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
    if isinstance(value, _PY_SCALARS):
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
        return ArgState(
            "unhashable", f"{_type_name(value)} (unhashable)", ("unhashable", id(value))
        )
    custom_hash = type(value).__hash__ is not object.__hash__
    shown = repr(value) if custom_hash else f"{_type_name(value)} at 0x{id(value):x}"
    return ArgState("object", _clip(shown), ("obj", _type_name(value), h), by_value=custom_hash)


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


def _type_name(value: Any) -> str:
    return type(value).__qualname__


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _short_value(value: Any) -> str:
    if isinstance(value, _PY_SCALARS):
        return repr(value)
    try:
        import tensorflow as tf

        if isinstance(value, tf.Tensor) and value.shape.rank == 0:
            return f"{value.numpy()!r} (tensor at 0x{id(value):x})"
    except Exception:  # noqa: BLE001 - symbolic tensor: show its type only
        pass
    return f"{_type_name(value)} at 0x{id(value):x}"


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


def _captured_values(fn: Callable[..., Any]) -> dict[str, tuple[str, Any]]:
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
        if isinstance(value, _PY_SCALARS):
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


def _non_value_leaves(args: tuple, kwargs: dict) -> list[Any]:
    leaves = [leaf for _, leaf in flatten_with_paths([list(args), kwargs])]
    return [x for x in leaves if not isinstance(x, _PY_SCALARS) and not hasattr(x, "dtype")]


# --- diffing a call against earlier traces ------------------------------------------------------


def _generalized_shape(a: tuple | None, b: tuple | None) -> str:
    if a is None or b is None or len(a) != len(b):
        return "None"
    dims = [str(x) if x == y else "None" for x, y in zip(a, b, strict=True)]
    return "[" + ", ".join(dims) + "]"


def _cause(path: str, now: ArgState | None, before: ArgState | None) -> Cause:
    if now is None or before is None:
        present = now or before
        assert present is not None
        return Cause(
            path,
            "structure",
            "absent" if now is None else present.text,
            "absent" if before is None else present.text,
            "keep the nesting of arguments fixed (same list length, same dict keys) or pack "
            "variable-length data into one tensor",
        )
    if now.kind == "container" or before.kind == "container":
        return Cause(
            path,
            "structure",
            now.text,
            before.text,
            "pass the same container type every call: a list and a tuple (or a dict and a "
            "namedtuple) holding the same values are different trace keys"
            if now.kind == before.kind
            else "keep each argument the same kind of value every call (always a tensor, or "
            "always the same container)",
        )
    if now.kind == "composite" and before.kind == "composite":
        spec_name = type(now.key[1]).__name__
        if now.dtype != before.dtype:
            kind = "dtype"
        elif now.shape != before.shape and spec_name == type(before.key[1]).__name__:
            kind = "shape"
        else:
            kind = "spec"
        return Cause(
            path,
            kind,
            now.text,
            before.text,
            f"give the function input_signature=[tf.{spec_name}(...)] with None where the size "
            f"varies{_here(_generalized_shape(now.shape, before.shape))}, or use "
            "tf.function(reduce_retracing=True)",
        )
    if now.kind in ("tensor", "variable") and before.kind == now.kind:
        if now.dtype != before.dtype:
            return Cause(
                path,
                "dtype",
                now.text,
                before.text,
                f"cast to one dtype before the call (tf.cast({path}, tf.{before.dtype})) or "
                f"fix it with input_signature=[tf.TensorSpec(..., tf.{before.dtype})]",
            )
        spec = _generalized_shape(now.shape, before.shape)
        return Cause(
            path,
            "shape",
            now.text,
            before.text,
            f"give the function input_signature=[tf.TensorSpec({spec}, tf.{now.dtype})] "
            "(None where the size varies), or use tf.function(reduce_retracing=True)",
        )
    if now.kind == "python" and before.kind == "python":
        value = now.key[2]
        if isinstance(value, bool):
            fix = (
                f"pass tf.constant({value}) instead of a Python bool if one graph should serve "
                "both values (AutoGraph turns `if` on a tensor into tf.cond); one trace per "
                "value is fine if there are only two"
            )
        elif isinstance(value, int | float):
            fix = (
                f"pass tf.constant({value!r}) instead of a Python number: every distinct "
                "Python value is baked into its own graph"
            )
        else:
            fix = (
                "each distinct Python value gets its own graph: keep the set small or use a tensor"
            )
        return Cause(path, "python value", now.text, before.text, fix)
    if now.kind == "callable":
        changed = [
            f"{name} now {value}"
            for (name, value) in now.closure
            if (name, value) not in before.closure
        ]
        detail = f" (captured {', '.join(changed)})" if changed else ""
        return Cause(
            path,
            "new closure",
            now.text,
            before.text,
            "a new function/closure object each call is a new cache key: create it once and "
            f"reuse it, or pass what it captures as tensor arguments{detail}",
        )
    if now.kind == "unhashable":
        return Cause(path, "unhashable", now.text, before.text, _UNHASHABLE_FIX)
    if now.kind == "object" and before.kind == "object":
        same_type = now.key[1] == before.key[1]
        if same_type and now.by_value:
            return Cause(
                path,
                "object value",
                now.text,
                before.text,
                "this object is hashed by value (its own __hash__, e.g. a frozen dataclass): "
                "every distinct value gets its own graph, like a Python number. Keep the set "
                "of values small, or pass the fields that change as tensors",
            )
        return Cause(
            path,
            "object identity" if same_type else "object type",
            now.text,
            before.text,
            "non-tensor arguments are keyed by hash/equality (by default: identity), so a new "
            "object is a new graph: reuse one object, give it value-based __hash__/__eq__, "
            "or pass the tensors it holds as arguments",
        )
    return Cause(
        path,
        "argument kind",
        now.text,
        before.text,
        "pass the same kind of value every call (always a tensor, or always a Python value)",
    )


def _here(spec: str) -> str:
    return "" if spec == "None" else f" (here {spec})"


_UNHASHABLE_FIX = (
    "tf.function must hash non-tensor arguments to look up a trace: define __hash__ and __eq__ "
    "by value (or the tracing protocol __tf_tracing_type__), or pass the tensors it holds"
)


def _served_by(now: ArgState, before: ArgState) -> bool:
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


def diff_states(now: dict[str, ArgState], before: dict[str, ArgState]) -> list[Cause]:
    causes = []
    for path in list(now) + [p for p in before if p not in now]:
        a, b = now.get(path), before.get(path)
        if a is not None and b is not None and _served_by(a, b):
            continue
        causes.append(_cause(path, a, b))
    # A container that changed type (list -> tuple, tensor -> list) explains what is inside it.
    changed = [
        c.arg
        for c in causes
        if any(
            st is not None and st.kind == "container" for st in (now.get(c.arg), before.get(c.arg))
        )
    ]
    return [c for c in causes if not any(c.arg.startswith(p + "[") for p in changed)]


# --- the monitor -------------------------------------------------------------------------------


@dataclass
class _Trace:
    states: dict[str, ArgState]
    captured: dict[str, tuple[str, Any]]
    # Strong references to the non-tensor arguments of this trace: identity keys (id()) must
    # not be reused by new objects while we still compare against this trace.
    objects: list[Any] = field(default_factory=list)
    prior: bool = False  # made before monitoring began: states read from TF's signature only
    context: dict[str, str] = field(default_factory=dict)  # _call_context() at trace time


def _call_context() -> dict[str, str]:
    """What TF keys a trace by besides the arguments: the call context. tf.saved_model.save
    (and Keras's ExportArchive) traces every function again inside its save context; a call
    from inside another tf.function, under tf.device, inside jit_compile or a distribution
    strategy's cross-replica context gets a trace of its own too. Read through TF's internal
    helpers; a field that cannot be read is left out."""
    context: dict[str, str] = {}
    try:
        from tensorflow.python.saved_model import save_context

        context["saving a SavedModel"] = "yes" if save_context.in_save_context() else "no"
    except Exception:  # noqa: BLE001 - internal module moved: skip this detail
        pass
    try:
        from tensorflow.python.eager.polymorphic_function import function_context

        eager = function_context.make_function_context().context
        graph = eager.parent_graph
        context["called from"] = (
            "eager code" if graph is None else f"graph {getattr(graph, 'name', type(graph))!r}"
        )
        context["device scope"] = repr(eager.device_functions) if eager.device_functions else "none"
        context["colocation"] = repr(eager.colocation_stack) if eager.colocation_stack else "none"
        context["cross-replica context"] = str(eager.in_cross_replica_context)
        context["variable policy"] = str(eager.variable_policy)
        context["inside jit_compile (XLA)"] = "yes" if eager.xla_context_id else "no"
    except Exception:  # noqa: BLE001
        pass
    return context


_CONTEXT_FIXES = {
    "saving a SavedModel": "none needed: saving traces each function once more under its save "
    "context (variables are captured for export); it does not happen at serving time",
    "called from": "each calling graph gets its own trace; call it from one place (or only "
    "eagerly) if this repeats",
    "device scope": "each tf.device scope gets its own trace; keep calls under one scope",
    "inside jit_compile (XLA)": "calls inside and outside jit_compile trace separately",
}


def _context_changes(now: dict[str, str], before: dict[str, str]) -> list[Cause]:
    changed = [k for k in now if k in before and now[k] != before[k]]
    if "saving a SavedModel" in changed and "variable policy" in changed:
        changed.remove("variable policy")  # the save context sets it: one cause, not two
    return [
        Cause(
            f"<{key}>",
            "call context",
            now[key],
            before[key],
            _CONTEXT_FIXES.get(key, "TF keys traces by the call context as well as arguments"),
        )
        for key in changed
    ]


class RetraceMonitor:
    """Watches one tf.function object; call the monitor instead of the function.

    ``monitor.traces`` equals ``fn.experimental_get_tracing_count()`` (minus any traces made
    before monitoring began, see ``traces_before``).
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        log: RetraceLog | None = None,
        **tf_function_kwargs: Any,
    ) -> None:
        import tensorflow as tf

        if not isinstance(fn, tf.types.experimental.PolymorphicFunction):
            if not callable(fn):
                raise TypeError(f"RetraceMonitor needs a tf.function or a callable, got {fn!r}")
            fn = tf.function(fn, **tf_function_kwargs)
        self.fn = fn
        self.python_function = inspect.unwrap(fn.python_function)
        self.name = getattr(self.python_function, "__qualname__", fn.name)
        self.log = log if log is not None else RetraceLog()
        self.traces_before = fn.experimental_get_tracing_count()
        self.records: list[CallRecord] = []
        self._traces: list[_Trace] = []
        # Traces made before monitoring began: compare later calls with what TF recorded.
        if self.traces_before:
            for concrete in self._concretes():
                states = traced_states(concrete)
                if states is not None:
                    self._traces.append(_Trace(states, {}, prior=True))
        self.log._register(self)

    # What the log numbers objects of the same code by (for "redefined in a loop").
    @property
    def code(self) -> Any:
        return getattr(self.python_function, "__code__", None)

    @property
    def traces(self) -> int:
        """Traces made while monitored (sum of the tracing-count increases over calls)."""
        return sum(r.new_traces for r in self.records)

    @property
    def retraces(self) -> list[CallRecord]:
        return [r for r in self.records if r.retraced]

    def _record_traces_without_a_call(self) -> None:
        """TF can trace a function without calling it: tf.saved_model.save (and Keras's
        ExportArchive) and get_concrete_function trace for serialization directly. Such traces
        show up only in the count; record them (once, when noticed) so the monitor's count
        stays TF's."""
        missing = self.fn.experimental_get_tracing_count() - self.traces_before - self.traces
        if missing <= 0:
            return
        record = CallRecord(self.log._next_index(), self.name, missing)
        record.causes = [
            Cause(
                "<no call>",
                "traced without a call",
                f"{missing} trace(s) between observed calls",
                "-",
                "none needed: tf.saved_model.save / ExportArchive and get_concrete_function trace "
                "a function directly (for serialization), not through a call",
            )
        ]
        self.records.append(record)
        self.log._emit(record)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._observe(lambda: self.fn(*args, **kwargs), args, kwargs)

    def _observe(self, call: Callable[[], Any], args: tuple, kwargs: dict) -> Any:
        self._record_traces_without_a_call()
        states = describe_call(self.python_function, args, kwargs)
        captured = _captured_values(self.python_function)
        context = _call_context()
        before = self.fn.experimental_get_tracing_count()
        signatures_before = self._signatures()
        record = CallRecord(self.log._next_index(), self.name, 0)
        self.records.append(record)
        error: BaseException | None = None
        result = None
        try:
            result = call()
        except BaseException as exc:  # recorded, explained, then re-raised unchanged
            error = exc
        record.new_traces = self.fn.experimental_get_tracing_count() - before
        if record.new_traces:
            record.causes = self._why_traced(states, captured, error, context)
            # Worth showing only when TF generalized a shape (reduce_retracing): "None" dims.
            record.traced_as = [
                s.split(" -> ")[0]
                for s in self._signatures()
                if s not in signatures_before and _GENERALIZED.search(s.split(" -> ")[0])
            ]
            traced = self._traced_view(states, signatures_before)
            self._traces.append(
                _Trace(traced, captured, _non_value_leaves(args, kwargs), context=context)
            )
        elif error is not None:
            record.causes = [c for c in self._why_failed(states, error)]
        else:
            record.warnings = self._stale_captures(states, captured)
        if error is not None:
            record.error = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
            self.log._emit(record)
            raise error
        self.log._emit(record)
        return result

    def _concretes(self) -> list[Any]:
        try:
            return list(self.fn._list_all_concrete_functions())  # noqa: SLF001 - no public API
        except Exception:  # noqa: BLE001 - private API moved: skip this detail
            return []

    def _signatures(self) -> list[str]:
        return [str(c.function_type) for c in self._concretes()]

    def _traced_view(
        self, states: dict[str, ArgState], signatures_before: list[str]
    ) -> dict[str, ArgState]:
        """The call's states with each tensor as TF traced it: with reduce_retracing the new
        trace is generalized ([None, 3]), and later calls must be compared with that."""
        seen = set(signatures_before)
        for concrete in self._concretes():
            if str(concrete.function_type) in seen:
                continue
            traced = traced_states(concrete)
            if not traced:
                continue
            merged = dict(states)
            for path, now in states.items():
                t = traced.get(path)
                if (
                    t is not None
                    and now.kind in ("tensor", "variable", "composite")
                    and t.kind == now.kind
                    and _served_by(now, t)
                ):
                    merged[path] = t
            return merged
        return states

    def _instance(self) -> Any:
        """The object a tf.function method is bound to (None for a plain tf.function)."""
        bound = inspect.unwrap(self.fn.python_function)
        target = getattr(bound, "__self__", None) if inspect.ismethod(bound) else None
        if type(target).__name__ == "TfMethodTarget":  # TF's weak wrapper around the instance
            target = target.target
        return target

    def _why_traced(
        self,
        states: dict[str, ArgState],
        captured: dict[str, tuple[str, Any]],
        error: BaseException | None,
        context: dict[str, str] | None = None,
    ) -> list[Cause]:
        causes: list[Cause] = []
        if error is not None and "non-first call" in str(error) and "variable" in str(error):
            causes.append(
                Cause(
                    "<variables>",
                    "variable created on a later call",
                    "this trace creates a tf.Variable",
                    "variables were created only by the first trace",
                    "create variables once, outside the traced code (in __init__/build, or "
                    "guarded by `if self.v is None`) and only .assign() inside",
                )
            )
        if not self._traces and self.traces_before:
            causes.append(
                Cause(
                    "<call>",
                    "traced before monitoring",
                    "first call seen by the monitor",
                    f"{self.traces_before} trace(s) made before monitoring began; earlier "
                    "inputs unknown",
                    "start the monitor before the first call to see every cause",
                )
            )
            return causes
        if not self._traces:
            siblings = self.log._traced_siblings(self)
            instance = self._instance()
            prev_instance = siblings[-1]._instance() if siblings else None
            if siblings and instance is not None and prev_instance is not None:
                prev = siblings[-1]
                same = any(not diff_states(states, t.states) for t in prev._traces)
                causes.append(
                    Cause(
                        "<self>",
                        "new instance",
                        f"{_type_name(instance)} at 0x{id(instance):x} (new instance: each "
                        "object's bound method has its own trace cache)",
                        f"{_type_name(prev_instance)} at 0x{id(prev_instance):x}, already "
                        f"traced with {'the same' if same else 'other'} inputs",
                        "expected once per instance and input signature: a tf.function method "
                        "traces again for every new object. To share traces, reuse the object, "
                        "or move the computation into one tf.function outside the class that "
                        "takes the tensors/variables as arguments",
                    )
                )
            elif siblings:
                prev = siblings[-1]
                number = len(siblings) + 1
                causes.append(
                    Cause(
                        "<function>",
                        "new tf.function object",
                        f"tf.function object #{number} for {self.name} ({_where(self)})",
                        f"object #{number - 1}, already traced with "
                        f"{'the same' if any(not diff_states(states, t.states) for t in prev._traces) else 'other'} "  # noqa: E501
                        "inputs",
                        "hoist the tf.function: create it once (module level or in __init__) and "
                        "call that object; one defined inside a loop or a frequently called "
                        "function starts with an empty trace cache every time",
                    )
                )
                if prev._traces:
                    causes += _capture_changes(captured, prev._traces[-1].captured, "closure")
            elif not causes:
                causes.append(
                    Cause("<call>", "first trace", "first call", "nothing traced", "none needed")
                )
            return causes
        best = min(
            reversed(self._traces),  # ties go to the most recent trace
            key=lambda t: len(diff_states(states, t.states)),
        )
        arg_causes = diff_states(states, best.states)
        if best.prior:
            arg_causes = [
                replace(c, before=f"{c.before} (a trace made before monitoring began)")
                for c in arg_causes
            ]
        if getattr(self.fn, "_reduce_retracing", False):
            arg_causes = [_reduce_retracing_on(c) for c in arg_causes]
        causes += arg_causes
        if not causes:
            causes += _capture_changes(captured, best.captured, "closure")
        if not causes and context is not None:
            causes += _context_changes(context, best.context)
        if not causes and best.prior:
            causes.append(
                Cause(
                    "<call>",
                    "traced before monitoring",
                    "arguments TF's record of an earlier trace cannot tell apart",
                    "a trace made before monitoring began (Python objects it saw are unknown)",
                    "start the monitor before the first call to see every cause",
                )
            )
        if not causes:
            causes.append(
                Cause(
                    "<call>",
                    "unexplained",
                    "arguments equal to an earlier trace as far as the monitor sees",
                    "the same",
                    "look for objects whose __eq__ is identity but __hash__ is by value, or a "
                    "trace cache cleared by garbage collection of an argument",
                )
            )
        return causes

    def _why_failed(self, states: dict[str, ArgState], error: BaseException) -> list[Cause]:
        text = str(error)
        causes = []
        if "TraceType" in text or "hashable" in text:
            for path, state in states.items():
                if state.kind == "unhashable":
                    causes.append(Cause(path, "unhashable", state.text, "-", _UNHASHABLE_FIX))
        return causes

    def _stale_captures(
        self, states: dict[str, ArgState], captured: dict[str, tuple[str, Any]]
    ) -> list[Cause]:
        # The trace this call reused: the one whose arguments match exactly.
        for trace in reversed(self._traces):
            if not diff_states(states, trace.states):
                return [
                    Cause(
                        c.arg,
                        "stale closure (no retrace)",
                        c.now,
                        c.before,
                        "TF does not retrace when a captured Python value changes: the graph "
                        f"still uses {c.before}. Pass it as an argument (a tensor) or keep it "
                        "in a tf.Variable and .assign() the new value",
                    )
                    for c in _capture_changes(captured, trace.captured, "closure")
                ]
        return []


def _reduce_retracing_on(cause: Cause) -> Cause:
    """reduce_retracing is already on: do not suggest it; say what TF does instead."""
    if cause.kind != "shape":
        return cause
    fix = cause.fix.split(", or use tf.function(reduce_retracing=True)")[0]
    fix = fix.split(" (None where")[0]
    return Cause(
        cause.arg,
        cause.kind,
        cause.now,
        cause.before,
        "reduce_retracing is on: TF traced once more, generalized (None where sizes differ), "
        f"and later sizes reuse that trace; to avoid even this trace, {fix}",
    )


def _capture_changes(
    now: dict[str, tuple[str, Any]], before: dict[str, tuple[str, Any]], kind: str
) -> list[Cause]:
    causes = []
    for name in sorted(set(now) & set(before)):
        if now[name][1] != before[name][1]:
            causes.append(
                Cause(
                    f"<captured> {name}",
                    "captured value changed",
                    now[name][0],
                    before[name][0],
                    "pass the value as an argument (a tensor) or keep it in a tf.Variable; "
                    "captured Python values are constants of the graph",
                )
            )
    return causes


def _where(monitor: RetraceMonitor) -> str:
    code = monitor.code
    if code is None:
        return "unknown location"
    return f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}"


class RetraceLog:
    """Every observed call of the watched functions, in order, with explanations."""

    def __init__(self, echo: Callable[[str], None] | None = None) -> None:
        self.monitors: list[RetraceMonitor] = []
        self.records: list[CallRecord] = []
        self._counter = itertools.count(1)
        self._echo = echo

    def _register(self, monitor: RetraceMonitor) -> None:
        self.monitors.append(monitor)

    def _next_index(self) -> int:
        return next(self._counter)

    def _emit(self, record: CallRecord) -> None:
        self.records.append(record)
        if self._echo and (record.new_traces or record.error or record.warnings):
            self._echo(record.explain())

    def _traced_siblings(self, monitor: RetraceMonitor) -> list[RetraceMonitor]:
        """Earlier tf.function objects of the same Python code that have traced."""
        if monitor.code is None:
            return []
        return [
            m for m in self.monitors if m is not monitor and m.code is monitor.code and m._traces
        ]

    @property
    def traces(self) -> int:
        return sum(r.new_traces for r in self.records)

    @property
    def retraces(self) -> list[CallRecord]:
        return [r for r in self.records if r.retraced]

    def tracing_count(self) -> int:
        """TensorFlow's own count, summed over the watched functions (minus prior traces)."""
        return sum(m.fn.experimental_get_tracing_count() - m.traces_before for m in self.monitors)

    def causes(self) -> list[Cause]:
        return [c for r in self.records for c in r.causes]

    def report(self, only_traces: bool = True) -> str:
        shown = [
            r
            for r in sorted(self.records, key=lambda r: r.call_index)
            if not only_traces or r.new_traces or r.error or r.warnings
        ]
        header = (
            f"{len(self.records)} call(s), {self.traces} trace(s) "
            f"({len(self.retraces)} retrace(s)) over {len(self.monitors)} tf.function object(s)"
        )
        return "\n".join([header, *(r.explain() for r in shown)])


def _function_class() -> type:
    import tensorflow as tf

    return type(tf.function(lambda: None))


@contextmanager
def explain_retracing(
    target: Any = None, *, echo: Callable[[str], None] | None = None
) -> Iterator[RetraceLog]:
    """Watch tf.function calls made inside the block; yields the :class:`RetraceLog`.

    ``target``: a tf.function object (watch it; for a method taken from the class, such as
    ``Model.step``, also every instance's bound copy), a plain Python function (watch every
    tf.function built from its code, which catches redefinition in a loop), a list of these,
    or None (watch every tf.function called in the block). A named target that no call
    matched is reported with a warning at the end of the block. ``echo=print`` prints each
    trace explanation as it happens.
    """
    import tensorflow as tf

    targets = target if isinstance(target, list | tuple) else [target]
    objects = {id(t) for t in targets if isinstance(t, tf.types.experimental.PolymorphicFunction)}
    # A tf.function method taken from the class (Model.step) is never called itself: TF binds
    # a separate Function per instance (instance.step). Match those bound copies by their code.
    method_codes = {
        getattr(inspect.unwrap(t.python_function), "__code__", None): t
        for t in targets
        if isinstance(t, tf.types.experimental.PolymorphicFunction)
        and not inspect.ismethod(inspect.unwrap(t.python_function))  # not already bound
    }
    method_codes.pop(None, None)
    codes = {
        inspect.unwrap(t).__code__
        for t in targets
        if t is not None
        and not isinstance(t, tf.types.experimental.PolymorphicFunction)
        and hasattr(inspect.unwrap(t), "__code__")
    }
    watch_all = target is None
    for t in targets:
        if t is not None and id(t) not in objects and not hasattr(inspect.unwrap(t), "__code__"):
            raise TypeError(f"explain_retracing cannot watch {t!r}: not a tf.function or function")

    log = RetraceLog(echo)
    monitors: dict[int, RetraceMonitor] = {}
    keep_alive: list[Any] = []  # ids must stay unique while the block runs
    function_class = _function_class()
    original_call = function_class.__call__

    seen: set[int] = set()  # ids of the targets that matched a call

    def watched(fn: Any) -> bool:
        if watch_all:
            return True
        if id(fn) in objects:
            seen.add(id(fn))
            return True
        unwrapped = inspect.unwrap(fn.python_function)
        code = getattr(unwrapped, "__code__", None)
        if code in codes:
            seen.add(id(code))
            return True
        if code in method_codes and inspect.ismethod(unwrapped):  # a bound copy of a target
            seen.add(id(method_codes[code]))
            return True
        return False

    def patched_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not watched(self):
            return original_call(self, *args, **kwargs)
        monitor = monitors.get(id(self))
        if monitor is None or monitor.fn is not self:
            monitor = RetraceMonitor(self, log=log)
            monitors[id(self)] = monitor
            keep_alive.append(self)
        return monitor._observe(lambda: original_call(self, *args, **kwargs), args, kwargs)

    # TensorFlow's own "N out of the last M calls triggered tf.function retracing" warning
    # only counts; inside this block every trace is explained instead, so drop it here.
    tf_logger = logging.getLogger("tensorflow")
    tf_logger.addFilter(_drop_tf_retracing_warning)
    function_class.__call__ = patched_call
    try:
        yield log
        for monitor in log.monitors:
            monitor._record_traces_without_a_call()
        for t in targets:
            key = id(t) if id(t) in objects else id(getattr(inspect.unwrap(t), "__code__", None))
            if t is not None and key not in seen:
                warnings.warn(
                    f"explain_retracing: {getattr(t, '__qualname__', t)!r} was never called in "
                    "the block (nothing of it was watched)",
                    stacklevel=3,
                )
    finally:
        function_class.__call__ = original_call
        tf_logger.removeFilter(_drop_tf_retracing_warning)


def _drop_tf_retracing_warning(record: logging.LogRecord) -> bool:
    return "triggered tf.function retracing" not in record.getMessage()
