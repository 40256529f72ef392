"""Scripted retracing triggers: each one runs fresh tf.functions under the monitor and says what
must be seen (trace count, and which argument with which cause). The tests and the demo report
both run these, so what the report shows is what the tests check.

Triggers: new shape, new dtype, new Python value, new closure (a callable argument), a
tf.function redefined in a loop (closing over a changed value), a Python object that changes
identity, an unhashable object, a variable created on a later call, and a captured value that
changes *without* a retrace (the stale-graph bug). Then cases the monitor must not get wrong:
a function traced before monitoring began, a Python value changing under reduce_retracing, a
tf.function method called on a second instance, a list passed as a tuple, composite tensors
(RaggedTensor, SparseTensor), an object hashed by value. Then the three fixes, measured.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from graph_inspector.retrace import RetraceLog, explain_retracing

from graph_inspector_harness.retrace_fix import module_with_a_method, tensorflow


@dataclass
class ScenarioResult:
    name: str
    log: RetraceLog
    expected_traces: int
    # (argument path, cause kind) pairs that must appear among the causes (or warnings).
    expected_causes: list[tuple[str, str]]
    errors: list[str] = field(default_factory=list)

    @property
    def traces(self) -> int:
        return self.log.traces

    @property
    def tf_tracing_count(self) -> int:
        return self.log.tracing_count()

    def found(self, arg: str, kind: str) -> bool:
        for record in self.log.records:
            for cause in [*record.causes, *record.warnings]:
                if cause.arg == arg and cause.kind == kind:
                    return True
        return False

    @property
    def passed(self) -> bool:
        return self.traces == self.expected_traces == self.tf_tracing_count and all(
            self.found(a, k) for a, k in self.expected_causes
        )


def new_shape() -> ScenarioResult:
    tf = tensorflow()

    @tf.function
    def normalize(x):
        return x - tf.reduce_mean(x, axis=0)

    with explain_retracing(normalize) as log:
        normalize(tf.ones([2, 3]))
        normalize(tf.ones([2, 3]))  # same shape: reuses
        normalize(tf.ones([4, 3]))  # new batch size: retraces
    return ScenarioResult("new tensor shape", log, 2, [("x", "shape")])


def new_dtype() -> ScenarioResult:
    tf = tensorflow()

    @tf.function
    def double(x):
        return x * 2

    with explain_retracing(double) as log:
        double(tf.ones([3], tf.float32))
        double(tf.ones([3], tf.float64))
    return ScenarioResult("new tensor dtype", log, 2, [("x", "dtype")])


def new_python_value() -> ScenarioResult:
    tf = tensorflow()

    @tf.function
    def dropout_layer(x, training):
        if training:  # a Python bool: decided at trace time, one graph per value
            return tf.nn.dropout(x, rate=0.5, seed=1)
        return x

    with explain_retracing(dropout_layer) as log:
        dropout_layer(tf.ones([2, 2]), training=False)
        dropout_layer(tf.ones([2, 2]), training=True)
        dropout_layer(tf.ones([2, 2]), training=False)  # reuses the first trace
    return ScenarioResult("new Python value", log, 2, [("training", "python value")])


def new_closure_argument() -> ScenarioResult:
    tf = tensorflow()

    @tf.function
    def apply(x, activation):
        return activation(x)

    def make_scaled(scale: float) -> Callable[[Any], Any]:
        return lambda t: t * scale

    with explain_retracing(apply) as log:
        apply(tf.ones([2]), make_scaled(2.0))
        apply(tf.ones([2]), make_scaled(3.0))  # a new closure object: retraces
    return ScenarioResult(
        "new closure (callable argument)", log, 2, [("activation", "new closure")]
    )


def redefined_in_loop() -> ScenarioResult:
    tf = tensorflow()

    def scaled(x):
        return x * scale  # noqa: B023 - the closure over the loop variable is the point

    with explain_retracing(scaled) as log:
        for scale in (2.0, 3.0, 4.0):  # noqa: B007
            tf.function(scaled)(tf.ones([2]))  # a new tf.function object every iteration
    return ScenarioResult(
        "tf.function redefined in a loop (captured value changes)",
        log,
        3,
        [("<function>", "new tf.function object"), ("<captured> scale", "captured value changed")],
    )


class _Config:
    """A plain object: hashed by identity, so every new instance is a new cache key."""

    def __init__(self, lr: float) -> None:
        self.lr = lr


class _ValueConfig:
    """Defines __eq__ without __hash__: Python makes it unhashable, TF cannot key it."""

    def __init__(self, lr: float) -> None:
        self.lr = lr

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ValueConfig) and other.lr == self.lr


def object_identity() -> ScenarioResult:
    tf = tensorflow()

    @tf.function
    def sgd_update(grad, config):
        return grad * config.lr

    with explain_retracing(sgd_update) as log:
        sgd_update(tf.ones([2]), _Config(0.1))
        sgd_update(tf.ones([2]), _Config(0.1))  # equal content, new object: retraces
    return ScenarioResult("Python object changes identity", log, 2, [("config", "object identity")])


def unhashable_object() -> ScenarioResult:
    tf = tensorflow()

    @tf.function
    def sgd_update(grad, config):
        return grad * config.lr

    errors = []
    with explain_retracing(sgd_update) as log:
        config = _Config(0.1)
        sgd_update(tf.ones([2]), config)
        sgd_update(tf.ones([2]), config)  # the same object: reuses
        try:
            sgd_update(tf.ones([2]), _ValueConfig(0.1))
        except TypeError as exc:
            errors.append(str(exc).splitlines()[0])
    return ScenarioResult(
        "unhashable Python object", log, 1, [("config", "unhashable")], errors=errors
    )


def variable_on_later_call() -> ScenarioResult:
    tf = tensorflow()

    class Scaler(tf.Module):
        @tf.function
        def __call__(self, x, learnable):
            if learnable:
                self.w = tf.Variable(2.0)  # created on the second trace: not allowed
                return x * self.w
            return x

    scaler = Scaler()
    errors = []
    with explain_retracing(scaler.__call__) as log:
        scaler(tf.ones([2]), False)
        try:
            scaler(tf.ones([2]), True)
        except ValueError as exc:
            errors.append(str(exc).splitlines()[0])
    return ScenarioResult(
        "variable created on a later call",
        log,
        2,
        [("<variables>", "variable created on a later call"), ("learnable", "python value")],
        errors=errors,
    )


def stale_closure() -> ScenarioResult:
    tf = tensorflow()
    threshold = 0.5

    @tf.function
    def clip(x):
        return tf.minimum(x, threshold)  # captured at trace time, a graph constant

    with explain_retracing(clip) as log:
        clip(tf.ones([2]))
        threshold = 0.9  # noqa: F841 - rebinding the captured name: TF does not retrace
        clip(tf.ones([2]))
    return ScenarioResult(
        "captured value changed, no retrace (stale graph)",
        log,
        1,
        [("<captured> threshold", "stale closure (no retrace)")],
    )


def traced_before_monitoring() -> ScenarioResult:
    tf = tensorflow()

    @tf.function
    def double(x):
        return x * 2

    double(tf.ones([1]))  # traced before the monitor starts
    with explain_retracing(double) as log:
        double(tf.ones([2]))  # a retrace, compared with the [1] trace TF recorded
    return ScenarioResult("function traced before monitoring began", log, 1, [("x", "shape")])


def python_value_under_reduce_retracing() -> ScenarioResult:
    tf = tensorflow()

    @tf.function(reduce_retracing=True)
    def shift(x, flag):
        return x + 1 if flag else x

    with explain_retracing(shift) as log:
        shift(tf.ones([2, 3]), False)
        shift(tf.ones([4, 3]), False)  # retraces, generalized to [None, 3]
        shift(tf.ones([5, 3]), False)  # served by [None, 3]
        shift(tf.ones([5, 3]), True)  # only the Python value is new
    return ScenarioResult(
        "Python value changes under reduce_retracing",
        log,
        3,
        [("x", "shape"), ("flag", "python value")],
    )


def method_on_new_instance() -> ScenarioResult:
    tf = tensorflow()

    Model = module_with_a_method()  # noqa: N806 - a class
    first, second = Model(), Model()
    # Model.step is the class's tf.function; first.step and second.step are bound copies.
    with explain_retracing(Model.step) as log:
        first.step(tf.ones([3]))
        second.step(tf.ones([3]))  # same inputs, new instance: its own trace cache
    return ScenarioResult(
        "tf.function method called on a new instance", log, 2, [("<self>", "new instance")]
    )


def container_type_changed() -> ScenarioResult:
    tf = tensorflow()

    @tf.function
    def total(batch):
        return batch["a"] + tf.reduce_sum(batch["b"][0])

    with explain_retracing(total) as log:
        total({"a": tf.ones([2]), "b": [tf.ones([3]), tf.ones([1])]})
        total({"a": tf.ones([2]), "b": (tf.ones([3]), tf.ones([1]))})  # list -> tuple
    return ScenarioResult("a list passed as a tuple", log, 2, [("batch['b']", "structure")])


def composite_tensors() -> ScenarioResult:
    tf = tensorflow()

    @tf.function
    def ragged_sum(r):
        return tf.reduce_sum(r)

    @tf.function
    def sparse_sum(s):
        return tf.sparse.reduce_sum(s)

    with explain_retracing([ragged_sum, sparse_sum]) as log:
        ragged_sum(tf.ragged.constant([[1.0, 2.0], [3.0]]))
        ragged_sum(tf.ragged.constant([[1.0], [3.0, 4.0, 5.0]]))  # same RaggedTensorSpec: reuses
        ragged_sum(tf.ragged.constant([[[1.0]], [[3.0]]]))  # one more ragged dimension
        sparse_sum(tf.sparse.from_dense(tf.ones([2, 3])))
        sparse_sum(tf.sparse.from_dense(tf.ones([4, 3])))  # dense shape changed
    return ScenarioResult(
        "RaggedTensor / SparseTensor spec changes", log, 4, [("r", "spec"), ("s", "shape")]
    )


@dataclass(frozen=True)
class _FrozenConfig:
    """Hashed by value (frozen dataclass): equal values share a trace, new values do not."""

    lr: float


def object_value() -> ScenarioResult:
    tf = tensorflow()

    @tf.function
    def sgd_update(grad, config):
        return grad * config.lr

    with explain_retracing(sgd_update) as log:
        sgd_update(tf.ones([2]), _FrozenConfig(0.1))
        sgd_update(tf.ones([2]), _FrozenConfig(0.1))  # equal value: reuses
        sgd_update(tf.ones([2]), _FrozenConfig(0.2))  # new value: retraces
    return ScenarioResult(
        "Python object hashed by value changes value", log, 2, [("config", "object value")]
    )


def fix_input_signature() -> ScenarioResult:
    tf = tensorflow()

    @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32)])
    def normalize(x):
        return x - tf.reduce_mean(x, axis=0)

    with explain_retracing(normalize) as log:
        for batch in (2, 4, 8):
            normalize(tf.ones([batch, 3]))
    return ScenarioResult("fix: input_signature with None batch", log, 1, [])


def fix_reduce_retracing() -> ScenarioResult:
    tf = tensorflow()

    @tf.function(reduce_retracing=True)
    def normalize(x):
        return x - tf.reduce_mean(x, axis=0)

    with explain_retracing(normalize) as log:
        for batch in (2, 4, 8, 16):
            normalize(tf.ones([batch, 3]))
    # One trace for the first shape, one generalized trace [None, 3] that serves the rest.
    return ScenarioResult("fix: reduce_retracing=True", log, 2, [("x", "shape")])


def fix_tensor_not_python() -> ScenarioResult:
    tf = tensorflow()

    @tf.function
    def scale(x, factor):
        return x * factor

    with explain_retracing(scale) as log:
        for factor in (0.5, 1.0, 2.0):
            scale(tf.ones([2]), tf.constant(factor))  # a tensor: one graph for every value
    return ScenarioResult("fix: pass a tensor, not a Python number", log, 1, [])


TRIGGERS: list[Callable[[], ScenarioResult]] = [
    new_shape,
    new_dtype,
    new_python_value,
    new_closure_argument,
    redefined_in_loop,
    object_identity,
    unhashable_object,
    variable_on_later_call,
    stale_closure,
    traced_before_monitoring,
    python_value_under_reduce_retracing,
    method_on_new_instance,
    container_type_changed,
    composite_tensors,
    object_value,
]
FIXES: list[Callable[[], ScenarioResult]] = [
    fix_input_signature,
    fix_reduce_retracing,
    fix_tensor_not_python,
]


def run_all() -> list[ScenarioResult]:
    return [scenario() for scenario in [*TRIGGERS, *FIXES]]


def fix_scenarios() -> dict[tuple[str, str], Callable[[], Any]]:
    """Every fix the monitor can suggest, applied to its scenario: (rule, fix key) -> run."""
    # Importing the two scenario modules registers their cases in FIX_SCENARIOS.
    import graph_inspector_harness.fix_scenarios
    import graph_inspector_harness.fix_scenarios_objects  # noqa: F401
    from graph_inspector_harness.retrace_fix import FIX_SCENARIOS

    return dict(FIX_SCENARIOS)
