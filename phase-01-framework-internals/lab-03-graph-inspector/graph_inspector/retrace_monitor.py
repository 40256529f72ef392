"""The retrace monitor: watches calls of one tf.function object, notices each call that traced,
and explains it against the closest earlier trace (see :mod:`graph_inspector.retrace`)."""

from __future__ import annotations

import inspect
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from graph_inspector.retrace_args import (
    ArgState,
    captured_values,
    describe_call,
    non_value_leaves,
    served_by,
    traced_states,
    type_name,
)
from graph_inspector.retrace_causes import (
    Cause,
    capture_changes,
    context_changes,
    diff_states,
    make_cause,
    reduce_retracing_on,
)

__all__ = ["CallRecord", "RetraceLog", "RetraceMonitor"]

_GENERALIZED = re.compile(r"shape=\([^)]*None")


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


class CallRecords:
    """What a monitor and a log both count from their ``records``."""

    records: list[CallRecord]

    @property
    def traces(self) -> int:
        """Traces made while monitored (sum of the tracing-count increases over calls)."""
        return sum(r.new_traces for r in self.records)

    @property
    def retraces(self) -> list[CallRecord]:
        return [r for r in self.records if r.retraced]


class RetraceMonitor(CallRecords):
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
            make_cause(
                "traced without a call",
                "<no call>",
                f"{missing} trace(s) between observed calls",
                "-",
            )
        ]
        self.records.append(record)
        self.log._emit(record)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._observe(lambda: self.fn(*args, **kwargs), args, kwargs)

    def _observe(self, call: Callable[[], Any], args: tuple, kwargs: dict) -> Any:
        self._record_traces_without_a_call()
        states = describe_call(self.python_function, args, kwargs)
        captured = captured_values(self.python_function)
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
                _Trace(traced, captured, non_value_leaves(args, kwargs), context=context)
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
                    and served_by(now, t)
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
                make_cause(
                    "variable created on a later call",
                    "<variables>",
                    "this trace creates a tf.Variable",
                    "variables were created only by the first trace",
                )
            )
        if not self._traces and self.traces_before:
            before = (
                f"{self.traces_before} trace(s) made before monitoring began; earlier inputs "
                "unknown"
            )
            first = "first call seen by the monitor"
            return [*causes, make_cause("traced before monitoring", "<call>", first, before)]
        if not self._traces:
            return causes + self._first_trace_causes(states, captured, causes)
        return causes + self._closest_trace_causes(states, captured, context)

    def _first_trace_causes(
        self,
        states: dict[str, ArgState],
        captured: dict[str, tuple[str, Any]],
        so_far: list[Cause],
    ) -> list[Cause]:
        """The first trace of this object: really the first, or a sibling traced before (a new
        instance's bound method, a tf.function object redefined in a loop)."""
        siblings = self.log._traced_siblings(self)
        if not siblings:
            return (
                []
                if so_far
                else [make_cause("first trace", "<call>", "first call", "nothing traced")]
            )
        prev = siblings[-1]
        same = (
            "the same" if any(not diff_states(states, t.states) for t in prev._traces) else "other"
        )
        instance, prev_instance = self._instance(), prev._instance()
        if instance is not None and prev_instance is not None:
            now = (
                f"{type_name(instance)} at 0x{id(instance):x} (new instance: each object's "
                "bound method has its own trace cache)"
            )
            before = (
                f"{type_name(prev_instance)} at 0x{id(prev_instance):x}, already traced with "
                f"{same} inputs"
            )
            return [make_cause("new instance", "<self>", now, before)]
        number = len(siblings) + 1
        now = f"tf.function object #{number} for {self.name} ({_where(self)})"
        before = f"object #{number - 1}, already traced with {same} inputs"
        causes = [make_cause("new tf.function object", "<function>", now, before)]
        if prev._traces:
            causes += capture_changes(captured, prev._traces[-1].captured, "captured value changed")
        return causes

    def _closest_trace_causes(
        self,
        states: dict[str, ArgState],
        captured: dict[str, tuple[str, Any]],
        context: dict[str, str] | None,
    ) -> list[Cause]:
        """Diff the call against the closest earlier trace (ties: the most recent)."""
        best = min(reversed(self._traces), key=lambda t: len(diff_states(states, t.states)))
        causes = diff_states(states, best.states)
        if best.prior:
            causes = [
                replace(c, before=f"{c.before} (a trace made before monitoring began)")
                for c in causes
            ]
        if getattr(self.fn, "_reduce_retracing", False):
            causes = [reduce_retracing_on(c) for c in causes]
        if not causes:
            causes = capture_changes(captured, best.captured, "captured value changed")
        if not causes and context is not None:
            causes = context_changes(context, best.context)
        if not causes and best.prior:
            now = "arguments TF's record of an earlier trace cannot tell apart"
            before = "a trace made before monitoring began (Python objects it saw are unknown)"
            causes = [make_cause("traced before monitoring", "<call>", now, before)]
        if not causes:
            now = "arguments equal to an earlier trace as far as the monitor sees"
            causes = [make_cause("unexplained", "<call>", now, "the same")]
        return causes

    def _why_failed(self, states: dict[str, ArgState], error: BaseException) -> list[Cause]:
        text = str(error)
        if "TraceType" not in text and "hashable" not in text:
            return []
        return [
            make_cause("unhashable", path, state.text, "-")
            for path, state in states.items()
            if state.kind == "unhashable"
        ]

    def _stale_captures(
        self, states: dict[str, ArgState], captured: dict[str, tuple[str, Any]]
    ) -> list[Cause]:
        # The trace this call reused: the one whose arguments match exactly.
        for trace in reversed(self._traces):
            if not diff_states(states, trace.states):
                return capture_changes(captured, trace.captured, "stale closure")
        return []


def _where(monitor: RetraceMonitor) -> str:
    code = monitor.code
    if code is None:
        return "unknown location"
    return f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}"


class RetraceLog(CallRecords):
    """Every observed call of the watched functions, in order, with explanations."""

    def __init__(self, echo: Callable[[str], None] | None = None) -> None:
        self.monitors: list[RetraceMonitor] = []
        self.records: list[CallRecord] = []
        self.notes: list[str] = []  # e.g. a target that was only called eagerly
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
        return "\n".join([header, *(r.explain() for r in shown), *self.notes])
