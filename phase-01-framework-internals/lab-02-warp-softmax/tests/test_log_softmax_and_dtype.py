"""log_softmax on the same kernels and dispatch keys as softmax, and dtype= on both:
values, gradients (double backward too), opcheck, autocast, vmap, torch.compile, bad input."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import warp_softmax
from warp_softmax_harness.compare import log_softmax_reference
from warp_softmax_harness.scenarios import ROW_LENGTHS, devices, make_input

DEVICES = devices()
FLOATS = [torch.float32, torch.float64, torch.bfloat16, torch.float16]
# (ours, torch's) for both ops
PAIRS = [(warp_softmax.softmax, F.softmax), (warp_softmax.log_softmax, F.log_softmax)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("row_length", ROW_LENGTHS)
@pytest.mark.parametrize("layout", ["contiguous", "transposed", "strided"])
@pytest.mark.parametrize("dim", [-1, 0, 1])
def test_log_softmax_float32_matches_f(device, row_length, layout, dim):
    x = make_input((max(2, 8192 // row_length), 3, row_length), layout, device, scale=3.0)
    ours, theirs = warp_softmax.log_softmax(x, dim), F.log_softmax(x, dim)
    assert ours.stride() == theirs.stride()
    # Log-probabilities reach tens, where one float32 ulp is ~1e-6: both ops are a couple of
    # ulps from the float64 value, not always in the same direction. Against F: torch.testing's
    # float32 defaults; against float64: 1e-6 + 2e-6 relative.
    torch.testing.assert_close(ours, theirs)
    exact = F.log_softmax(x.double(), dim)
    torch.testing.assert_close(ours.double(), exact, atol=1e-6, rtol=2e-6)


def assert_no_further_from_exact(ours, theirs, x, dim):
    """Ours is no further from the float64 log_softmax than torch's result (largest errors)."""
    exact = F.log_softmax(x.double(), dim)
    ours_error = float((ours.double() - exact).abs().max())
    theirs_error = float((theirs.double() - exact).abs().max())
    assert ours_error <= theirs_error, (ours_error, theirs_error)


