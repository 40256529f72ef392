"""Explain every retrace of a tf.function: which argument, what it is now, what it was before.

TensorFlow only counts traces (``experimental_get_tracing_count``) and warns "N out of the last
M calls triggered retracing". The monitor here watches calls, notices each one that traced (the
tracing count went up), describes every argument the way the trace cache keys it
(:mod:`graph_inspector.retrace_args`) and diffs the call against the *closest* earlier trace,
as TF traced it (read from the new concrete function's input signature, so reduce_retracing's
generalized [None, 3] is what later calls meet; traces made before monitoring began are read the
same way). Each difference becomes a :class:`Cause` from the table in
:mod:`graph_inspector.retrace_causes` ("x: now float32[4,3], before float32[2,3]") with its fix.

Two ways to use it::

    monitor = RetraceMonitor(step)           # call monitor(...) instead of step(...)
    with explain_retracing(step) as log:     # or keep calling step(...) inside the block
        ...
    print(log.report())

``explain_retracing()`` with no target, or with a plain Python function, watches every
tf.function object built from that code, the only way to see a tf.function *redefined in a
loop*, where each new object starts with an empty trace cache.
"""

from __future__ import annotations

import inspect
import logging
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from graph_inspector.retrace_args import ArgState, describe
from graph_inspector.retrace_causes import CAUSES, Cause, diff_states
from graph_inspector.retrace_monitor import CallRecord, RetraceLog, RetraceMonitor

__all__ = [
    "CAUSES",
    "ArgState",
    "CallRecord",
    "Cause",
    "RetraceLog",
    "RetraceMonitor",
    "describe",
    "diff_states",
    "explain_retracing",
    "quiet_tf_retracing_warnings",
]


def _function_class() -> type:
    import tensorflow as tf

    return type(tf.function(lambda: None))


class _Targets:
    """What ``explain_retracing(target)`` watches, and which targets a call matched."""

    def __init__(self, target: Any) -> None:
        import tensorflow as tf

        poly = tf.types.experimental.PolymorphicFunction
        self.watch_all = target is None
        self.targets = [t for t in (target if isinstance(target, list | tuple) else [target])]
        self.targets = [t for t in self.targets if t is not None]
        for t in self.targets:
            if not isinstance(t, poly) and not hasattr(inspect.unwrap(t), "__code__"):
                raise TypeError(
                    f"explain_retracing cannot watch {t!r}: not a tf.function or function"
                )
        self.objects = {id(t) for t in self.targets if isinstance(t, poly)}
        # A tf.function method taken from the class (Model.step) is never called itself: TF
        # binds a separate Function per instance (instance.step). Match those by their code.
        self.method_codes = {
            getattr(inspect.unwrap(t.python_function), "__code__", None): t
            for t in self.targets
            if isinstance(t, poly) and not inspect.ismethod(inspect.unwrap(t.python_function))
        }
        self.method_codes.pop(None, None)
        # Plain Python functions: every tf.function built from their code.
        self.codes = {inspect.unwrap(t).__code__ for t in self.targets if not isinstance(t, poly)}
        self.seen: set[int] = set()  # keys of the targets that matched a call
        self.eager_calls: dict[Any, int] = {}  # plain-function code -> calls outside tf.function

    def key(self, t: Any) -> int:
        return id(t) if id(t) in self.objects else id(getattr(inspect.unwrap(t), "__code__", None))

    def watched(self, fn: Any) -> bool:
        if self.watch_all:
            return True
        if id(fn) in self.objects:
            self.seen.add(id(fn))
            return True
        unwrapped = inspect.unwrap(fn.python_function)
        code = getattr(unwrapped, "__code__", None)
        if code in self.codes:
            self.seen.add(id(code))
            return True
        if code in self.method_codes and inspect.ismethod(unwrapped):  # a target's bound copy
            self.seen.add(id(self.method_codes[code]))
            return True
        return False

    @contextmanager
    def counting_eager_calls(self) -> Iterator[None]:
        """Count calls of the plain-function targets' code (a profile hook on this thread,
        only when there are such targets): a function called eagerly, never through
        tf.function, was called, it just never traced."""
        if not self.codes:
            yield
            return
        previous = sys.getprofile()

        def profile(frame: Any, event: str, arg: Any) -> None:
            if event == "call" and frame.f_code in self.codes:
                self.eager_calls[frame.f_code] = self.eager_calls.get(frame.f_code, 0) + 1

        sys.setprofile(profile)
        try:
            yield
        finally:
            sys.setprofile(previous)

    def report_unmatched(self, log: RetraceLog) -> None:
        for t in self.targets:
            if self.key(t) in self.seen:
                continue
            name = getattr(t, "__qualname__", t)
            calls = self.eager_calls.get(getattr(inspect.unwrap(t), "__code__", None), 0)
            if calls:
                log.notes.append(
                    f"{name} was called {calls} time(s) in the block, eagerly (not through "
                    "tf.function): eager calls do not trace, so there was nothing to explain"
                )
                continue
            warnings.warn(
                f"explain_retracing: {name!r} was never called in the block (nothing of it "
                "was watched)",
                stacklevel=4,
            )


@contextmanager
def explain_retracing(
    target: Any = None, *, echo: Callable[[str], None] | None = None
) -> Iterator[RetraceLog]:
    """Watch tf.function calls made inside the block; yields the :class:`RetraceLog`.

    ``target``: a tf.function object (watch it; for a method taken from the class, such as
    ``Model.step``, also every instance's bound copy), a plain Python function (watch every
    tf.function built from its code, which catches redefinition in a loop), a list of these,
    or None (watch every tf.function called in the block). A named target that no call
    matched is reported with a warning at the end of the block (a plain function that was only
    called eagerly gets a note in the log instead). ``echo=print`` prints each trace
    explanation as it happens.
    """
    targets = _Targets(target)
    log = RetraceLog(echo)
    monitors: dict[int, RetraceMonitor] = {}
    keep_alive: list[Any] = []  # ids must stay unique while the block runs
    function_class = _function_class()
    original_call = function_class.__call__

    def patched_call(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not targets.watched(self):
            return original_call(self, *args, **kwargs)
        monitor = monitors.get(id(self))
        if monitor is None or monitor.fn is not self:
            monitor = RetraceMonitor(self, log=log)
            monitors[id(self)] = monitor
            keep_alive.append(self)
        return monitor._observe(lambda: original_call(self, *args, **kwargs), args, kwargs)

    function_class.__call__ = patched_call
    try:
        with quiet_tf_retracing_warnings(), targets.counting_eager_calls():
            yield log
        for monitor in log.monitors:
            monitor._record_traces_without_a_call()
        targets.report_unmatched(log)
    finally:
        function_class.__call__ = original_call


@contextmanager
def quiet_tf_retracing_warnings() -> Iterator[None]:
    """Drop TensorFlow's own "N out of the last M calls triggered tf.function retracing"
    warning for the block: it only counts, and the monitor explains every trace instead."""
    tf_logger = logging.getLogger("tensorflow")
    tf_logger.addFilter(_drop_tf_retracing_warning)
    try:
        yield
    finally:
        tf_logger.removeFilter(_drop_tf_retracing_warning)


def _drop_tf_retracing_warning(record: logging.LogRecord) -> bool:
    return "triggered tf.function retracing" not in record.getMessage()
