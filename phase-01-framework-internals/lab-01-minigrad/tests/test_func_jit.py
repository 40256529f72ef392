"""jit (StableHLO compiled by XLA, run on PJRT) against eager minigrad: every primitive, the
MLP training step, the cache (one compile per signature), the runtime's input and output
paths (output views passed back, staged small inputs, DLPack views of large ones), the
emitted text (checked structurally), and the clear errors. jaxlib is imported once, by the
first jit compile of this module."""

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


def test_a_new_signature_compiles_once_and_a_known_one_is_a_lookup():
    step = mf.jit(_mlp_step)
    rng = np.random.default_rng(7)
    params = {
        "0.weight": minigrad.tensor(rng.standard_normal((5, 4))),
        "0.bias": minigrad.tensor(rng.standard_normal(5)),
        "2.weight": minigrad.tensor(rng.standard_normal((3, 5))),
        "2.bias": minigrad.tensor(rng.standard_normal(3)),
    }
    inputs = {
        n: (minigrad.tensor(rng.standard_normal((n, 4))), minigrad.tensor(rng.integers(0, 3, n)))
        for n in (6, 9)
    }
    entries = []
    for n in (6, 6, 9, 9, 6):
        loss, _, _ = step(params, *inputs[n])
        _close(loss.data, _mlp_step(params, *inputs[n])[0].data, 1e-12, f"loss, batch {n}")
        entries.append(len(step.cache))
    assert entries == [1, 1, 2, 2, 2]
    # a static argument is part of the signature: a new value is a new program
    step(params, *inputs[6], 0.25)
    assert len(step.cache) == 3
    for entry in step.cache.values():
        assert entry.compile_seconds > 0 and entry.trace_seconds > 0 and entry.lower_seconds > 0


def test_a_cache_hit_runs_without_retracing_and_a_new_shape_or_dtype_compiles_once():
    """The per-signature fast path: the traced function's body runs only while tracing (a
    counter in it counts traces); a known signature goes straight to its executable, a new
    shape or a changed dtype traces and compiles once; a Parameter (a Tensor subclass, under
    no_grad) and a plain Tensor of the same shape and dtype share an entry; the nested
    output structure comes back as eager returns it."""
    from minigrad.nn import Parameter

    traces = []

    def f(a, b):
        traces.append((a.shape, a.dtype.name))
        return ((a * b).sum(), [a - b]), {"twice": a * 2.0, "b": b.exp()}

    g = mf.jit(f)
    rng = np.random.default_rng(11)
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    x5, y5 = rng.standard_normal((5, 4)), rng.standard_normal((5, 4))
    calls = [(x, y, 1e-12)] * 3 + [(x5, y5, 1e-12)] * 2
    calls += [(x.astype(np.float32), y.astype(np.float32), 1e-5)] * 2 + [(x, y, 1e-12)]
    counts = []
    for a, b, tol in calls:
        ((total, (diff,)), d) = g(minigrad.tensor(a), minigrad.tensor(b))
        ((want_total, (want_diff,)), want) = f(minigrad.tensor(a), minigrad.tensor(b))
        traces.pop()  # the eager reference call above ran f's body once more
        assert list(d) == ["twice", "b"] and total.data.dtype == a.dtype
        for got, ref in ((total, want_total), (diff, want_diff), (d["twice"], want["twice"])):
            _close(got.data, ref.data, tol, f"output at {a.shape} {a.dtype}")
        _close(d["b"].data, want["b"].data, tol, f"exp at {a.shape} {a.dtype}")
        counts.append((len(traces), len(g.cache)))
    assert counts == [(1, 1)] * 3 + [(2, 2)] * 2 + [(3, 3)] * 2 + [(3, 3)]
    assert traces == [((3, 4), "float64"), ((5, 4), "float64"), ((3, 4), "float32")]
    with minigrad.no_grad():
        g(Parameter(minigrad.tensor(x)), minigrad.tensor(y))
    assert len(traces) == 3 and len(g.cache) == 3


def test_signature_visits_leaves_in_trace_order():
    """The one walk that makes the cache key must yield the arrays in the order trace makes
    them IR inputs (tree_flatten's), dict insertion order and nested lists included."""
    from minigrad.func.ir import tensor_leaves
    from minigrad.func.jit import signature

    a, b, c, d = (minigrad.tensor(np.full(i + 1, float(i))) for i in range(4))
    args = ({"z": a, "a": [b, 3.0, (c,)]}, np.arange(2.0), d, None)
    key, arrays = signature(args)
    expected = [t.data for t in tensor_leaves(args)]
    assert len(arrays) == len(expected) == 5
    assert all(x is y for x, y in zip(arrays, expected, strict=True))
    assert signature(({"a": b, "z": a}, *args[1:]))[0] != key  # key order is structure
    assert signature((args[0], args[1], d, 1))[0] != key  # so is a static leaf's value


