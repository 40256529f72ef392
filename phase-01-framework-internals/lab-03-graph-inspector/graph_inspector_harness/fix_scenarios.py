"""Every fix the retrace monitor can suggest, applied: one scenario per (rule, fix key) of
``graph_inspector.retrace_causes.CAUSES``.

Each scenario runs the same calls twice under the monitor: as written (the monitor must name the
rule and suggest the fix) and with the fix applied (fewer traces, exactly ``expected_traces``,
and the same outputs, or for a stale closure the outputs the code meant). The tests run them all
and check that no actionable fix in the table is without one. This module holds the shapes,
dtypes, Python values and closures; :mod:`graph_inspector_harness.fix_scenarios_objects` the
Python objects, structure, variables and methods; :mod:`graph_inspector_harness.retrace_fix`
what both are built from.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from graph_inspector_harness.retrace_fix import (
    FixResult,
    compare_fix,
    fix_scenario,
    scale,
    tensorflow,
)

# --- shapes and dtypes ----------------------------------------------------------------------


def _double(x: Any) -> Any:
    return x * 2


def _normalize(x: Any) -> Any:
    return x - tensorflow().reduce_mean(x, axis=0)


@fix_scenario("tensor shape", "input_signature")
def tensor_shape_input_signature() -> FixResult:
    tf = tensorflow()
    plain = tf.function(_normalize)
    fixed = tf.function(_normalize, input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    xs = [tf.ones([b, 3]) * b for b in (2, 4, 8)]
    return compare_fix(
        "tensor shape",
        "input_signature",
        (plain, [lambda x=x: plain(x) for x in xs]),
        (fixed, [lambda x=x: fixed(x) for x in xs]),
    )


@fix_scenario("tensor shape", "reduce_retracing")
def tensor_shape_reduce_retracing() -> FixResult:
    tf = tensorflow()
    plain = tf.function(_normalize)
    fixed = tf.function(_normalize, reduce_retracing=True)
    xs = [tf.ones([b, 3]) * b for b in (2, 4, 8, 16)]
    # One trace for the first shape, one generalized [None, 3] trace for all the rest.
    return compare_fix(
        "tensor shape",
        "reduce_retracing",
        (plain, [lambda x=x: plain(x) for x in xs]),
        (fixed, [lambda x=x: fixed(x) for x in xs]),
        expected_traces=2,
    )


def _accumulate(v: Any, x: Any) -> Any:
    v.assign_add(x)
    return v.read_value()


def _accumulate_calls(fn: Any) -> list[Callable[[], Any]]:
    tf = tensorflow()
    return [lambda n=n: fn(tf.Variable(tf.zeros([n])), tf.ones([n]) * n) for n in (2, 3, 4, 5)]


@fix_scenario("variable shape", "reduce_retracing")
def variable_shape_reduce_retracing() -> FixResult:
    # An input_signature of TensorSpecs would hand the function a tensor, and assign_add would
    # fail; reduce_retracing generalizes the VariableSpec instead.
    tf = tensorflow()
    plain = tf.function(_accumulate)
    fixed = tf.function(_accumulate, reduce_retracing=True)
    return compare_fix(
        "variable shape",
        "reduce_retracing",
        (plain, _accumulate_calls(plain)),
        (fixed, _accumulate_calls(fixed)),
        expected_traces=2,
    )


@fix_scenario("tensor shape beside a variable", "reduce_retracing")
def tensor_beside_variable_reduce_retracing() -> FixResult:
    tf = tensorflow()
    plain = tf.function(_accumulate)
    fixed = tf.function(_accumulate, reduce_retracing=True)
    return compare_fix(
        "tensor shape beside a variable",
        "reduce_retracing",
        (plain, _accumulate_calls(plain)),
        (fixed, _accumulate_calls(fixed)),
        expected_traces=2,
    )


@fix_scenario("tensor dtype", "cast")
def tensor_dtype_cast() -> FixResult:
    tf = tensorflow()
    plain, fixed = tf.function(_double), tf.function(_double)
    xs = [tf.ones([3], tf.float32), tf.ones([3], tf.float64) * 2]
    return compare_fix(
        "tensor dtype",
        "cast",
        (plain, [lambda x=x: plain(x) for x in xs]),
        (fixed, [lambda x=x: fixed(tf.cast(x, tf.float32)) for x in xs]),
    )


@fix_scenario("variable dtype", "one_dtype")
def variable_dtype_one_dtype() -> FixResult:
    tf = tensorflow()
    plain, fixed = tf.function(_accumulate), tf.function(_accumulate)
    dtypes = (tf.float32, tf.float64)
    return compare_fix(
        "variable dtype",
        "one_dtype",
        (
            plain,
            [lambda d=d: plain(tf.Variable(tf.zeros([2], d)), tf.ones([2], d)) for d in dtypes],
        ),
        (
            fixed,
            [
                lambda: fixed(tf.Variable(tf.zeros([2]), dtype=tf.float32), tf.ones([2])),
                lambda: fixed(tf.Variable(tf.zeros([2]), dtype=tf.float32), tf.ones([2])),
            ],
        ),
    )


# --- composite tensors ------------------------------------------------------------------------


def _sparse_calls(fn: Any) -> list[Callable[[], Any]]:
    tf = tensorflow()
    return [lambda n=n: fn(tf.sparse.from_dense(tf.ones([n, 3]) * n)) for n in (2, 4, 8)]


@fix_scenario("composite shape", "input_signature")
def composite_shape_input_signature() -> FixResult:
    tf = tensorflow()
    plain = tf.function(tf.sparse.reduce_sum)
    spec = tf.SparseTensorSpec([None, 3], tf.float32)
    fixed = tf.function(lambda s: tf.sparse.reduce_sum(s), input_signature=[spec])
    return compare_fix(
        "composite shape",
        "input_signature",
        (plain, _sparse_calls(plain)),
        (fixed, _sparse_calls(fixed)),
    )


@fix_scenario("composite shape", "reduce_retracing")
def composite_shape_reduce_retracing() -> FixResult:
    tf = tensorflow()
    plain = tf.function(lambda s: tf.sparse.reduce_sum(s))
    fixed = tf.function(lambda s: tf.sparse.reduce_sum(s), reduce_retracing=True)
    return compare_fix(
        "composite shape",
        "reduce_retracing",
        (plain, _sparse_calls(plain)),
        (fixed, _sparse_calls(fixed)),
        expected_traces=2,
    )


@fix_scenario("composite spec", "same_structure")
def composite_spec_same_structure() -> FixResult:
    tf = tensorflow()
    plain = tf.function(lambda r: tf.reduce_sum(r))
    fixed = tf.function(lambda r: tf.reduce_sum(r))
    flat = tf.ragged.constant([[1.0, 2.0], [3.0]])
    nested = tf.ragged.constant([[[1.0]], [[3.0, 4.0]]])  # one more ragged dimension

    def one_ragged_dim(r: Any) -> Any:
        return r.merge_dims(1, 2) if r.ragged_rank == 2 else r

    return compare_fix(
        "composite spec",
        "same_structure",
        (plain, [lambda: plain(flat), lambda: plain(nested)]),
        (fixed, [lambda: fixed(one_ragged_dim(flat)), lambda: fixed(one_ragged_dim(nested))]),
    )


# --- Python values ----------------------------------------------------------------------------


def _dropout_free(x: Any, training: Any) -> Any:
    if training:  # a Python bool: two graphs; a bool tensor: AutoGraph makes one tf.cond
        return x * 0.5
    return x


@fix_scenario("python bool", "tensor_argument")
def python_bool_tensor() -> FixResult:
    tf = tensorflow()
    plain, fixed = tf.function(_dropout_free), tf.function(_dropout_free)
    flags = (False, True, False)
    return compare_fix(
        "python bool",
        "tensor_argument",
        (plain, [lambda f=f: plain(tf.ones([2]), f) for f in flags]),
        (fixed, [lambda f=f: fixed(tf.ones([2]), tf.constant(f)) for f in flags]),
    )


@fix_scenario("python number", "tensor_argument")
def python_number_tensor() -> FixResult:
    tf = tensorflow()
    plain, fixed = tf.function(scale), tf.function(scale)
    factors = (0.5, 1.0, 2.0)
    return compare_fix(
        "python number",
        "tensor_argument",
        (plain, [lambda k=k: plain(tf.ones([2]), k) for k in factors]),
        (fixed, [lambda k=k: fixed(tf.ones([2]), tf.constant(k)) for k in factors]),
    )


def _by_mode(x: Any, mode: Any) -> Any:
    if mode == "double":  # on a string tensor: a tensor comparison, AutoGraph's tf.cond
        return x * 2
    return x


@fix_scenario("python other", "tensor_argument")
def python_string_tensor() -> FixResult:
    tf = tensorflow()
    plain, fixed = tf.function(_by_mode), tf.function(_by_mode)
    modes = ("double", "same", "double")
    return compare_fix(
        "python other",
        "tensor_argument",
        (plain, [lambda m=m: plain(tf.ones([2]), m) for m in modes]),
        (fixed, [lambda m=m: fixed(tf.ones([2]), tf.constant(m)) for m in modes]),
    )


# --- closures, captures, tf.function objects --------------------------------------------------


@fix_scenario("new closure", "reuse_callable")
def new_closure_reuse() -> FixResult:
    tf = tensorflow()
    plain = tf.function(lambda x, activation: activation(x))
    fixed = tf.function(lambda x, activation: activation(x))

    def make_scaled(factor: float) -> Callable[[Any], Any]:
        return lambda t: t * factor

    doubled = make_scaled(2.0)  # created once
    return compare_fix(
        "new closure",
        "reuse_callable",
        (plain, [lambda: plain(tf.ones([2]), make_scaled(2.0)) for _ in range(3)]),
        (fixed, [lambda: fixed(tf.ones([2]), doubled) for _ in range(3)]),
    )


@fix_scenario("new closure", "captures_as_arguments")
def new_closure_captures_as_arguments() -> FixResult:
    tf = tensorflow()
    plain = tf.function(lambda x, activation: activation(x))
    fixed = tf.function(lambda x, scale: x * scale)  # what the closure captured, as a tensor

    def make_scaled(factor: float) -> Callable[[Any], Any]:
        return lambda t: t * factor

    scales = (2.0, 3.0, 4.0)
    return compare_fix(
        "new closure",
        "captures_as_arguments",
        (plain, [lambda s=s: plain(tf.ones([2]), make_scaled(s)) for s in scales]),
        (fixed, [lambda s=s: fixed(tf.ones([2]), tf.constant(s)) for s in scales]),
    )


@fix_scenario("new tf.function object", "hoist")
def new_function_object_hoist() -> FixResult:
    tf = tensorflow()

    def double(x: Any) -> Any:
        return x * 2

    hoisted = tf.function(double)  # created once, outside the loop
    return compare_fix(
        "new tf.function object",
        "hoist",
        (double, [lambda: tf.function(double)(tf.ones([2])) for _ in range(3)]),
        (double, [lambda: hoisted(tf.ones([2])) for _ in range(3)]),
    )


def _redefined_in_loop(scales: tuple[float, ...]) -> tuple[Callable[..., Any], Callable[[], Any]]:
    """The trigger as written: a tf.function built in a loop from a closure over the loop
    variable. Returns (the Python function watched, one call that runs the loop)."""
    tf = tensorflow()
    scale = scales[0]

    def scaled(x: Any) -> Any:
        return x * scale

    def loop() -> Any:
        nonlocal scale
        outputs = []
        for scale in scales:  # noqa: B007 - the closure reads it
            outputs.append(tf.function(scaled)(tf.ones([2])))
        return tf.stack(outputs)

    return scaled, loop


_SCALES = (2.0, 3.0, 4.0)


@fix_scenario("captured value changed", "argument")
def captured_value_argument() -> FixResult:
    tf = tensorflow()
    watched, loop = _redefined_in_loop(_SCALES)
    scaled_by = tf.function(lambda x, factor: x * factor)  # created once, value as a tensor

    def fixed_loop() -> Any:
        return tf.stack([scaled_by(tf.ones([2]), tf.constant(s)) for s in _SCALES])

    return compare_fix(
        "captured value changed", "argument", (watched, [loop]), (scaled_by, [fixed_loop])
    )


@fix_scenario("captured value changed", "variable")
def captured_value_variable() -> FixResult:
    tf = tensorflow()
    watched, loop = _redefined_in_loop(_SCALES)
    factor = tf.Variable(1.0)
    scaled = tf.function(lambda x: x * factor)  # a variable is captured by reference

    def fixed_loop() -> Any:
        outputs = []
        for s in _SCALES:
            factor.assign(s)
            outputs.append(scaled(tf.ones([2])))
        return tf.stack(outputs)

    return compare_fix(
        "captured value changed", "variable", (watched, [loop]), (scaled, [fixed_loop])
    )


def _stale_clip(threshold_after: float) -> tuple[Any, Callable[[], Any], list[np.ndarray]]:
    """A tf.function reading a captured Python float that is rebound after the first call:
    no retrace, the graph keeps the old value. Returns (fn, the calls, what they should give)."""
    tf = tensorflow()
    threshold = 0.5

    @tf.function
    def clip(x: Any) -> Any:
        return tf.minimum(x, threshold)

    def calls() -> Any:
        nonlocal threshold
        first = clip(tf.ones([2]))
        threshold = threshold_after
        return tf.stack([first, clip(tf.ones([2]))])

    meant = [np.array([[0.5, 0.5], [threshold_after, threshold_after]])]
    return clip, calls, meant


@fix_scenario("stale closure", "argument")
def stale_closure_argument() -> FixResult:
    tf = tensorflow()
    clip, calls, meant = _stale_clip(0.9)
    fixed = tf.function(lambda x, threshold: tf.minimum(x, threshold))

    def fixed_calls() -> Any:
        return tf.stack([fixed(tf.ones([2]), tf.constant(t)) for t in (0.5, 0.9)])

    return compare_fix(
        "stale closure", "argument", (clip, [calls]), (fixed, [fixed_calls]), 1, meant
    )


@fix_scenario("stale closure", "variable")
def stale_closure_variable() -> FixResult:
    tf = tensorflow()
    clip, calls, meant = _stale_clip(0.9)
    threshold = tf.Variable(0.5)
    fixed = tf.function(lambda x: tf.minimum(x, threshold))

    def fixed_calls() -> Any:
        first = fixed(tf.ones([2]))
        threshold.assign(0.9)
        return tf.stack([first, fixed(tf.ones([2]))])

    return compare_fix(
        "stale closure", "variable", (clip, [calls]), (fixed, [fixed_calls]), 1, meant
    )
