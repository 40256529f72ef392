"""Fix scenarios for Python objects, structure, variables created late and a method on a new
instance (the others are in :mod:`graph_inspector_harness.fix_scenarios`; what both are built
from in :mod:`graph_inspector_harness.retrace_fix`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from graph_inspector_harness.retrace_fix import (
    FixResult,
    compare_fix,
    fix_scenario,
    module_with_a_method,
    scale,
    tensorflow,
)


class Config:
    """A plain object: hashed by identity, so every new instance is a new cache key."""

    def __init__(self, lr: float) -> None:
        self.lr = lr


class OtherConfig(Config):
    pass


class EqConfig(Config):
    """Defines __eq__ without __hash__: Python makes it unhashable, TF cannot key it."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, EqConfig) and other.lr == self.lr


class ValueConfig(Config):
    """Hashed and compared by value: equal configs share a trace."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ValueConfig) and other.lr == self.lr

    def __hash__(self) -> int:
        return hash(("ValueConfig", self.lr))


@dataclass(frozen=True)
class FrozenConfig:
    lr: float


def _update(grad: Any, config: Any) -> Any:
    return grad * config.lr


def _update_lr(grad: Any, lr: Any) -> Any:
    return grad * lr


def _object_case(
    rule: str,
    fix: str,
    configs: list[Any],
    fixed_configs: list[Any] | None,
    meant_lr: float | None = None,
) -> FixResult:
    """The update called once per config; fixed: with ``fixed_configs`` (same update) or, when
    None, with the learning rate passed as a tensor."""
    tf = tensorflow()
    plain = tf.function(_update)
    if fixed_configs is None:
        fixed = tf.function(_update_lr)
        after = [lambda c=c: fixed(tf.ones([2]), tf.constant(c.lr)) for c in configs]
    else:
        fixed = tf.function(_update)
        after = [lambda c=c: fixed(tf.ones([2]), c) for c in fixed_configs]
    before = [lambda c=c: plain(tf.ones([2]), c) for c in configs]
    result = compare_fix(rule, fix, (plain, before), (fixed, after))
    if meant_lr is not None:  # as written some calls raise: compare with what they meant
        result.expected_outputs = [np.full([2], meant_lr, np.float32)] * len(configs)
    return result


@fix_scenario("object identity", "reuse_object")
def object_identity_reuse() -> FixResult:
    shared = Config(0.1)
    return _object_case("object identity", "reuse_object", [Config(0.1), Config(0.1)], [shared] * 2)


@fix_scenario("object identity", "value_hash")
def object_identity_value_hash() -> FixResult:
    configs = [Config(0.1), Config(0.1)]
    by_value = [ValueConfig(0.1), ValueConfig(0.1)]
    return _object_case("object identity", "value_hash", configs, by_value)


@fix_scenario("object identity", "pass_tensors")
def object_identity_tensors() -> FixResult:
    return _object_case("object identity", "pass_tensors", [Config(0.1), Config(0.2)], None)


@fix_scenario("object type", "pass_tensors")
def object_type_tensors() -> FixResult:
    return _object_case("object type", "pass_tensors", [Config(0.1), OtherConfig(0.1)], None)


@fix_scenario("object value", "pass_tensors")
def object_value_tensors() -> FixResult:
    configs = [FrozenConfig(0.1), FrozenConfig(0.2), FrozenConfig(0.3)]
    return _object_case("object value", "pass_tensors", configs, None)


@fix_scenario("unhashable", "value_hash")
def unhashable_value_hash() -> FixResult:
    configs = [Config(0.1), EqConfig(0.1)]
    return _object_case("unhashable", "value_hash", configs, [ValueConfig(0.1)] * 2, 0.1)


@fix_scenario("unhashable", "pass_tensors")
def unhashable_tensors() -> FixResult:
    configs = [Config(0.1), EqConfig(0.1)]
    return _object_case("unhashable", "pass_tensors", configs, None, 0.1)


# --- structure --------------------------------------------------------------------------------


@fix_scenario("structure", "pack_tensor")
def structure_pack_tensor() -> FixResult:
    tf = tensorflow()
    plain = tf.function(lambda xs: tf.add_n(xs))
    fixed = tf.function(
        lambda packed: tf.reduce_sum(packed, axis=0),
        input_signature=[tf.TensorSpec([None, 3], tf.float32)],
    )
    batches = [[tf.ones([3]) * i for i in range(1, n + 1)] for n in (2, 3, 4)]
    return compare_fix(
        "structure",
        "pack_tensor",
        (plain, [lambda b=b: plain(b) for b in batches]),
        (fixed, [lambda b=b: fixed(tf.stack(b)) for b in batches]),
    )


@fix_scenario("container type", "same_container")
def container_type_same() -> FixResult:
    tf = tensorflow()
    plain = tf.function(lambda pair: pair[0] + pair[1])
    fixed = tf.function(lambda pair: pair[0] + pair[1])
    a, b = tf.ones([2]), tf.ones([2]) * 2
    return compare_fix(
        "container type",
        "same_container",
        (plain, [lambda: plain([a, b]), lambda: plain((a, b))]),
        (fixed, [lambda: fixed([a, b]), lambda: fixed(list((a, b)))]),
    )


@fix_scenario("argument kind", "same_kind")
def argument_kind_same() -> FixResult:
    tf = tensorflow()
    plain, fixed = tf.function(scale), tf.function(scale)
    return compare_fix(
        "argument kind",
        "same_kind",
        (plain, [lambda: plain(tf.ones([2]), tf.constant(2.0)), lambda: plain(tf.ones([2]), 2.0)]),
        (
            fixed,
            [
                lambda: fixed(tf.ones([2]), tf.constant(2.0)),
                lambda: fixed(tf.ones([2]), tf.constant(2.0)),
            ],
        ),
    )


# --- variables and methods --------------------------------------------------------------------


@fix_scenario("variable created on a later call", "create_once")
def variable_create_once() -> FixResult:
    tf = tensorflow()

    class LateScaler(tf.Module):
        @tf.function
        def __call__(self, x: Any, learnable: bool) -> Any:
            if learnable:
                self.w = tf.Variable(2.0)  # created on the second trace: TF refuses
                return x * self.w
            return x

    class Scaler(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = tf.Variable(2.0)  # created once, outside the traced code

        @tf.function
        def __call__(self, x: Any, learnable: Any) -> Any:
            return x * self.w if learnable else x

    late, fixed = LateScaler(), Scaler()
    result = compare_fix(
        "variable created on a later call",
        "create_once",
        (late.__call__, [lambda: late(tf.ones([2]), False), lambda: late(tf.ones([2]), True)]),
        (
            fixed.__call__,
            [
                lambda: fixed(tf.ones([2]), tf.constant(False)),
                lambda: fixed(tf.ones([2]), tf.constant(True)),
            ],
        ),
        expected_traces=1,
    )
    # As written the second call raises (recorded as NaN): what the fix must produce instead.
    result.expected_outputs = [result.outputs_before[0], 2 * result.outputs_before[0]]
    return result


@fix_scenario("new instance", "reuse_object")
def new_instance_reuse() -> FixResult:
    tf = tensorflow()

    Model = module_with_a_method()  # noqa: N806 - a class
    first, second, shared = Model(), Model(), Model()
    return compare_fix(
        "new instance",
        "reuse_object",
        (Model.step, [lambda: first.step(tf.ones([3])), lambda: second.step(tf.ones([3]))]),
        (Model.step, [lambda: shared.step(tf.ones([3])), lambda: shared.step(tf.ones([3]))]),
    )


@fix_scenario("new instance", "function_outside_class")
def new_instance_function_outside() -> FixResult:
    tf = tensorflow()

    Model = module_with_a_method()  # noqa: N806 - a class

    @tf.function
    def step(x: Any, w: Any) -> Any:  # one tf.function; the variables are arguments
        return x + w

    first, second = Model(), Model()
    return compare_fix(
        "new instance",
        "function_outside_class",
        (Model.step, [lambda: first.step(tf.ones([3])), lambda: second.step(tf.ones([3]))]),
        (step, [lambda: step(tf.ones([3]), first.w), lambda: step(tf.ones([3]), second.w)]),
    )


@fix_scenario("called from", "call_from_one_place")
def called_from_a_tf1_graph() -> FixResult:
    tf = tensorflow()

    def add_one(x: Any) -> Any:
        return x + 1

    def in_tf1_graph(fn: Any) -> Any:  # a legacy graph (Session.run) calling the tf.function
        with tf.Graph().as_default():
            out = fn(tf.ones([2]))
            with tf.compat.v1.Session() as session:
                return session.run(out)

    written, fixed = tf.function(add_one), tf.function(add_one)
    return compare_fix(
        "called from",
        "call_from_one_place",
        (written, [lambda: written(tf.ones([2])), lambda: in_tf1_graph(written)]),
        (fixed, [lambda: fixed(tf.ones([2])), lambda: fixed(tf.ones([2]))]),  # only eagerly
    )
