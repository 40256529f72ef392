"""Interview question: a custom backward for fused attention, checked against torch."""

import pytest
import torch
from fundamentals.attention import fused_attention


def _qkv(n=5, m=7, d=4, e=3, batch=(2,), seed=0):
    g = torch.Generator().manual_seed(seed)

    def make(*shape):
        return torch.randn(*batch, *shape, dtype=torch.float64, generator=g).requires_grad_()

    return make(n, d), make(m, d), make(m, e)


def test_gradcheck_in_double_precision():
    q, k, v = _qkv()
    assert torch.autograd.gradcheck(fused_attention, (q, k, v), eps=1e-6, atol=1e-6, rtol=1e-4)


def test_matches_torch_scaled_dot_product_attention():
    q, k, v = _qkv(n=6, m=6, d=8, e=8, batch=(2, 3), seed=1)
    ours = fused_attention(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(ours, ref, rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(ours)
    ours_grads = torch.autograd.grad(ours, (q, k, v), upstream)
    ref_grads = torch.autograd.grad(ref, (q, k, v), upstream)
    for a, b in zip(ours_grads, ref_grads, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_torch_func_grad_and_vmap_match_sdpa():
    sdpa = torch.nn.functional.scaled_dot_product_attention
    q, k, v = (t.detach() for t in _qkv(n=6, m=5, d=4, e=3, batch=(3,), seed=2))

    def loss(attention):
        return lambda q_, k_, v_: (attention(q_, k_, v_) ** 2).sum()

    ours = torch.func.grad(loss(fused_attention), argnums=(0, 1, 2))(q, k, v)
    ref = torch.func.grad(loss(sdpa), argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)
    # vmap over a leading batch: one call per example, batched by the generated rule.
    torch.testing.assert_close(
        torch.func.vmap(fused_attention)(q, k, v), sdpa(q, k, v), rtol=1e-12, atol=1e-12
    )
    jac_ours = torch.func.jacrev(lambda q_: fused_attention(q_, k[0], v[0]))(q[0])
    jac_ref = torch.func.jacrev(lambda q_: sdpa(q_, k[0], v[0]))(q[0])
    torch.testing.assert_close(jac_ours, jac_ref, rtol=1e-10, atol=1e-12)


def test_saves_no_n_by_n_tensor_and_is_stable_for_large_scores():
    q, k, v = _qkv(n=9, m=11)
    out = fused_attention(q * 1e3, k, v)  # scores in the thousands: a naive exp overflows
    saved_shapes = [tuple(t.shape) for t in out.grad_fn.saved_tensors]
    assert all(shape[-2:] != (9, 11) for shape in saved_shapes), saved_shapes
    out.sum().backward()
    assert torch.isfinite(out).all() and all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_double_backward_is_exact():
    q, k, v = _qkv(n=3, m=4, d=4, e=3, seed=2)
    assert torch.autograd.gradgradcheck(fused_attention, (q, k, v), eps=1e-6, atol=1e-6, rtol=1e-4)

    def second_order(attention):
        # A second path (q**3) keeps the graph alive, so a dropped attention term would be
        # silent rather than an error.
        out = attention(q, k, v)
        loss = (out * torch.arange(3.0, dtype=out.dtype)).sum() + (q**3).sum()
        (g,) = torch.autograd.grad(loss, q, create_graph=True)
        return torch.autograd.grad(g.sum(), (q, k, v))

    ours = second_order(fused_attention)
    ref = second_order(torch.nn.functional.scaled_dot_product_attention)
    for a, b in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-10, atol=1e-12)


def test_shape_errors_name_the_shapes():
    q, k, v = _qkv(d=4)
    with pytest.raises(ValueError, match="same last dimension"):
        fused_attention(q, torch.ones(2, 7, 5, dtype=torch.float64), v)
    with pytest.raises(ValueError, match="same sequence length"):
        fused_attention(q, k, v[:, :3])
    with pytest.raises(TypeError, match="floating-point"):
        fused_attention(q.long(), k.long(), v.long())
    with pytest.raises(TypeError, match="floating-point"):
        fused_attention(q, k.float(), v)
    with pytest.raises(TypeError, match="scale must be a Python float"):
        fused_attention(q, k, v, torch.tensor(0.5, requires_grad=True))


if __name__ == "__main__":
    raise SystemExit(pytest.main([__file__, "-v"]))