def test_torch_16_bit_cpu_log_softmax_is_not_correctly_rounded():
    # Why log_softmax_reference exists: the sample where PyTorch's OpInfo test first showed it.
    x = torch.tensor([[1.8223, -3.5215, -4.4141, 2.3281, 8.3984]], dtype=torch.float16)
    exact = F.log_softmax(x.double(), 1)
    assert abs(float(F.log_softmax(x, 1)[0, 4]) - float(exact[0, 4])) > 1.5e-4  # torch: -3.90e-3
    ours = warp_softmax.log_softmax(x, 1)
    assert torch.equal(ours, exact.half())  # correctly rounded: -3.706e-3


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16, torch.float16])
def test_log_softmax_other_dtypes_match_f(device, dtype):
    for n in ROW_LENGTHS:
        x = make_input((max(2, 4096 // n), n), "contiguous", device, dtype, 3.0)
        for dim in (-1, 0):
            ours = warp_softmax.log_softmax(x, dim)
            reference, is_f = log_softmax_reference(x, dim)
            torch.testing.assert_close(ours, reference)
            if not is_f:  # torch's 16-bit CPU kernel: ours is never further from float64
                assert_no_further_from_exact(ours, F.log_softmax(x, dim), x, dim)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("source", FLOATS)
@pytest.mark.parametrize("target", FLOATS)
def test_dtype_equals_f_softmax_with_dtype(device, source, target):
    # Every pair, widening (fused in the kernel) and narrowing (input rounded first, as F does).
    for n in (7, 1024, 4100):
        x = make_input((8, n), "contiguous", device, source, 3.0)
        for ours_fn, ref in PAIRS:
            for dim in (-1, 0):
                ours, theirs = ours_fn(x, dim, dtype=target), ref(x, dim, dtype=target)
                assert ours.dtype == theirs.dtype == target
                if ref is F.log_softmax:
                    theirs = log_softmax_reference(x, dim, target)[0]
                strict = ref is F.softmax and target == torch.float32
                tol = {"atol": 1e-6, "rtol": 0.0} if strict else {}
                torch.testing.assert_close(ours, theirs, **tol)


def test_integer_input_with_dtype_is_cast_like_f_softmax():
    x = torch.randint(-5, 5, (4, 9))
    for ours_fn, ref in PAIRS:
        for inputs, dim, dtype in ((x, 1, torch.float64), (x.bool(), 0, torch.float32)):
            torch.testing.assert_close(ours_fn(inputs, dim, dtype), ref(inputs, dim, dtype=dtype))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("shape,dim", [((3, 5), -1), ((2, 3, 4), 1), ((4, 3), 0), ((), 0)])
def test_log_softmax_gradcheck_and_gradgradcheck(device, shape, dim):
    x = torch.randn(shape, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: warp_softmax.log_softmax(t, dim), (x,))
    assert torch.autograd.gradgradcheck(lambda t: warp_softmax.log_softmax(t, dim), (x,))


@pytest.mark.parametrize("device", DEVICES)
def test_log_softmax_backward_is_differentiable(device):
    y = F.log_softmax(torch.randn(3, 6, dtype=torch.float64, device=device), -1).requires_grad_()
    g = torch.randn(3, 6, dtype=torch.float64, device=device, requires_grad=True)
    fn = warp_softmax.log_softmax_backward
    assert torch.autograd.gradcheck(lambda a, b: fn(a, b, -1), (g, y))
    assert torch.autograd.gradgradcheck(lambda a, b: fn(a, b, -1), (g, y))


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "source,target",
    [
        (torch.float32, torch.float64),
        (torch.bfloat16, torch.float32),
        (torch.float64, torch.float32),
    ],
)
def test_gradient_through_dtype_has_the_input_dtype(device, source, target):
    x = make_input((4, 33), "contiguous", device, source).requires_grad_()
    g = torch.randn(4, 33).to(device=device, dtype=target)
    for ours_fn, ref in PAIRS:
        (ours,) = torch.autograd.grad(ours_fn(x, -1, dtype=target), x, g)
        (theirs,) = torch.autograd.grad(ref(x, -1, dtype=target), x, g)
        assert ours.dtype == theirs.dtype == source
        # computed in `target` by both (then cast to `source`): judged at target's precision
        torch.testing.assert_close(ours.to(target), theirs.to(target))


@pytest.mark.parametrize("device", DEVICES)
def test_opcheck_log_softmax_and_dtype_overloads(device):
    x = torch.randn(4, 8, device=device, requires_grad=True)
    cases = [
        (torch.ops.warp_softmax.log_softmax.default, (x, -1)),
        (
            torch.ops.warp_softmax.log_softmax.default,
            (make_input((3, 5, 6), "transposed", device).requires_grad_(), 1),
        ),  # fmt: skip
        (torch.ops.warp_softmax.log_softmax.default, (torch.randn((), device=device), 0)),
        (
            torch.ops.warp_softmax.softmax.default,
            (x.detach().bfloat16().requires_grad_(), 0, torch.float32),
        ),  # fmt: skip
        (torch.ops.warp_softmax.log_softmax.default, (x, -1, torch.float64)),
        (
            torch.ops.warp_softmax.log_softmax_backward.default,
            (
                torch.randn(4, 9, device=device, requires_grad=True),
                F.log_softmax(torch.randn(4, 9, device=device), -1).requires_grad_(),
                -1,
            ),
        ),  # fmt: skip
    ]
    for op, args in cases:
        result = torch.library.opcheck(op, args)
        assert set(result.values()) == {"SUCCESS"}, (op, result)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_log_softmax_autocast_matches_f(device, dtype):
    autocast_dtype = torch.bfloat16 if device == "cpu" else torch.float16
    x = torch.randn(4, 16, device=device, dtype=dtype, requires_grad=True)
    with torch.autocast(device, dtype=autocast_dtype):
        for ours, theirs in (
            (warp_softmax.log_softmax(x, -1), F.log_softmax(x, -1)),
            (
                warp_softmax.softmax(x, -1, dtype=torch.float64),
                F.softmax(x, -1, dtype=torch.float64),
            ),  # fmt: skip
        ):
            assert ours.dtype == theirs.dtype, (ours.dtype, theirs.dtype)
            torch.testing.assert_close(ours, theirs)
    warp_softmax.log_softmax(x, -1).sum().backward()
    assert x.grad is not None and x.grad.dtype == x.dtype


def test_vmap_of_log_softmax_and_dtype():
    x = torch.randn(3, 4, 5)
    for in_dims, dim in [(0, -1), (1, 0), (2, 1)]:
        for dtype in (None, torch.float64):

            def ours_fn(t, d=dim, dt=dtype):
                return warp_softmax.log_softmax(t, d, dt)

            def theirs_fn(t, d=dim, dt=dtype):
                return F.log_softmax(t, d, dtype=dt)

            ours = torch.func.vmap(ours_fn, in_dims=in_dims)(x)
            theirs = torch.func.vmap(theirs_fn, in_dims=in_dims)(x)
            torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=2e-6)
    y = F.log_softmax(x, -1)
    g = torch.randn(4, 5)
    ours = torch.func.vmap(lambda yy: warp_softmax.log_softmax_backward(g, yy, -1))(y)
    theirs = torch.stack([torch._log_softmax_backward_data(g, yy, -1, yy.dtype) for yy in y])
    torch.testing.assert_close(ours, theirs)


def test_torch_compile_log_softmax_with_dtype():
    def model(x):
        return (
            warp_softmax.log_softmax(x, -1, dtype=torch.float32).sum()
            + warp_softmax.softmax(x, 0, dtype=torch.float32).max()
        )

    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    x = torch.randn(8, 16, dtype=torch.bfloat16, requires_grad=True)
    (grad_c,) = torch.autograd.grad(compiled(x), x)
    (grad_e,) = torch.autograd.grad(model(x), x)
    torch.testing.assert_close(grad_c, grad_e)
