"""The FP8 paths: float8_e4m3fn / float8_e5m2 inputs widened in registers, and
dtype=torch.float8_e4m3fn outputs narrowed in registers, against F.softmax(x.float(), dim)
rounded by torch (warp_softmax_harness/fp8.py says when one FP8 ulp is allowed: only at a
rounding tie, counted and printed)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import warp_softmax
from warp_softmax_harness.compare import log_softmax_reference
from warp_softmax_harness.fp8 import FP8_TYPES, compare_fp8
from warp_softmax_harness.scenarios import devices

DEVICES = devices()
OPS = [(warp_softmax.softmax, False), (warp_softmax.log_softmax, True)]
# Row lengths across the kernels' vector widths and tails (16 lanes, 64-element steps).
FP8_ROW_LENGTHS = [1, 7, 16, 33, 1000, 4096, 4101]


def logits(rows: int, n: int, device: str, scale: float = 3.0, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, n, generator=g) * scale).to(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fp8", FP8_TYPES)
@pytest.mark.parametrize("op,log", OPS)
def test_fp8_in_fp8_out(device, fp8, op, log):
    ties = 0
    for n in FP8_ROW_LENGTHS:
        x = logits(max(2, 4096 // n), n, device).to(fp8)
        for dim in (-1, 0):
            ours = op(x, dim)
            assert ours.dtype == fp8
            ties += compare_fp8(ours, x, dim, log).one_ulp_at_a_tie
    print(f"{fp8} {op.__name__}: {ties} element(s) one FP8 ulp apart at a rounding tie")


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fp8", FP8_TYPES)
@pytest.mark.parametrize("op,log", OPS)
def test_fp8_in_wider_out_equals_f_on_the_float_values(device, fp8, op, log):
    reference = F.log_softmax if log else F.softmax
    for n in FP8_ROW_LENGTHS:
        x = logits(max(2, 4096 // n), n, device).to(fp8)
        for out in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
            ours = op(x, -1, dtype=out)
            # fp8 values are exact in every wider type
            theirs = log_softmax_reference(x.to(out), -1)[0] if log else reference(x.to(out), -1)
            assert ours.dtype == out
            tol = {"atol": 1e-6, "rtol": 0.0} if out == torch.float32 and not log else {}
            torch.testing.assert_close(ours, theirs, **tol)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("source", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("op,log", OPS)
def test_dtype_float8_e4m3fn_out(device, source, op, log):
    ties = 0
    for n in FP8_ROW_LENGTHS:
        x = logits(max(2, 4096 // n), n, device, scale=4.0).to(source)
        for dim in (-1, 0):
            ours = op(x, dim, dtype=torch.float8_e4m3fn)
            ties += compare_fp8(ours, x, dim, log).one_ulp_at_a_tie
    print(f"{source} -> float8_e4m3fn {op.__name__}: {ties} tie(s) one ulp apart")


@pytest.mark.parametrize("device", DEVICES)
def test_fp8_rounding_covers_denormals_nan_and_saturation(device):
    # Probabilities from 1 down to below the smallest e4m3 denormal (2^-9), so the narrowing
    # sees normals, denormals, the round-to-zero edge and exact ties; plus a NaN row.
    x = torch.cat([torch.linspace(-12.0, 0.0, 997), torch.tensor([0.0, -3.0, float("-inf")])])
    x = torch.stack([x, x.flip(0), x * 0.5]).to(device)
    x[2, 5] = float("nan")
    for log in (False, True):
        op = warp_softmax.log_softmax if log else warp_softmax.softmax
        result = compare_fp8(op(x, -1, dtype=torch.float8_e4m3fn), x, -1, log)
        assert result.equal >= result.elements - 4, result
    out = warp_softmax.softmax(x, -1, dtype=torch.float8_e4m3fn)
    assert out[2].float().isnan().all()  # NaN in, NaN (0x7f) out
    assert (out[0].view(torch.uint8) < 0x7F).all()
    # log_softmax of a huge spread saturates to -448 like torch's conversion (no inf in e4m3fn)
    wide = torch.tensor([[0.0, -1000.0, -460.0, -440.0]], device=device)
    compare_fp8(warp_softmax.log_softmax(wide, -1, dtype=torch.float8_e4m3fn), wide, -1, True)


@pytest.mark.parametrize("device", DEVICES)
def test_fp8_backward_runs_in_float32(device):
    x = logits(4, 64, device).to(torch.float8_e4m3fn).float().requires_grad_()
    y = warp_softmax.softmax(x, -1, dtype=torch.float8_e4m3fn)
    (grad,) = torch.autograd.grad(y.float().sum(), x)  # the FP8 output's gradient, in float32
    assert grad.dtype == torch.float32 and grad.isfinite().all()
    expected = torch.ops.aten._softmax_backward_data(
        torch.ones(4, 64, device=device), y.float(), -1, torch.float32
    )
    torch.testing.assert_close(grad, expected)


def test_opcheck_fp8_overloads():
    # FP8 *outputs* pass every opcheck utility. With FP8 *inputs*, torch's own test_schema
    # cannot run (its SchemaCheckMode multiplies the inputs: "mul_cpu_reduced_float" not
    # implemented for 'Float8_e4m3fn'), so those get the other three utilities; the schema
    # (aliasing, mutation) is the same overload and is checked on the float32 cases.
    ops = torch.ops.warp_softmax
    x = logits(3, 40, "cpu")
    every_utility = (
        "test_schema",
        "test_autograd_registration",
        "test_faketensor",
        "test_aot_dispatch_dynamic",
    )
    cases = [
        (ops.softmax.default, (x, -1, torch.float8_e4m3fn), every_utility),
        (ops.log_softmax.default, (x.bfloat16(), 0, torch.float8_e4m3fn), every_utility),
    ]
    for fp8 in FP8_TYPES:
        for op in (ops.softmax.default, ops.log_softmax.default):
            cases.append((op, (x.to(fp8), -1), every_utility[1:]))
            cases.append((op, (x.to(fp8), 0, torch.float32), every_utility[1:]))
    for op, args, utilities in cases:
        result = torch.library.opcheck(op, args, test_utils=utilities)
        assert set(result) == set(utilities) and set(result.values()) == {"SUCCESS"}, (op, result)
