"""Comparison helpers shared by test_lab.py, bench.py and the demo section: one function runs
warp_softmax and the reference (F.softmax, or an exact float64 softmax) on the same input and
checks values, dtype, shape and strides together."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import softmax


def exact_softmax(x: torch.Tensor, dim: int) -> torch.Tensor:
    """Softmax computed in float64 (the 'true' answer float32 results are judged against)."""
    return F.softmax(x.double(), dim)


def compare_with_f_softmax(
    x: torch.Tensor,
    dim: int,
    atol: float | None = None,
    rtol: float | None = None,
    reference: str = "f_softmax",
) -> float:
    """Run ``warp_softmax.softmax(x, dim)`` and check it against ``F.softmax(x, dim)``
    (``reference="f_softmax"``) or against the float64 softmax (``reference="exact"``).

    Dtype, shape and strides must equal F.softmax's; values must agree within ``atol`` /
    ``rtol`` (torch.testing defaults for the dtype when None; NaN must match NaN). Returns the
    largest absolute difference, so callers can report it.
    """
    if reference not in ("f_softmax", "exact"):
        raise ValueError(f"reference must be 'f_softmax' or 'exact', got {reference!r}")
    ours = softmax(x, dim)
    theirs = F.softmax(x, dim)
    if ours.dtype != theirs.dtype or ours.shape != theirs.shape:
        raise AssertionError(
            f"dtype/shape differ: warp_softmax {ours.dtype} {tuple(ours.shape)}, "
            f"F.softmax {theirs.dtype} {tuple(theirs.shape)}"
        )
    if ours.numel() > 0 and ours.stride() != theirs.stride():
        raise AssertionError(
            f"strides differ: warp_softmax {ours.stride()}, F.softmax {theirs.stride()}"
        )
    expected = theirs if reference == "f_softmax" else exact_softmax(x, dim)
    torch.testing.assert_close(
        ours.to(expected.dtype), expected, atol=atol, rtol=rtol, equal_nan=True
    )
    if ours.numel() == 0:
        return 0.0
    diff = (ours.double() - expected.double()).abs()
    finite = ~torch.isnan(diff)
    return float(diff[finite].max()) if bool(finite.any()) else 0.0
