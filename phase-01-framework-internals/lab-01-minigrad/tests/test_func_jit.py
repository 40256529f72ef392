"""jit (StableHLO run by XLA) against eager minigrad: every primitive, the MLP training step,
the emitted text (checked structurally), and the clear errors. TensorFlow is imported once,
by the first jit compile of this module."""

from __future__ import annotations

import minigrad
import minigrad.nn.functional as mF
import numpy as np
import pytest
from minigrad import func as mf
from minigrad_harness.scenarios import GATHER_INDEX, GRAD_CASES
from minigrad_harness.testing import make_inputs, relative_error, requires_grad


def _close(a, b, tol, what):
    err = relative_error(np.asarray(a, np.float64), np.asarray(b, np.float64))
    assert err < tol, f"{what}: {err:.3g}"


def _close_to_scale(a, b, tol, what):
    """max |a - b| relative to the largest |b| of the tensor: float32 roundings of XLA's
    (fused, reordered) sums against NumPy's, measured on the tensor's own scale."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    err = np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30)
    assert err < tol, f"{what}: {err:.3g}"


_MASK = np.array([[2.0, 0.0, 2.0, 2.0], [0.0, 2.0, 2.0, 0.0], [2.0, 2.0, 0.0, 2.0]])
# Beyond GRAD_CASES: a gather whose gradient depends on x (a linear one's is a constant that
# the trace folds, so ScatterAdd would never be compiled), and Dropout with a fixed mask.
EXTRA_CASES = [
    ("gather_squared", lambda F, x, i: x.gather(0, i) ** 2, [(3, 4), GATHER_INDEX], False),
    ("dropout_mask", lambda F, x: minigrad.ops.Dropout.apply(x * x, _MASK), [(3, 4)], False),
    # detach of a traced tensor is a StopGradient op (finite differences cannot check it, so
    # it is not a GRAD_CASE); it was a constant of the first call's values
    ("detach", lambda F, x: x.detach() * x.tanh(), [(3, 4)], False),
]
JIT_CASES = GRAD_CASES + EXTRA_CASES


def _program(case):
    """(f's differentiable inputs, out_and_grads): the expression's output and the gradient
    of <out, u>, the program the jit test compiles."""
    _, expr, specs, positive = case
    arrays = make_inputs(specs, 0, positive)
    diff = [i for i, s in enumerate(specs) if requires_grad(s)]
    tensors = [minigrad.tensor(a) for a in arrays]
    u = np.random.default_rng(1).standard_normal(expr(mF, *tensors).shape)

    def f(*xs):
        full = list(tensors)
        for i, x in zip(diff, xs, strict=True):
            full[i] = x
        return expr(mF, *full)

    def out_and_grads(*xs):
        g, _ = mf.grad_and_value(
            lambda *ys: (f(*ys) * minigrad.tensor(u)).sum(), tuple(range(len(xs)))
        )(*xs)
        return f(*xs), g

    return [tensors[i] for i in diff], out_and_grads


def test_the_jitted_programs_contain_every_primitive():
    """So 'jit equals eager for every case' covers every primitive, backward-only ones too."""
    from minigrad import rules

    seen = set()
    for case in JIT_CASES:
        xs, program = _program(case)
        seen |= {e.prim.__name__ for e in mf.make_ir(program)(*xs).eqns}
    assert set(rules.PRIMITIVES) - seen == set()


@pytest.mark.parametrize("case", JIT_CASES, ids=[c[0] for c in JIT_CASES])
def test_jit_matches_eager_for_every_primitive(case):
    """Output and gradient (of <out, u>) of each expression, in one compiled program: the
    gradient brings in the backward-only primitives (SumTo, IndexBackward, ScatterAdd, masks)."""
    xs, out_and_grads = _program(case)
    eager_out, eager_grads = out_and_grads(*xs)
    jit_out, jit_grads = mf.jit(out_and_grads)(*xs)
    _close(jit_out.data, eager_out.data, 1e-12, "output")
    for a, b in zip(jit_grads, eager_grads, strict=True):
        _close(a.data, b.data, 1e-12, "gradient")


def _mlp_step(params, x, y, lr=0.5):
    def loss(p):
        h = mF.relu(mF.linear(x, p["0.weight"], p["0.bias"]))
        return mF.cross_entropy(mF.linear(h, p["2.weight"], p["2.bias"]), y)

    grads, value = mf.grad_and_value(loss)(params)
    return value, grads, {k: params[k] - lr * grads[k] for k in params}


@pytest.mark.parametrize("dtype,tol", [(np.float32, 1e-5), (np.float64, 1e-12)])
def test_jit_training_step_matches_eager(dtype, tol):
    from minigrad_harness.digits_mlp import initial_weights, load_digits_split

    data = load_digits_split()
    x, y = minigrad.tensor(data.x_train[:256].astype(dtype)), minigrad.tensor(data.y_train[:256])
    params = {k: minigrad.tensor(v.astype(dtype)) for k, v in initial_weights().items()}
    step = mf.jit(_mlp_step)
    close = _close if dtype == np.float64 else _close_to_scale
    for _ in range(3):  # the cached executable serves the later steps
        loss, grads, new = step(params, x, y)
        e_loss, e_grads, e_new = _mlp_step(params, x, y)
        close(loss.data, e_loss.data, tol, "loss")
        for k in params:
            assert new[k].dtype == dtype
            close(grads[k].data, e_grads[k].data, tol, f"gradient of {k}")
            close(new[k].data, e_new[k].data, tol, f"updated {k}")
        params = new
    assert len(step.cache) == 1


def test_emitted_text_has_the_expected_ops():
    w = minigrad.tensor(np.ones((4, 3)))
    text = mf.to_stablehlo(lambda x: (mF.relu(x @ w) * 2.0).sum(1))(np.ones((2, 4)))
    for op in (
        "stablehlo.dot_general",
        "stablehlo.maximum",
        "stablehlo.multiply",
        "stablehlo.reduce",
    ):
        assert f'"{op}"' in text
    assert "func.func public @main(%arg0: tensor<2x4xf64>) -> (tensor<2xf64>)" in text
    assert text.count("stablehlo.dot_general") == 1


def test_ir_prints_like_a_jaxpr():
    ir = mf.make_ir(mf.grad(lambda x: (x.tanh() * x).sum()))(np.ones(3))
    text = str(ir)
    assert text.startswith("{ lambda") and "f64[3]" in text
    assert "tanh" in text and "mul" in text and text.rstrip().endswith("}")


def test_unsupported_cases_name_the_primitive():
    class Twice(minigrad.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    with pytest.raises(mf.LoweringError, match="Twice"):
        mf.to_stablehlo(lambda x: Twice.apply(x))(np.ones(3))
    with pytest.raises(mf.LoweringError, match="Index"):
        mf.to_stablehlo(lambda x: x[np.array([0, 1]), :, np.array([1, 0])])(np.ones((3, 3, 3)))
    with pytest.raises(mf.TracingError, match="data-dependent"):
        mf.jit(lambda x: x[x > 0])(np.ones(3))
    with pytest.raises(RuntimeError, match="jit: dropout draws random numbers"):
        mf.jit(lambda x: mF.dropout(x, 0.5))(np.ones(3))


def test_jitted_argmax_is_computed_not_a_constant_of_the_first_call():
    # traced once, the NumPy arg-max of the first input became a constant of the program
    step = mf.jit(lambda a: (a.argmax(1), a.min(0).indices, a.max(-1).values))
    x = np.random.default_rng(3).standard_normal((2, 4, 5))
    for example in x:  # same signature: the second call reuses the compiled program
        got = step(minigrad.tensor(example))
        want = (example.argmax(1), example.argmin(0), example.max(-1))
        for g, w in zip(got, want, strict=True):
            assert np.array_equal(g.data, w)


def test_jitted_cross_entropy_honours_ignore_index_in_later_calls():
    # the fused path was chosen from the first call's labels (no -100 among them), so a later
    # call whose labels ignore rows reused a program that did not ignore them
    import torch

    loss = mf.jit(lambda a, t: mF.cross_entropy(a, t))
    x = np.random.default_rng(5).standard_normal((4, 3))
    for labels in ([0, 1, 2, 1], [0, -100, 2, -100]):
        got = loss(minigrad.tensor(x), minigrad.tensor(np.array(labels)))
        want = torch.nn.functional.cross_entropy(torch.tensor(x), torch.tensor(labels))
        _close(got.data, want.numpy(), 1e-12, str(labels))


def test_jit_records_in_place_updates():
    def f(a):
        b = a * 2
        b += 1
        return b

    x = np.arange(6.0).reshape(2, 3)
    _close(mf.jit(f)(minigrad.tensor(x)).data, 2 * x + 1, 1e-12, "in-place add")
