"""Question 3: tf.constant vs tf.Variable, one GradientTape step, Keras SGD."""

import pytest


@pytest.fixture(scope="module")
def tfv():
    """``fundamentals.tf_variables``, imported when the first test here runs rather than at
    collection: TensorFlow's import costs ~10 s of CPU, and every pytest worker collects every
    module, so a top-level import would be paid by workers that never run these tests."""
    from fundamentals import tf_variables

    return tf_variables


def test_one_gradient_tape_step_from_zero(tfv):
    gradient, x = tfv.one_tape_step(x0=0.0, learning_rate=0.1)
    assert gradient == pytest.approx(-10.0, abs=1e-6)
    assert x == pytest.approx(1.0, abs=1e-6)


def test_keras_sgd_converges_to_five_with_the_expected_contraction(tfv):
    x, losses = tfv.minimise_with_keras_sgd(x0=0.0, learning_rate=0.1, steps=100)
    assert x == pytest.approx(5.0, abs=1e-4)
    # Plain SGD on (x - 5)^2 with lr 0.1 shrinks the distance to 5 by 0.8 per step, so the
    # loss shrinks by 0.64: a check that the optimizer really did x -= lr * grad.
    assert losses[0] == pytest.approx(25.0)
    assert losses[1] == pytest.approx(16.0, rel=1e-6)
    assert losses[2] / losses[1] == pytest.approx(0.64, rel=1e-5)
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False) if a > 1e-8)


def test_constant_is_differentiated_only_when_watched(tfv):
    unwatched, watched = tfv.constant_gradients(x0=0.0)
    assert unwatched is None
    assert watched == pytest.approx(-10.0)
    assert tfv.constant_gradients(x0=3)[1] == pytest.approx(-4.0)  # an int works too


def test_constant_is_immutable_and_variable_is_state(tfv):
    facts = tfv.constant_vs_variable()
    assert not facts.constant_has_assign
    assert "assign" in facts.constant_assign_error
    assert facts.variable_before == 3.0
    assert facts.variable_after_assign_add == 4.0
    assert facts.alias_sees_update and facts.variable_trainable
    assert not facts.plus_one_is_variable  # arithmetic makes a new tensor, not new state


def test_bad_arguments_are_refused(tfv):
    for bad in (0.0, -0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="learning_rate"):
            tfv.one_tape_step(learning_rate=bad)
        with pytest.raises(ValueError, match="learning_rate"):
            tfv.minimise_with_keras_sgd(learning_rate=bad)
    with pytest.raises(ValueError, match="steps"):
        tfv.minimise_with_keras_sgd(steps=0)


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))
