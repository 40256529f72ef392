"""Autocast (F.softmax's policy) and vmap (the batching rules of warp_softmax/batching.py)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
import warp_softmax
from torch.utils._python_dispatch import TorchDispatchMode
from warp_softmax_harness.scenarios import devices

DEVICES = devices()


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_autocast_matches_f_softmax(device, dtype):
    autocast_dtype = torch.bfloat16 if device == "cpu" else torch.float16
    x = torch.randn(4, 16, device=device, dtype=dtype, requires_grad=True)
    with torch.autocast(device, dtype=autocast_dtype):
        ours = warp_softmax.softmax(x, -1)
        theirs = F.softmax(x, -1)
    assert ours.dtype == theirs.dtype, (ours.dtype, theirs.dtype)
    torch.testing.assert_close(ours, theirs)
    ours.sum().backward()  # gradients flow through the autocast kernel
    assert x.grad is not None and x.grad.dtype == x.dtype


class _RecordWarpSoftmaxCalls(TorchDispatchMode):
    """Records the input shape of every warp_softmax op that reaches the kernels."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func.namespace == "warp_softmax":
            self.shapes.append(tuple(args[0].shape))
        return func(*args, **(kwargs or {}))


def test_vmap_uses_the_batching_rule():
    x = torch.randn(3, 4, 5)
    # One batched kernel call, not functorch's per-example fallback (three calls of [4, 5]).
    with _RecordWarpSoftmaxCalls() as calls:
        torch.func.vmap(lambda t: warp_softmax.softmax(t, -1))(x)
    assert calls.shapes == [(3, 4, 5)], calls.shapes
    for in_dims, dim in [(0, -1), (1, 0), (2, 1), (0, -2)]:
        ours = torch.func.vmap(lambda t, d=dim: warp_softmax.softmax(t, d), in_dims=in_dims)(x)
        theirs = torch.func.vmap(lambda t, d=dim: F.softmax(t, d), in_dims=in_dims)(x)
        torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0.0)
    # nested vmap, and 0-dim examples
    nested = torch.func.vmap(torch.func.vmap(lambda t: warp_softmax.softmax(t, -1)))(x)
    torch.testing.assert_close(nested, F.softmax(x, -1), atol=1e-6, rtol=0.0)
    ones = torch.func.vmap(lambda t: warp_softmax.softmax(t, 0))(torch.randn(6))
    torch.testing.assert_close(ones, torch.ones(6))
    # the backward op batched too, with one operand unbatched
    y = F.softmax(x, -1)
    g = torch.randn(4, 5)
    ours = torch.func.vmap(lambda yy: warp_softmax.softmax_backward(g, yy, -1))(y)
    theirs = torch.stack([torch._softmax_backward_data(g, yy, -1, yy.dtype) for yy in y])
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=0.0)
    with pytest.raises(IndexError, match="out of range"):
        torch.func.vmap(lambda t: warp_softmax.softmax(t, 2))(x)
    scalars = torch.randn(5)  # 0-dim examples accept dim -1 and 0 only, as F.softmax does
    with pytest.raises(IndexError, match="out of range"):
        torch.func.vmap(lambda t: warp_softmax.softmax(t, 5))(scalars)
    with pytest.raises(IndexError, match="out of range"):
        torch.func.vmap(lambda g, y: warp_softmax.softmax_backward(g, y, 1))(scalars, scalars)


def test_vmap_then_backward_matches_f_softmax():
    x = torch.randn(3, 4, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(5, dtype=torch.float64)
    (torch.func.vmap(lambda t: warp_softmax.softmax(t, -1))(x) * w).sum().backward()
    x_ref = x.detach().clone().requires_grad_()
    (F.softmax(x_ref, -1) * w).sum().backward()
    torch.testing.assert_close(x.grad, x_ref.grad)
