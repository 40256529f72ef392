"""The lab's Transformer: 2 layers, 4 heads, character level, 50 Adam steps in minigrad and in
torch from the same initial weights; and causal fused attention against torch's SDPA."""

from __future__ import annotations

import minigrad
import numpy as np
import pytest
import torch
from minigrad.nn.functional import scaled_dot_product_attention
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
        lambda q, k, v: scaled_dot_product_attention(q, k, v, is_causal=True), small
    )


@pytest.mark.parametrize("batch_first", [False, True])
@pytest.mark.parametrize(
    "call",
    [
        dict(need_weights=False),
        dict(need_weights=False, is_causal=True, attn_mask="causal"),
        dict(need_weights=True),
        dict(need_weights=True, average_attn_weights=False, attn_mask="causal"),
        dict(need_weights=True, attn_mask="additive"),
    ],
    ids=["fused", "fused_causal", "weights", "weights_per_head_causal", "additive_mask"],
)
def test_multihead_attention_matches_torch(batch_first, call):
    e, heads, length, n = 8, 2, 5, 3
    rng = np.random.default_rng(1)
    ours = minigrad.nn.MultiheadAttention(e, heads, batch_first=batch_first, dtype=np.float64)
    theirs = torch.nn.MultiheadAttention(e, heads, batch_first=batch_first, dtype=torch.float64)
    assert repr(ours) == repr(theirs)
    theirs.load_state_dict({k: torch.from_numpy(v) for k, v in ours.state_dict().items()})
    masks = {
        "causal": np.triu(np.ones((length, length), dtype=bool), k=1),
        "additive": rng.standard_normal((length, length)),
    }
    kwargs = {k: masks[v] if k == "attn_mask" else v for k, v in call.items()}
    shape = (n, length, e) if batch_first else (length, n, e)
    x = rng.standard_normal(shape)
    xm = minigrad.tensor(x, requires_grad=True)
    xt = torch.tensor(x, requires_grad=True)
    out, w = ours(xm, xm, xm, **kwargs)
    torch_kwargs = {k: torch.from_numpy(v) if k == "attn_mask" else v for k, v in kwargs.items()}
    ref, wt = theirs(xt, xt, xt, **torch_kwargs)
    assert relative_error(out.data, ref.detach().numpy()) < 1e-7
    assert (w is None) == (wt is None)
    if w is not None:
        assert relative_error(w.data, wt.detach().numpy()) < 1e-7
    up = rng.standard_normal(ref.shape)
    out.backward(up)
    ref.backward(torch.from_numpy(up))
    assert relative_error(xm.grad.data, xt.grad.numpy()) < 1e-7
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        assert relative_error(p.grad.data, q.grad.numpy()) < 1e-7, name
