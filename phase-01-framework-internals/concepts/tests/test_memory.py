"""Saved-activation memory, minigrad.utils.checkpoint, tensor lifetimes, the CUDA allocator."""

from __future__ import annotations

import minigrad
import minigrad.nn as mnn
import numpy as np
import pytest
import torch
from concepts.memory import (
    NEEDS_CUDA,
    compare_checkpointing,
    cuda_allocator_tour,
    storage_sharing,
    tensor_lifetimes,
)
from minigrad.utils import checkpoint


@pytest.fixture(scope="module")
def comparison():
    return compare_checkpointing(depth=8, width=128, batch=256, segment=2, repeats=1)


def test_graph_holds_every_activation_without_checkpointing(comparison):
    # 8 blocks x (linear output + relu output), each (256, 128) float32
    expected = 16 * comparison.activation_bytes
    assert expected <= comparison.plain.graph_bytes < 1.25 * expected


def test_checkpointing_cuts_saved_and_peak_memory(comparison):
    assert comparison.checkpointed.graph_bytes < comparison.plain.graph_bytes / 3
    assert comparison.checkpointed.peak_bytes < 0.8 * comparison.plain.peak_bytes


def test_checkpointed_gradients_are_bit_identical(comparison):
    assert comparison.bit_identical
    assert comparison.checkpointed.step_seconds > 0 and comparison.plain.step_seconds > 0


def _block() -> mnn.Module:
    return mnn.Sequential(mnn.Linear(6, 6), mnn.ReLU(), mnn.Linear(6, 6))


def test_checkpoint_works_with_grad_and_input_gradients():
    block = _block()
    x = minigrad.tensor(np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32))
    x.requires_grad_(True)
    params = list(block.parameters())
    plain = minigrad.grad((block(x).tanh()).sum(), [x, *params])
    ckpt = minigrad.grad((checkpoint(block, x).tanh()).sum(), [x, *params])
    for a, b in zip(plain, ckpt, strict=True):
        assert a.numpy().tobytes() == b.numpy().tobytes()


def test_checkpoint_closure_needs_parameters_and_passes_constants():
    w = minigrad.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
    x = minigrad.tensor(np.ones((4, 2)))

    def scaled(inp: minigrad.Tensor, scale: float) -> minigrad.Tensor:
        return (inp @ w) * scale

    checkpoint(scaled, x, 3.0, parameters=[w]).sum().backward()
    assert np.array_equal(w.grad.numpy(), np.full((2, 3), 12.0))
    with pytest.warns(UserWarning, match="no input or parameter requires grad"):
        checkpoint(scaled, x, 3.0)


def test_checkpoint_refuses_create_graph_and_bad_fn():
    block = _block()
    x = minigrad.tensor(np.ones((2, 6), dtype=np.float32), requires_grad=True)
    with pytest.raises(RuntimeError, match="create_graph"):
        minigrad.grad(checkpoint(block, x).sum(), x, create_graph=True)
    with pytest.raises(TypeError, match="callable"):
        checkpoint(3, x)
    with pytest.raises(TypeError, match="one minigrad Tensor"):
        checkpoint(lambda t: 3.0, x)


def test_tensor_lifetimes_through_weak_references():
    lifetimes = tensor_lifetimes()
    assert lifetimes.dies_on_del
    assert lifetimes.kept_by_graph and lifetimes.freed_by_backward
    assert lifetimes.view_keeps_base


def test_views_share_storage_and_copies_do_not():
    table = {name: (shares, contiguous) for name, shares, contiguous in storage_sharing()}
    for view in ("x.view(6, 4)", "x.t()", "x[:, ::2]", "x[1]", "x.expand(2, 4, 6)"):
        assert table[view][0], view
    for copy in ("x.t().reshape(24)", "x.t().contiguous()", "x[[0, 2]]", "x.clone()", "x + 0"):
        assert not table[copy][0], copy
    assert table["x.t()"] == (True, False)  # a view with swapped strides


@pytest.mark.skipif(not torch.cuda.is_available(), reason=NEEDS_CUDA)
def test_cuda_caching_allocator():
    stats = cuda_allocator_tour()
    assert stats["8 x 12 MiB: allocated"] == pytest.approx(96)
    assert stats["every other freed: allocated"] == pytest.approx(48)
    assert stats["every other freed: reserved"] == pytest.approx(96)  # cached, not released
    # 48 MiB free, but in 12 MiB holes: the 24 MiB request needs a new segment
    assert stats["plus 24 MiB: reserved"] == pytest.approx(120)
    assert stats["all freed: allocated"] == pytest.approx(0)
    assert stats["after empty_cache: reserved"] == pytest.approx(0)
    assert stats["segments cudaMalloc'd"] == 9


def test_cuda_tour_refuses_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU; the refusal is for CPU-only builds")
    with pytest.raises(RuntimeError, match=NEEDS_CUDA):
        cuda_allocator_tour()


def test_checkpoint_refuses_a_segment_that_recomputes_differently():
    x = minigrad.tensor(np.ones((3, 3)), requires_grad=True)
    calls = []

    def noisy(t: minigrad.Tensor) -> minigrad.Tensor:  # like dropout: a new draw per call
        calls.append(1)
        return t * float(len(calls))

    with pytest.raises(RuntimeError, match="different output"):
        checkpoint(noisy, x).sum().backward()