def test_outputs_are_writable_views_and_pass_back_without_copies():
    from minigrad.func.pjrt import output_buffer

    double = mf.jit(lambda a: a * 2.0)
    x = np.random.default_rng(2).standard_normal((8, 16))
    out = double(minigrad.tensor(x))
    assert out.data.flags.writeable and output_buffer(out.data) is not None
    out.data += 1.0  # in place on the output: the buffer XLA passes back sees it
    again = double(out)
    _close(again.data, (2 * x + 1) * 2, 1e-12, "output passed back after an in-place update")
    # a view of an output is not the output: its own values, not the whole buffer, go in
    flipped = out.data[::-1]
    assert output_buffer(flipped) is None
    _close(double(minigrad.tensor(flipped)).data, (2 * x + 1)[::-1] * 2, 1e-12, "reversed view")
    sliced = out.data[:, :16]
    _close(double(minigrad.tensor(sliced)).data, (2 * x + 1) * 2, 1e-12, "full slice")


def test_inputs_of_every_layout_reach_xla_with_their_values():
    """Small inputs are staged, large ones (over STAGE_BYTES) DLPack views; non-contiguous,
    read-only and unaligned arrays are copied first. Each must arrive with its own values,
    and a staged input must not keep the previous call's values."""
    from minigrad.func import pjrt

    rng = np.random.default_rng(4)
    big = rng.standard_normal((300, 300))  # 720 KB: NumPy's page-aligned allocation
    assert big.nbytes > pjrt.STAGE_BYTES
    add = mf.jit(lambda a, b: a + b)
    frozen = rng.standard_normal((300, 300))
    frozen.flags.writeable = False
    unaligned = np.frombuffer(rng.standard_normal(300 * 300 + 1).tobytes()[8:], np.float64)
    cases = {
        "large": (big, big.T.copy()),
        "non-contiguous": (big.T, big),
        "read-only": (frozen, big),
        "unaligned": (unaligned.reshape(300, 300), big),
    }
    for name, (a, b) in cases.items():
        _close(add(minigrad.tensor(a), b).data, a + b, 1e-12, name)
    small = mf.jit(lambda a: a.sum(0))
    for i in range(3):  # the same staged slot, new values each call
        v = rng.standard_normal((4, 3))
        _close(small(minigrad.tensor(v)).data, v.sum(0), 1e-12, f"staged call {i}")
    ints = mf.jit(lambda a, m: a * m)
    mask = np.array([True, False, True])
    _close(ints(np.arange(3.0), mask).data, np.arange(3.0) * mask, 1e-12, "bool input")


def test_jit_needs_no_tensorflow_and_import_minigrad_no_jax():
    import subprocess
    import sys

    code = (
        "import sys, numpy as np, minigrad, minigrad.func as mf; "
        "before = sorted(m for m in ('jax', 'jaxlib') if m in sys.modules); "
        "mf.jit(lambda a: a * 2)(np.ones(3)); "
        "print(before, 'tensorflow' in sys.modules, 'jaxlib' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] False True"


def test_an_input_returned_as_an_output_is_its_own_array():
    """XLA copies a parameter that is also a result: the output must not alias the staging
    array (the next call overwrites it) nor the caller's array (a DLPack view)."""
    ident = mf.jit(lambda a, b: (a, b * 1.0))
    x, y = np.arange(4.0), np.arange(4.0) + 10
    first, _ = ident(minigrad.tensor(x), minigrad.tensor(y))
    ident(minigrad.tensor(y), minigrad.tensor(x))  # restages input 0 with y's values
    assert np.array_equal(first.data, x)
    big = np.random.default_rng(8).standard_normal((300, 300))
    out, _ = ident(minigrad.tensor(big), minigrad.tensor(big))
    want = big.copy()
    big[0, 0] = 1e9
    assert np.array_equal(out.data, want)


def _tanh_times_x(x):
    return (x.tanh() * x).sum()


def test_grad_of_jit_differentiates_the_program_it_wraps():
    """grad(jit(f)) equals torch's gradient: the traced input is recorded, never run as data."""
    import torch

    values = np.linspace(-1.0, 1.0, 5)
    t = torch.tensor(values, requires_grad=True)
    (torch.tanh(t) * t).sum().backward()
    got = mf.grad(mf.jit(_tanh_times_x))(minigrad.tensor(values))
    np.testing.assert_allclose(got.data, t.grad.numpy(), rtol=1e-12, atol=1e-12)


def test_vmap_and_jvp_of_jit_match_the_unjitted_function():
    values = np.random.default_rng(0).standard_normal((3, 4))
    x = minigrad.tensor(values)
    jitted = mf.jit(_tanh_times_x)
    np.testing.assert_allclose(mf.vmap(jitted)(x).data, mf.vmap(_tanh_times_x)(x).data, rtol=1e-12)
    tangent = minigrad.tensor(np.ones(4))
    _, got = mf.jvp(jitted, (x[0],), (tangent,))
    _, want = mf.jvp(_tanh_times_x, (x[0],), (tangent,))
    np.testing.assert_allclose(got.data, want.data, rtol=1e-12)


def test_backward_through_jit_on_a_tensor_that_requires_grad():
    """The tape sees jit's operations when an input requires grad (grad mode on)."""
    import torch

    values = np.linspace(-2.0, 2.0, 6)
    x = minigrad.tensor(values, requires_grad=True)
    mf.jit(_tanh_times_x)(x).backward()
    t = torch.tensor(values, requires_grad=True)
    (torch.tanh(t) * t).sum().backward()
    np.testing.assert_allclose(x.grad.data, t.grad.numpy(), rtol=1e-12, atol=1e-12)
    with minigrad.no_grad():  # no graph wanted: the compiled program runs
        f = mf.jit(_tanh_times_x)
        f(x)
        assert len(f.cache) == 1
