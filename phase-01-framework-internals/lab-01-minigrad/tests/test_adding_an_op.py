"""The README's "adding an op" recipe, followed: a new primitive defined in one place (one class
here, as it would be in its family module) works at once in eager autograd (first and second
order), vmap, jvp, grad, and jit of grad, against torch (float64).

Two throwaway ops, removed again after the module's tests (rules.unregister), so the other
tests' "every primitive" checks do not see them: softplus (a unary map: its derivative once)
and hypot (a broadcasting binary op: one partial per input).
"""

from __future__ import annotations

import minigrad
import minigrad.func as mf
import numpy as np
import pytest
import torch
import torch.func as tf
from minigrad import rules
from minigrad.ops.array_or_tensor import exp
from minigrad.ops.dtypes import cast_to_torch_result
from minigrad.ops.elementwise import Elementwise, UnaryMap
from minigrad_harness.testing import relative_error

TOL = 1e-10


# ----------------------------------------------------------------------------- the recipe
def define_ops() -> dict[str, type]:
    """The recipe's two classes (defined when a test asks, so that the other test modules'
    "every primitive" checks never see them)."""

    class Softplus(UnaryMap):
        """log(1 + e^a). Its derivative, sigmoid(a) = 1 - e^(-out), written once."""

        saves = "output"
        compute = staticmethod(lambda a: np.logaddexp(0.0, a))

        @staticmethod
        def chain(g, a, out):
            return g * (1 - exp(-out))

        @staticmethod
        def decomposition(a):  # the lowering for jit: the op in other primitives
            return ((-a.abs()).exp() + 1).log() + a.relu()

    class Hypot(Elementwise):
        """sqrt(a² + b²) with broadcasting; ∂/∂a = a / out, ∂/∂b = b / out."""

        partials = (lambda g, a, b, out: g * a / out, lambda g, a, b, out: g * b / out)
        saves = (0, 1, "out")

        @staticmethod
        def compute(ctx, a, b):
            return cast_to_torch_result(ctx, np.hypot(a, b), a, b)

        @staticmethod
        def decomposition(a, b):
            return (a * a + b * b).sqrt()

    return {"softplus": Softplus, "hypot": Hypot}


# ----------------------------------------------------------------------------- the checks
@pytest.fixture(scope="module")
def new_ops():
    ops = define_ops()
    yield ops
    for prim in ops.values():
        rules.unregister(prim)


# (name, the expression with the new op, torch's); ``op`` is the new primitive
CASES = [
    ("softplus", lambda op, x, y: op.apply(x) * y, lambda x, y: torch_softplus(x) * y),
    ("hypot", lambda op, x, y: op.apply(x, y), lambda x, y: torch.hypot(x, y)),
]
torch_softplus = torch.nn.functional.softplus


def _ours(case, new_ops):
    name, expr, _ = case
    op = new_ops[name]
    return lambda x, y: expr(op, x, y)


SHAPES = [(3, 4), (4,)]  # y broadcasts against x


def _inputs(seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s) for s in SHAPES]


def test_each_new_op_is_a_registered_primitive_with_every_rule(new_ops):
    for prim in new_ops.values():
        assert rules.PRIMITIVES[prim.__name__] is prim
        for kind in ("vmap", "jvp", "lower"):
            assert prim in rules.RULES[kind], (prim.__name__, kind)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_eager_grad_and_second_order_match_torch(case, new_ops):
    ours, theirs = _ours(case, new_ops), case[2]
    arrays = _inputs(0)
    xs = [minigrad.Tensor(a, requires_grad=True) for a in arrays]
    ts = [torch.tensor(a, requires_grad=True) for a in arrays]
    out, ref = ours(*xs), theirs(*ts)
    assert relative_error(out.data, ref.detach().numpy()) < TOL
    up = np.random.default_rng(1).standard_normal(out.shape)
    out.backward(minigrad.tensor(up))
    ref.backward(torch.from_numpy(up))
    for m, t in zip(xs, ts, strict=True):
        assert relative_error(m.grad.data, t.grad.numpy()) < TOL
    small = [minigrad.Tensor(a, requires_grad=True) for a in _inputs(2)]
    assert minigrad.gradcheck(ours, small)
    assert minigrad.gradgradcheck(ours, small)


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_vmap_jvp_and_per_example_grad_match_torch_func(case, new_ops):
    ours, theirs = _ours(case, new_ops), case[2]
    x, y = _inputs(3)
    batch = np.random.default_rng(4).standard_normal((5, *SHAPES[0]))
    got = mf.vmap(ours, in_dims=(0, None))(minigrad.tensor(batch), minigrad.tensor(y))
    want = tf.vmap(theirs, in_dims=(0, None))(torch.from_numpy(batch), torch.from_numpy(y))
    assert relative_error(got.data, want.numpy()) < TOL

    tx, ty = _inputs(5)
    _, t_ours = mf.jvp(ours, (minigrad.tensor(x), minigrad.tensor(y)),
                       (minigrad.tensor(tx), minigrad.tensor(ty)))  # fmt: skip
    _, t_theirs = tf.jvp(theirs, (torch.from_numpy(x), torch.from_numpy(y)),
                         (torch.from_numpy(tx), torch.from_numpy(ty)))  # fmt: skip
    assert relative_error(t_ours.data, t_theirs.numpy()) < TOL

    g_ours = mf.vmap(mf.grad(lambda a, b: ours(a, b).sum()), in_dims=(0, None))(
        minigrad.tensor(batch), minigrad.tensor(y)
    )
    g_theirs = tf.vmap(tf.grad(lambda a, b: theirs(a, b).sum()), in_dims=(0, None))(
        torch.from_numpy(batch), torch.from_numpy(y)
    )
    assert relative_error(g_ours.data, g_theirs.numpy()) < TOL


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_jit_of_grad_matches_torch(case, new_ops):
    ours, theirs = _ours(case, new_ops), case[2]
    x, y = _inputs(6)
    step = mf.jit(mf.grad_and_value(lambda a, b: ours(a, b).sum(), argnums=(0, 1)))
    (gx, gy), value = step(minigrad.tensor(x), minigrad.tensor(y))
    tx, ty = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
    ref = theirs(tx, ty).sum()
    ref.backward()
    assert relative_error(value.data, ref.detach().numpy()) < 1e-12
    assert relative_error(gx.data, tx.grad.numpy()) < 1e-12
    assert relative_error(gy.data, ty.grad.numpy()) < 1e-12
    (compiled,) = step.cache.values()
    assert new_ops[case[0]] in {e.prim for e in compiled.ir.eqns}  # one equation, lowered


def test_import_minigrad_loads_no_lowering_code():
    """An op declares its lowering (a Decomposition) without the emitter: plain ``import
    minigrad`` loads neither the emitter nor the lowering rules; minigrad.func.stablehlo does."""
    import subprocess
    import sys

    names = ("minigrad.func.emitter", "minigrad.func.stablehlo", "minigrad.ops.lowering")
    code = (
        f"import sys, minigrad; before = [m for m in {names!r} if m in sys.modules]; "
        f"import minigrad.func.stablehlo; after = [m for m in {names!r} if m in sys.modules]; "
        "print(before, len(after))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] 3"
