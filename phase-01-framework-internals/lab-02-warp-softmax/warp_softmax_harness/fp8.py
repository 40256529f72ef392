"""The FP8 reference and its comparison rule, shared by the tests, `check` and gpu_check.sh.

The reference for an FP8 result is ``F.<op>(x.float(), dim).to(fp8)``. warp_softmax computes
the same float32 value with its own exp and its own summation order, so its float32 value can
differ from F's by a few float32 roundings; where F's value lies that close to the midpoint
between two FP8 neighbours, the two round to different neighbours. ``compare_fp8`` therefore
asks for bit equality everywhere except elements that are exactly one FP8 step apart AND whose
midpoint lies within the float32 tolerance the lab's other tests accept between warp_softmax
and F (``FLOAT32_ATOL`` + ``FLOAT32_RTOL`` * |midpoint|) of F's float32 value. Those it counts
and returns, so a test can say how many there were.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

FP8_TYPES = (torch.float8_e4m3fn, torch.float8_e5m2)
# Between warp_softmax and F in float32: 1e-6 absolute (the spec's), 2e-6 relative (log-
# probabilities of tens, where float32's own resolution is ~1e-6).
FLOAT32_ATOL, FLOAT32_RTOL = 1e-6, 2e-6


@dataclass
class Fp8Comparison:
    elements: int
    equal: int
    one_ulp_at_a_tie: int  # one FP8 step apart, F's float32 value at that step's midpoint


def fp8_reference_float32(x: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    """F.softmax / F.log_softmax of x.float(): what torch rounds to FP8."""
    return (F.log_softmax if log else F.softmax)(x.float(), dim)


def compare_fp8(ours: torch.Tensor, x: torch.Tensor, dim: int, log: bool) -> Fp8Comparison:
    """Check ``ours`` (FP8) against ``fp8_reference_float32(x, dim, log).to(ours.dtype)``;
    raise AssertionError naming the first element that is neither bit-equal nor a one-step
    difference at a float32 rounding tie (see the module docstring)."""
    reference32 = fp8_reference_float32(x, dim, log)
    reference = reference32.to(ours.dtype)
    if ours.dtype != reference.dtype or ours.shape != reference.shape:
        raise AssertionError(f"dtype/shape {ours.dtype} {ours.shape} vs {reference.dtype}")
    a = ours.contiguous().view(torch.uint8).to(torch.int32)
    b = reference.contiguous().view(torch.uint8).to(torch.int32)
    both_nan = ours.float().isnan() & reference.float().isnan()
    differ = (a != b) & ~both_nan
    if not bool(differ.any()):
        return Fp8Comparison(a.numel(), a.numel(), 0)
    one_step = ((a & 0x80) == (b & 0x80)) & ((a - b).abs() == 1)
    midpoint = (ours.double() + reference.double()) / 2
    at_tie = (reference32.double() - midpoint).abs() <= FLOAT32_ATOL + FLOAT32_RTOL * midpoint.abs()
    bad = differ & ~(one_step & at_tie)
    if bool(bad.any()):
        i = int(bad.flatten().nonzero()[0])
        raise AssertionError(
            f"{int(bad.sum())} FP8 element(s) differ beyond a float32 rounding tie; first at "
            f"flat index {i}: ours {float(ours.flatten()[i].float())}, reference "
            f"{float(reference.flatten()[i].float())} (F's float32 value "
            f"{float(reference32.flatten()[i])})"
        )
    ties = int(differ.sum())
    return Fp8Comparison(a.numel(), a.numel() - ties, ties)
