"""What every retrace scenario is built from: TensorFlow imported when a scenario runs (not
when the harness is imported), the record of a fix applied (:class:`FixResult`), how a fix is
compared with the calls as written (:func:`compare_fix`), the registry of fix scenarios
(:func:`fix_scenario`, ``FIX_SCENARIOS``), and the small functions and classes several
scenarios trace.

The scenarios themselves are in :mod:`graph_inspector_harness.scenarios` (what triggers a
retrace), :mod:`graph_inspector_harness.fix_scenarios` (shapes, dtypes, Python values,
closures) and :mod:`graph_inspector_harness.fix_scenarios_objects` (Python objects, structure,
variables, methods).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from graph_inspector.retrace import RetraceLog, explain_retracing


def tensorflow() -> Any:
    """The ``tensorflow`` module, imported on first use."""
    import tensorflow as tf

    return tf


def scale(x: Any, k: Any) -> Any:
    """``x * k``: a function whose second argument can be a Python number or a tensor."""
    return x * k


def module_with_a_method() -> type:
    """A new ``tf.Module`` class (a fresh class, so a fresh trace cache) whose ``step`` is a
    ``tf.function`` method reading one variable."""
    tf = tensorflow()

    class Model(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(2.0)

        @tf.function
        def step(self, x: Any) -> Any:
            return x + self.w

    return Model


@dataclass
class FixResult:
    rule: str
    fix: str
    before: RetraceLog  # the calls as written
    after: RetraceLog  # the same calls with the fix applied
    outputs_before: list[np.ndarray]
    outputs_after: list[np.ndarray]
    expected_traces: int  # traces with the fix applied
    expected_outputs: list[np.ndarray] | None = None  # None: the same as before the fix

    @property
    def suggested(self) -> bool:
        """The monitor named this rule and offered this fix for the calls as written."""
        return any(
            c.rule == self.rule and self.fix in c.fix_keys
            for r in self.before.records
            for c in [*r.causes, *r.warnings]
        )

    @property
    def outputs_match(self) -> bool:
        want = self.outputs_before if self.expected_outputs is None else self.expected_outputs
        return len(want) == len(self.outputs_after) and all(
            np.allclose(a, b) for a, b in zip(want, self.outputs_after, strict=True)
        )

    @property
    def retrace_gone(self) -> bool:
        """Fewer traces with the fix (or, where the code as written failed to trace or kept a
        stale value, no error and the meant outputs), exactly as many as expected."""
        traces = self.after.traces
        failed_before = any(r.error for r in self.before.records)
        fewer = traces < self.before.traces or failed_before or self.rule == "stale closure"
        no_errors = not any(r.error for r in self.after.records)
        return fewer and no_errors and traces == self.expected_traces == self.after.tracing_count()


def run_under_monitor(
    target: Any, calls: list[Callable[[], Any]]
) -> tuple[RetraceLog, list[np.ndarray]]:
    outputs = []
    with explain_retracing(target) as log:
        for call in calls:
            try:
                outputs.append(np.asarray(call()))
            except (TypeError, ValueError):  # the unfixed unhashable / late-variable cases
                outputs.append(np.asarray(np.nan))
    return log, outputs


def compare_fix(
    rule: str,
    fix: str,
    before: tuple[Any, list[Callable[[], Any]]],
    after: tuple[Any, list[Callable[[], Any]]],
    expected_traces: int = 1,
    expected_outputs: list[np.ndarray] | None = None,
) -> FixResult:
    log_before, out_before = run_under_monitor(*before)
    log_after, out_after = run_under_monitor(*after)
    return FixResult(
        rule, fix, log_before, log_after, out_before, out_after, expected_traces, expected_outputs
    )


# Filled by the @fix_scenario functions of the fix_scenarios modules when they are imported.
FIX_SCENARIOS: dict[tuple[str, str], Callable[[], FixResult]] = {}


def fix_scenario(
    rule: str, fix: str
) -> Callable[[Callable[[], FixResult]], Callable[[], FixResult]]:
    def register(fn: Callable[[], FixResult]) -> Callable[[], FixResult]:
        FIX_SCENARIOS[(rule, fix)] = fn
        return fn

    return register
