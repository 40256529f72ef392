"""Transforming an nn.Module's loss: ``functional_call`` with grad, vmap(grad) and jit, against
torch.func on the same weights (float64, 1e-10); and vmap's two spellings (in_dims / in_axes).

The lab's own Transformer (fused causal attention inside) and MultiheadAttention are the
models: grad of the loss in every parameter, per-sample gradients over the batch, and the
jitted gradient."""

from __future__ import annotations

import minigrad
import minigrad.func as mf
import numpy as np
import pytest
import torch
import torch.func as tf
from minigrad_harness.testing import relative_error
from minigrad_harness.transformer import CONFIG, batches, build_model, library, load_text

TOL = 1e-10


def _twin_transformers():
    """The lab's Transformer (harness CONFIG: d_model 32, 4 heads, 2 layers, context 32) in
    both libraries from the same weights, and its first training batch."""
    data, vocab = load_text()
    minigrad.manual_seed(CONFIG["seed"])
    ours = build_model(library("minigrad"), vocab, CONFIG)
    theirs = build_model(library("torch"), vocab, CONFIG)
    theirs.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in ours.state_dict().items()})
    ids, targets = batches(data, CONFIG)[0]
    return ours, theirs, ids, targets, vocab


def _loss(lib, model, params, ids, targets):
    F = lib.nn.functional
    call = mf.functional_call if lib is minigrad else tf.functional_call
    logits = call(model, params, (ids,))
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def _params(model, lib):
    return {n: p.detach() for n, p in model.named_parameters()}


def _assert_trees_close(ours, theirs, tol=TOL, per_element=True):
    """Each gradient within ``tol``: relative per element (the default), or relative to the
    tensor's largest entry (for a gradient that is zero in exact arithmetic, such as that of
    the key bias in attention, where both sides hold rounding noise)."""
    assert set(ours) == set(theirs)
    for name in ours:
        got, want = ours[name].data, theirs[name].detach().numpy()
        assert got.shape == want.shape, name
        if per_element:
            err = relative_error(got, want)
        else:
            err = float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-300))
        assert err < tol, f"{name}: {err:.2e}"


@pytest.fixture(scope="module")
def twins():
    return _twin_transformers()


def test_grad_of_the_transformer_loss_matches_torch_func(twins):
    ours, theirs, ids, targets, vocab = twins
    g_ours = mf.grad(lambda p: _loss(minigrad, ours, p, minigrad.tensor(ids), targets))(
        _params(ours, minigrad)
    )
    g_theirs = tf.grad(
        lambda p: _loss(torch, theirs, p, torch.from_numpy(ids), torch.from_numpy(targets))
    )(_params(theirs, torch))
    _assert_trees_close(g_ours, g_theirs)
    # functional_call put the module's own parameters back
    assert all(type(p).__name__ == "Parameter" for p in ours.parameters())


def test_per_sample_grads_of_the_transformer_match_torch_func(twins):
    ours, theirs, ids, targets, vocab = twins

    def one_ours(p, x, y):
        return _loss(minigrad, ours, p, x[None], y[None])

    def one_theirs(p, x, y):
        return _loss(torch, theirs, p, x[None], y[None])

    g_ours = mf.vmap(mf.grad(one_ours), in_dims=(None, 0, 0))(
        _params(ours, minigrad), minigrad.tensor(ids), minigrad.tensor(targets)
    )
    g_theirs = tf.vmap(tf.grad(one_theirs), in_dims=(None, 0, 0))(
        _params(theirs, torch), torch.from_numpy(ids), torch.from_numpy(targets)
    )
    _assert_trees_close(g_ours, g_theirs)
    assert g_ours["head.weight"].shape == (CONFIG["batch"], vocab, CONFIG["d_model"])


def test_jit_of_the_transformer_gradient_matches_torch_func(twins):
    ours, theirs, ids, targets, vocab = twins
    step = mf.jit(mf.grad(lambda p, x: _loss(minigrad, ours, p, x, targets)))
    g_ours = step(_params(ours, minigrad), minigrad.tensor(ids))
    g_theirs = tf.grad(
        lambda p: _loss(torch, theirs, p, torch.from_numpy(ids), torch.from_numpy(targets))
    )(_params(theirs, torch))
    _assert_trees_close(g_ours, g_theirs)


def test_grad_of_a_multihead_attention_loss_matches_torch_func():
    minigrad.manual_seed(3)
    ours = minigrad.nn.MultiheadAttention(8, 2, batch_first=True, dtype=np.float64)
    theirs = torch.nn.MultiheadAttention(8, 2, batch_first=True, dtype=torch.float64)
    theirs.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in ours.state_dict().items()})
    x = np.random.default_rng(4).standard_normal((2, 5, 8))

    def loss(call, model, p, t):
        out, _ = call(model, p, (t, t, t), {"need_weights": False, "is_causal": False})
        return (out * out).sum()

    g_ours = mf.grad(lambda p: loss(mf.functional_call, ours, p, minigrad.tensor(x)))(
        _params(ours, minigrad)
    )
    g_theirs = tf.grad(lambda p: loss(tf.functional_call, theirs, p, torch.from_numpy(x)))(
        _params(theirs, torch)
    )
    _assert_trees_close(g_ours, g_theirs, per_element=False)


def test_functional_call_checks_names_and_ties_shared_weights():
    lin = minigrad.nn.Linear(3, 3, dtype=np.float64)
    model = minigrad.nn.Sequential(lin, minigrad.nn.ReLU(), lin)  # one Linear, used twice
    with pytest.raises(ValueError, match="no parameter named 'nope'"):
        mf.functional_call(model, {"nope": minigrad.zeros(3)}, (minigrad.zeros(1, 3),))
    with pytest.raises(ValueError, match="strict"):
        mf.functional_call(model, {"0.weight": minigrad.zeros(3, 3)}, minigrad.zeros(1, 3),
                           strict=True)  # fmt: skip
    x = minigrad.tensor(np.ones((1, 3)))
    w = minigrad.tensor(2 * np.eye(3))
    y = mf.functional_call(model, {"0.weight": w, "0.bias": minigrad.zeros(3)}, x)
    # tie_weights: the second use of the shared Linear (name "2.weight") takes it too: 2 * 2
    np.testing.assert_array_equal(y.data, [[4.0, 4.0, 4.0]])
    assert model[0].weight is lin.weight and type(lin.weight).__name__ == "Parameter"


def test_vmap_takes_torch_func_and_jax_names_for_the_same_arguments():
    x = minigrad.tensor(np.arange(6.0).reshape(2, 3))
    y = minigrad.tensor(np.arange(3.0))

    def f(a, b):
        return a * b

    by_torch = mf.vmap(f, in_dims=(0, None), out_dims=1)(x, y)
    by_jax = mf.vmap(f, in_axes=(0, None), out_axes=1)(x, y)
    positional = mf.vmap(f, (0, None), 1)(x, y)
    expected = tf.vmap(lambda a, b: a * b, in_dims=(0, None), out_dims=1)(
        torch.from_numpy(x.data), torch.from_numpy(y.data)
    )
    for got in (by_torch, by_jax, positional):
        np.testing.assert_array_equal(got.data, expected.numpy())
    with pytest.raises(TypeError, match="in_dims or in_axes"):
        mf.vmap(f, in_dims=1, in_axes=1)
