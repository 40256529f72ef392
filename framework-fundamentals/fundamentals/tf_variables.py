"""Question 3: tf.constant versus tf.Variable, and gradient descent with tf.GradientTape.

- ``tf.constant`` is an immutable value: no ``assign``; a tape differentiates with respect to
  it only if told to (``tape.watch``), because nothing marks it as a parameter.
- ``tf.Variable`` is mutable state (``assign`` / ``assign_sub`` update it in place, the
  object keeps its identity) and trainable variables are watched automatically.
- One step on f(x) = (x − 5)² from x = 0 with lr = 0.1: grad = 2(x − 5) = −10, so
  x ← 0 − 0.1·(−10) = 1.0. Each step shrinks the distance to 5 by (1 − 2·lr) = 0.8.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # keep TensorFlow's start-up banner quiet

import tensorflow as tf  # noqa: E402


def quadratic(x: tf.Tensor | tf.Variable) -> tf.Tensor:
    """f(x) = (x − 5)², minimised at x = 5."""
    return (x - 5.0) ** 2


@dataclass
class ConstantVsVariable:
    constant_has_assign: bool
    constant_assign_error: str
    variable_before: float
    variable_after_assign_add: float
    alias_sees_update: bool  # a name bound before assign_add sees the new value: same state
    plus_one_is_variable: bool  # `variable + 1` is a new EagerTensor, not a Variable
    variable_trainable: bool


def constant_vs_variable() -> ConstantVsVariable:
    constant = tf.constant(3.0)
    try:
        constant.assign(4.0)  # EagerTensor has no assign: constants are values, not state
        assign_error = ""
    except AttributeError as error:
        assign_error = str(error)
    variable = tf.Variable(3.0)
    alias = variable
    before = float(variable.numpy())
    variable.assign_add(1.0)  # in place: every reference to this Variable sees 4.0
    return ConstantVsVariable(
        constant_has_assign=hasattr(constant, "assign"),
        constant_assign_error=assign_error,
        variable_before=before,
        variable_after_assign_add=float(variable.numpy()),
        alias_sees_update=float(alias.numpy()) == 4.0,
        plus_one_is_variable=isinstance(variable + 1.0, tf.Variable),
        variable_trainable=variable.trainable,
    )


def _check_learning_rate(learning_rate: float) -> None:
    if not (math.isfinite(learning_rate) and learning_rate > 0):
        raise ValueError(f"learning_rate must be a positive finite number, got {learning_rate}")


def one_tape_step(x0: float = 0.0, learning_rate: float = 0.1) -> tuple[float, float]:
    """One hand-written gradient-descent step; returns (gradient, updated x)."""
    _check_learning_rate(learning_rate)
    x = tf.Variable(x0, dtype=tf.float32)
    with tf.GradientTape() as tape:
        loss = quadratic(x)
    gradient = tape.gradient(loss, x)
    x.assign_sub(learning_rate * gradient)  # in place: x stays the same Variable
    return float(gradient.numpy()), float(x.numpy())


def minimise_with_keras_sgd(
    x0: float = 0.0, learning_rate: float = 0.1, steps: int = 100
) -> tuple[float, list[float]]:
    """The same minimisation with ``keras.optimizers.SGD``; returns (final x, loss per step)."""
    _check_learning_rate(learning_rate)
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    x = tf.Variable(x0, dtype=tf.float32)
    optimizer = tf.keras.optimizers.SGD(learning_rate=learning_rate)
    losses = []
    for _ in range(steps):
        with tf.GradientTape() as tape:
            loss = quadratic(x)
        optimizer.apply_gradients([(tape.gradient(loss, x), x)])
        losses.append(float(loss.numpy()))
    return float(x.numpy()), losses


def constant_gradients(x0: float = 0.0) -> tuple[object, float]:
    """d f / d c for a tf.constant c: None unwatched, −10 once the tape watches it."""
    c = tf.constant(x0, dtype=tf.float32)  # an int would make an int32 constant: no gradient
    with tf.GradientTape() as tape:
        loss = quadratic(c)
    unwatched = tape.gradient(loss, c)
    with tf.GradientTape() as tape:
        tape.watch(c)
        loss = quadratic(c)
    watched = tape.gradient(loss, c)
    return unwatched, float(watched.numpy())
