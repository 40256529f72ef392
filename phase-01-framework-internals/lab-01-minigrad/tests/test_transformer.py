"""The issue's Transformer: 2 layers, 4 heads, character level, 50 Adam steps in minigrad and in
torch from the same initial weights; and causal fused attention against torch's SDPA."""

from __future__ import annotations

import minigrad
import numpy as np
import pytest
import torch
from minigrad.attention import scaled_dot_product_attention
from minigrad_harness.testing import relative_error
from minigrad_harness.transformer import CONFIG, build_model, compare, library, load_text


@pytest.fixture(scope="module")
def runs():
    return compare()


def test_transformer_loss_curves_match_torch(runs):
    ours, theirs, rel = runs
    assert len(ours.losses) == len(theirs.losses) == 50
    assert rel < 1e-5, f"largest relative loss difference {rel:.2e}"
    assert ours.losses[-1] < ours.losses[0] - 1.0  # it learns something


def test_one_model_definition_prints_like_torch():
    _, vocab = load_text()
    mg = build_model(library("minigrad"), vocab, CONFIG)
    th = build_model(library("torch"), vocab, CONFIG)
    assert repr(mg) == repr(th)
    assert [n for n, _ in mg.named_parameters()] == [n for n, _ in th.named_parameters()]


@pytest.mark.parametrize("shapes", [[(2, 4, 5, 8)] * 3, [(3, 6, 4), (3, 6, 4), (3, 6, 2)]])
def test_causal_fused_attention_matches_torch(shapes):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in shapes]
    ours = [minigrad.Tensor(a.copy(), requires_grad=True) for a in arrays]
    theirs = [torch.tensor(a, requires_grad=True) for a in arrays]
    out = scaled_dot_product_attention(*ours, is_causal=True)
    ref = torch.nn.functional.scaled_dot_product_attention(*theirs, is_causal=True)
    assert relative_error(out.data, ref.detach().numpy()) < 1e-7
    up = rng.standard_normal(ref.shape)
    out.backward(up)
    ref.backward(torch.from_numpy(up))
    for m, t in zip(ours, theirs, strict=True):
        assert relative_error(m.grad.data, t.grad.numpy()) < 1e-7
    small = [minigrad.Tensor(rng.standard_normal((3, 2)), requires_grad=True) for _ in range(3)]
    assert minigrad.gradgradcheck(
        lambda q, k, v: scaled_dot_product_attention(q, k, v, True), small
    )
