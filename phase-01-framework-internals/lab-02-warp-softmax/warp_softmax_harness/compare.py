"""Comparison helpers shared by the tests, `python -m warp_softmax check`, gpu_check.sh and the
demo section: one function runs warp_softmax and the reference (F.softmax, or an exact float64
softmax) on the same input and checks values, dtype, shape and strides together."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from warp_softmax import log_softmax, log_softmax_backward, softmax


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


# Row lengths on both sides of every kernel-selection boundary: CUDA register kernels hold
# 32·2^k elements (scalar loads up to 1024, 16-byte packets up to 4096; backward up to 2048),
# longer rows loop in steps of 4 packets per lane; the CPU kernels unroll by 4 vectors.
KERNEL_PATH_ROW_LENGTHS = (1, 3, 31, 32, 33, 100, 1000, 1024, 1025, 2047, 2048, 2049, 4096,
                           4097, 4100, 8192, 12345, 32768)  # fmt: skip


def check_kernel_paths(
    device: str,
    dtypes: tuple[torch.dtype, ...] | None = None,
    row_lengths: tuple[int, ...] = KERNEL_PATH_ROW_LENGTHS,
) -> int:
    """Forward and backward against F.softmax / ATen's backward for every row length in
    ``row_lengths`` (default KERNEL_PATH_ROW_LENGTHS), each dtype, on rows that start 16-byte
    aligned and on rows one element off (a storage offset), with -inf and NaN planted in some
    rows. Raises AssertionError on the first mismatch; returns the number of cases checked.

    Small on purpose (a few rows per length) so that it also runs under compute-sanitizer."""
    dtypes = dtypes or (torch.float32, torch.float64, torch.bfloat16, torch.float16)
    generator = torch.Generator().manual_seed(0)
    cases = 0
    for n in row_lengths:
        for dtype in dtypes:
            for offset in (0, 1):
                rows = 3
                storage = torch.randn(rows * n + offset, generator=generator)
                storage[offset + n // 2] = float("-inf")  # row 0: one -inf
                if rows * n > 2 * n:  # row 2: a NaN at its last element
                    storage[offset + 3 * n - 1] = float("nan")
                x = storage.to(device=device, dtype=dtype)[offset:].view(rows, n)
                tol = {"atol": 1e-6, "rtol": 0.0} if dtype == torch.float32 else {}
                try:
                    compare_with_f_softmax(x, -1, **tol)
                    g = torch.randn(rows, n, generator=generator).to(device=device, dtype=dtype)
                    y = F.softmax(x, -1)
                    g_storage = torch.empty(rows * n + offset, device=device, dtype=dtype)
                    g_off = g_storage[offset:].view(rows, n).copy_(g)
                    dx = torch.ops.warp_softmax.softmax_backward(g_off, y, -1)
                    ref = torch.ops.aten._softmax_backward_data(g_off, y, -1, dtype)
                    if dtype == torch.float32:
                        torch.testing.assert_close(dx, ref, atol=1e-6, rtol=1e-5, equal_nan=True)
                    else:  # summed in another order: one rounding step of the dtype
                        torch.testing.assert_close(dx, ref, equal_nan=True)
                except AssertionError as e:
                    raise AssertionError(
                        f"{device} n={n} {dtype} storage offset {offset}: {e}"
                    ) from None
                cases += 1
    return cases


# Row lengths for the converting kernels (dtype=, FP8, log_softmax): below, at and past one
# vector and one packet, an odd tail, a long row.
CONVERTING_ROW_LENGTHS = (1, 7, 16, 33, 1000, 4101)


def check_converting_paths(
    device: str, row_lengths: tuple[int, ...] = CONVERTING_ROW_LENGTHS
) -> int:
    """log_softmax forward and backward in every floating dtype, dtype= widening pairs, FP8 in
    and FP8 out, each against torch (FP8 through fp8.compare_fp8), rows of each length in
    ``row_lengths`` aligned and one element off. Raises AssertionError on the first mismatch;
    returns the number of cases."""
    from .fp8 import FP8_TYPES, compare_fp8

    generator = torch.Generator().manual_seed(0)
    cases = 0
    for n in row_lengths:
        for offset in (0, 1):
            storage = torch.randn(3 * n + offset, generator=generator) * 3
            x = storage[offset:].view(3, n).to(device)
            try:
                cases += _check_log_softmax(x, generator)
                for source, target in _WIDENING_PAIRS:
                    xs = x.to(source)
                    ours = softmax(xs, -1, dtype=target)
                    theirs = F.softmax(xs, -1, dtype=target)
                    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0.0)
                    ours = log_softmax(xs, -1, dtype=target)
                    theirs = F.log_softmax(xs, -1, dtype=target)
                    torch.testing.assert_close(ours, theirs)
                    cases += 2
                for fp8 in FP8_TYPES:
                    for log, op in ((False, softmax), (True, log_softmax)):
                        compare_fp8(op(x.to(fp8), -1), x.to(fp8), -1, log)
                        compare_fp8(op(x, -1, dtype=torch.float8_e4m3fn), x, -1, log)
                        cases += 2
            except AssertionError as e:
                raise AssertionError(f"{device} n={n} storage offset {offset}: {e}") from None
    return cases


_WIDENING_PAIRS = (
    (torch.bfloat16, torch.float32),
    (torch.float16, torch.float32),
    (torch.float32, torch.float64),
)


def _check_log_softmax(x: torch.Tensor, generator: torch.Generator) -> int:
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
        xd = x.to(dtype)
        torch.testing.assert_close(log_softmax(xd, -1), log_softmax_reference(xd, -1)[0])
        y = F.log_softmax(xd, -1)
        g = torch.randn(x.shape, generator=generator).to(device=x.device, dtype=dtype)
        ours = log_softmax_backward(g, y, -1)
        theirs = torch.ops.aten._log_softmax_backward_data(g, y, -1, dtype)
        torch.testing.assert_close(ours, theirs)
    return 4


def log_softmax_reference(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None):
    """F.log_softmax(x, dim, dtype=dtype), except where torch's CPU kernel is not correctly
    rounded: for a bfloat16 / float16 result it keeps the row's sum in that 16-bit type before
    the log, so log-probabilities near 0 come out up to ~5% off (measured: -3.90e-3 for an exact
    -3.706e-3 in float16), unlike its CUDA kernel. There the reference is the float32
    log_softmax of the same values, rounded once: F.log_softmax(x.to(dtype).float(), dim).to(dtype).
    Returns (reference, whether it is F's own result)."""
    out = dtype or x.dtype
    if x.device.type == "cpu" and out in (torch.bfloat16, torch.float16):
        return F.log_softmax(x.to(out).float(), dim).to(out), False
    return F.log_softmax(x, dim, dtype=dtype), True
