"""PyTorch's own per-op samples (the OpInfo database, as PyTorch's test suite uses it): every
sample of `softmax` and `log_softmax`, both variants (plain and `with_dtype`), in float64,
float32, float16 and bfloat16, equals F.softmax / F.log_softmax; gradients too, in float64.
One exception, named: a bfloat16 / float16 log_softmax result on the CPU is judged against
F.log_softmax in float32 rounded once, because torch's own 16-bit CPU kernel is not correctly
rounded there (compare.log_softmax_reference; test_log_softmax_and_dtype pins it)."""

from __future__ import annotations

import pytest
import torch
import warp_softmax
from torch.testing._internal.common_methods_invocations import op_db
from warp_softmax_harness.compare import log_softmax_reference
from warp_softmax_harness.scenarios import devices

OURS = {"softmax": warp_softmax.softmax, "log_softmax": warp_softmax.log_softmax}
OPINFOS = [op for op in op_db if op.name in OURS]
DTYPES = [torch.float64, torch.float32, torch.float16, torch.bfloat16]


def opinfo_id(op) -> str:
    return f"{op.name}-{op.variant_test_name or 'plain'}"


def test_both_variants_of_both_ops_are_in_the_database():
    assert sorted(map(opinfo_id, OPINFOS)) == [
        "log_softmax-plain",
        "log_softmax-with_dtype",
        "softmax-plain",
        "softmax-with_dtype",
    ]


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op", OPINFOS, ids=opinfo_id)
def test_every_sample_equals_torch(device, op):
    ours_fn = OURS[op.name]
    checked = rounded_once = 0
    for dtype in DTYPES:
        for sample in op.sample_inputs(device, dtype, requires_grad=False):
            ours = ours_fn(sample.input, *sample.args, **sample.kwargs)
            theirs = op(sample.input, *sample.args, **sample.kwargs)
            assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
            if op.name == "log_softmax":  # torch's 16-bit CPU log_softmax: see the reference
                theirs, is_f = log_softmax_reference(sample.input, *sample.args, **sample.kwargs)
                rounded_once += not is_f
            # float32 softmax: the spec's 1e-6; everything else torch.testing's per-dtype default
            strict = op.name == "softmax" and theirs.dtype == torch.float32
            tol = {"atol": 1e-6, "rtol": 0.0} if strict else {}
            torch.testing.assert_close(ours, theirs, **tol, msg=lambda m, s=sample: f"{s}: {m}")
            checked += 1
    print(f"{opinfo_id(op)}: {checked} samples, {rounded_once} judged by the once-rounded float32")
    assert checked >= 4 * 7, checked  # 7 samples per dtype today


@pytest.mark.parametrize("device", devices())
@pytest.mark.parametrize("op", OPINFOS, ids=opinfo_id)
def test_every_sample_gradient_equals_torch_in_float64(device, op):
    ours_fn = OURS[op.name]
    generator = torch.Generator().manual_seed(0)
    for sample in op.sample_inputs(device, torch.float64, requires_grad=True):
        x = sample.input
        ours = ours_fn(x, *sample.args, **sample.kwargs)
        theirs = op(x, *sample.args, **sample.kwargs)
        if ours.numel() == 0:
            continue
        grad = torch.randn(ours.shape, generator=generator, dtype=ours.dtype).to(device)
        (ours_grad,) = torch.autograd.grad(ours, x, grad)
        (theirs_grad,) = torch.autograd.grad(theirs, x, grad)
        torch.testing.assert_close(ours_grad, theirs_grad, msg=lambda m, s=sample: f"{s}: {m}")
