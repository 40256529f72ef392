"""The case tables shared by the tests and the demo report: one line per checked expression.

Each GRAD_CASES expression runs unchanged in minigrad and torch (``F`` is either library's
``nn.functional``) through :func:`minigrad_harness.testing.compare_with_torch`.
"""

from __future__ import annotations

import minigrad
import minigrad.nn.functional as F
import numpy as np

TOL = 1e-5  # the spec's relative tolerance against torch
TARGETS = np.array([0, 3, 1, 2, 3])  # integer class ids for the (5, 4) logits below
ROWS = np.array([2, 0, 2])  # an integer index with a repeat: its gradient must accumulate
# Float arrays are fixed inputs that require grad (see minigrad_harness.testing).
TIES = np.array([[1.0, 3.0, 3.0], [0.5, -2.0, 2.0]])  # two-way ties: the max splits evenly
ZERO_BASE = np.array([0.0, 0.0, 1.5])  # pow at a zero base: torch's gradient is 0, not nan
EXPONENT = np.array([1.0, 2.0, 0.5])

MASK = np.array(
    [[True, False, True, False], [False, False, True, True], [True, True, False, False]]
)
COND = MASK[:, :, None].repeat(2, axis=2)  # (3, 4, 2)
GATHER_INDEX = np.array([[2, 0, 1, 2], [0, 0, 2, 1]])  # gathers from a (3, 4) along dim 0
EMBED_IDS = np.array([[1, 4, 1], [0, 2, 4]])  # a repeated id: its row's gradient accumulates
K_DIM_TARGETS = np.array([[0, 2, 1], [2, 2, 0]])  # class ids for (2, 3 classes, 3) logits
IGNORED_TARGETS = np.array([0, 3, -100, 2, 3])  # one row ignored (ignore_index=-100)
CLASS_WEIGHTS = np.array([0.5, 2.0, 1.0, 1.5])
PROBS = np.full((5, 4), 0.25)
PROBS[:, 0] = 0.4
PROBS[:, 1] = 0.1  # rows sum to 1
TIE_A, TIE_B = np.array([1.0, -2.0, 3.0, 0.5]), np.array([1.0, 2.0, -3.0, 0.5])


def lib(F):  # noqa: N803  (the namespace argument every case receives)
    """torch or minigrad, whichever library ``F`` (its nn.functional) belongs to: for the ops
    torch has only at the top level (torch.cat, torch.where, ...)."""
    import sys

    return sys.modules[F.__name__.split(".")[0]]


def const(F, array: np.ndarray):  # noqa: N803
    """A constant float64 tensor (no gradient) in ``F``'s library."""
    return lib(F).tensor(array)


# (case id, expression run in both libraries, input specs, positive inputs?)
GRAD_CASES = [
    ("add_broadcast", lambda F, x, y: x + y, [(3, 4), (4,)], False),
    ("add_scalar", lambda F, x: 2.5 + x, [(3, 4)], False),
    ("sub_broadcast", lambda F, x, y: x - y, [(2, 3, 4), (3, 1)], False),
    ("rsub_scalar", lambda F, x: 1 - x, [(5,)], False),
    ("mul_broadcast", lambda F, x, y: x * y, [(3, 1), (1, 4)], False),
    ("div_broadcast", lambda F, x, y: x / y, [(3, 4), (4,)], True),
    ("neg", lambda F, x: -x, [(3, 4)], False),
    ("pow_scalar", lambda F, x: x**3, [(3, 4)], False),
    ("pow_tensor", lambda F, x, y: x**y, [(3, 4), (4,)], True),
    ("pow_zero_exponent_at_zero", lambda F, x: x**0, [ZERO_BASE], False),
    ("pow_tensor_at_zero_base", lambda F, x, y: x**y, [ZERO_BASE, EXPONENT], False),
    ("rpow_zero_base", lambda F, y: 0.0**y, [(4,)], True),
    ("matmul_2d", lambda F, x, y: x @ y, [(3, 4), (4, 5)], False),
    ("matmul_batched_broadcast", lambda F, x, y: x @ y, [(2, 3, 4), (4, 5)], False),
    ("matmul_vec_mat", lambda F, x, y: x @ y, [(4,), (2, 4, 5)], False),
    ("matmul_mat_vec", lambda F, x, y: x @ y, [(3, 4), (4,)], False),
    ("matmul_dot", lambda F, x, y: x @ y, [(4,), (4,)], False),
    ("linear", lambda F, x, w, b: F.linear(x, w, b), [(5, 4), (3, 4), (3,)], False),
    ("linear_3d_input", lambda F, x, w, b: F.linear(x, w, b), [(2, 5, 4), (3, 4), (3,)], False),
    ("exp", lambda F, x: x.exp(), [(3, 4)], False),
    ("log", lambda F, x: x.log(), [(3, 4)], True),
    ("tanh", lambda F, x: x.tanh(), [(3, 4)], False),
    ("sigmoid", lambda F, x: F.sigmoid(x), [(3, 4)], False),
    ("relu", lambda F, x: F.relu(x), [(3, 4)], False),
    ("sum_all", lambda F, x: x.sum(), [(3, 4)], False),
    ("sum_dim_keepdim", lambda F, x: x.sum(dim=1, keepdim=True), [(3, 4, 2)], False),
    ("sum_dims", lambda F, x: x.sum(dim=(0, 2)), [(3, 4, 2)], False),
    # dim=() reduces over every dim (torch 2.x), it is not the identity
    ("sum_dim_empty_tuple", lambda F, x: x.sum(dim=()), [(3, 4)], False),
    ("mean_dim_empty_tuple", lambda F, x: x.mean(dim=(), keepdim=True), [(3, 4)], False),
    ("amax_dim_empty_tuple", lambda F, x: x.amax(dim=()), [(3, 4)], False),
    ("mean_dim", lambda F, x: x.mean(dim=0), [(3, 4)], False),
    ("mean_all", lambda F, x: x.mean(), [(3, 4)], False),
    ("max_dim", lambda F, x: x.max(dim=1).values, [(3, 4)], False),
    ("max_dim_keepdim", lambda F, x: x.max(dim=0, keepdim=True)[0], [(3, 4)], False),
    ("max_all", lambda F, x: x.max(), [(3, 4)], False),
    ("max_all_ties", lambda F, x: x.max(), [TIES], False),
    ("amax_ties", lambda F, x: x.amax(dim=1), [TIES], False),
    ("amax_dims", lambda F, x: x.amax(dim=(0, 2)), [(3, 4, 2)], False),
    ("sum_0dim", lambda F, x: x.sum(0), [()], False),
    ("mean_0dim", lambda F, x: x.mean(-1, keepdim=True), [()], False),
    ("max_0dim", lambda F, x: x.max(0)[0] * x.max(dim=-1).values, [()], False),
    ("softmax_0dim", lambda F, x: F.softmax(x, dim=0) * x, [()], False),
    ("reshape", lambda F, x: x.reshape(4, 3) * x.reshape(4, 3), [(3, 4)], False),
    ("view", lambda F, x: x.view(2, 6).exp(), [(3, 4)], False),
    ("transpose", lambda F, x, y: x.transpose(0, 1) @ y, [(3, 4), (3, 2)], False),
    ("permute", lambda F, x: x.permute(2, 0, 1).tanh(), [(2, 3, 4)], False),
    ("expand", lambda F, x: x.expand(3, 4) * 2, [(1, 4)], False),
    ("expand_minus_one", lambda F, x: x.expand(2, 3, -1) * 2, [(1, 4)], False),
    ("clone", lambda F, x: x.clone() * x, [(3, 4)], False),
    ("index_basic", lambda F, x: x[1:, ::2] * 3, [(3, 4)], False),
    ("index_int_array", lambda F, x: x[ROWS], [(3, 4)], False),
    ("softmax", lambda F, x: F.softmax(x, dim=-1), [(3, 4)], False),
    ("softmax_dim0", lambda F, x: F.softmax(x, dim=0), [(3, 4)], False),
    ("log_softmax", lambda F, x: F.log_softmax(x, dim=1), [(3, 4)], False),
    ("cross_entropy_mean", lambda F, x, t: F.cross_entropy(x, t), [(5, 4), TARGETS], False),
    (
        "cross_entropy_sum",
        lambda F, x, t: F.cross_entropy(x, t, reduction="sum"),
        [(5, 4), TARGETS],
        False,
    ),
    ("mse_loss", lambda F, x, y: F.mse_loss(x, y), [(3, 4), (3, 4)], False),
    ("abs", lambda F, x: x.abs(), [(3, 4)], False),
    ("sqrt", lambda F, x: x.sqrt(), [(3, 4)], True),
    ("rsqrt", lambda F, x: x.rsqrt(), [(3, 4)], True),
    ("erf", lambda F, x: x.erf(), [(3, 4)], False),
    ("clamp_numbers", lambda F, x: x.clamp(-0.5, 0.5), [(3, 4)], False),
    ("clamp_min_only", lambda F, x: x.clamp(min=0.1), [(3, 4)], False),
    ("clamp_tensors", lambda F, x, lo, hi: x.clamp(lo - 1, hi + 1), [(3, 4), (4,), (3, 1)], False),
    ("maximum_broadcast", lambda F, x, y: x.maximum(y), [(3, 4), (4,)], False),
    ("minimum_broadcast", lambda F, x, y: x.minimum(y), [(3, 4), (3, 1)], False),
    ("maximum_ties", lambda F, x, y: lib(F).maximum(x, y), [TIE_A, TIE_B], False),
    ("minimum_ties", lambda F, x, y: lib(F).minimum(x, y), [TIE_A, TIE_B], False),
    ("where", lambda F, c, x, y: lib(F).where(c, x, y), [COND, (3, 4, 2), (4, 1)], False),
    ("where_scalar", lambda F, c, x: lib(F).where(c, x, 0.5), [MASK, (3, 4)], False),
    ("cat", lambda F, x, y: lib(F).cat([x, y, x], dim=1), [(3, 4), (3, 2)], False),
    ("stack", lambda F, x, y: lib(F).stack([x, y], dim=-1), [(3, 4), (3, 4)], False),
    ("split", lambda F, x: x.split(3, dim=1)[1] * x.split([1, 2], dim=0)[1].sum(), [(3, 5)], False),
    ("chunk", lambda F, x: x.chunk(2, dim=0)[1].exp(), [(5, 3)], False),
    ("gather", lambda F, x, i: x.gather(0, i), [(3, 4), GATHER_INDEX], False),
    ("index_select", lambda F, x, i: x.index_select(1, i), [(3, 4), ROWS], False),
    ("masked_fill", lambda F, x, m: x.masked_fill(m, -1.5), [(3, 4), MASK], False),
    ("masked_fill_tensor_value", lambda F, x, m, v: x.masked_fill(m, v), [(3, 4), MASK, ()], False),
    ("var", lambda F, x: x.var(dim=1), [(3, 4)], False),
    (
        "var_correction_0_keepdim",
        lambda F, x: x.var(0, correction=0, keepdim=True),
        [(3, 4)],
        False,
    ),
    ("std_all", lambda F, x: x.std(), [(3, 4)], False),
    ("logsumexp", lambda F, x: x.logsumexp(dim=1), [(3, 4)], False),
    ("logsumexp_dims", lambda F, x: x.logsumexp(dim=(0, 2), keepdim=True), [(3, 4, 2)], False),
    ("embedding", lambda F, i, w: F.embedding(i, w), [EMBED_IDS, (5, 3)], False),
    ("layer_norm", lambda F, x, w, b: F.layer_norm(x, (4,), w, b), [(2, 3, 4), (4,), (4,)], False),
    ("layer_norm_2d_no_affine", lambda F, x: F.layer_norm(x, (3, 4)), [(2, 3, 4)], False),
    ("gelu", lambda F, x: F.gelu(x), [(3, 4)], False),
    ("gelu_tanh", lambda F, x: F.gelu(x, approximate="tanh"), [(3, 4)], False),
    ("div_floor", lambda F, x, y: x.div(y, rounding_mode="floor") * x, [(3, 4), (4,)], True),
    (
        "div_trunc",
        lambda F, x, y: lib(F).div(x - 1, y, rounding_mode="trunc"),
        [(3, 4), (4,)],
        True,
    ),
    (
        "attention",
        lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v),
        [(2, 3, 4), (2, 5, 4), (2, 5, 3)],
        False,
    ),
    (
        "attention_causal_scale_broadcast",
        lambda F, q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
        [(2, 4, 3), (1, 4, 3), (1, 4, 2)],
        False,
    ),
    ("add_alpha", lambda F, x, y: x.add(y, alpha=2.5), [(3, 4), (4,)], False),
    ("sub_alpha", lambda F, x, y: x.sub(y, alpha=-0.5), [(3, 4), (3, 1)], False),
    ("min_dim", lambda F, x: x.min(dim=1).values, [(3, 4)], False),
    ("amin", lambda F, x: x.amin(dim=0), [(3, 4)], False),
    ("squeeze_unsqueeze", lambda F, x: x.unsqueeze(0).squeeze(2).squeeze() * 2, [(3, 1, 4)], False),
    ("log_softmax_dtype", lambda F, x: F.log_softmax(x, 1, dtype=x.dtype), [(3, 4)], False),
    (
        "cross_entropy_weight_ignore_smoothing",
        lambda F, x, t: F.cross_entropy(
            x, t, weight=const(F, CLASS_WEIGHTS), ignore_index=-100, label_smoothing=0.2
        ),
        [(5, 4), IGNORED_TARGETS],
        False,
    ),
    (
        "cross_entropy_k_dim_none",
        lambda F, x, t: F.cross_entropy(x, t, reduction="none"),
        [(2, 3, 3), K_DIM_TARGETS],
        False,
    ),
    (
        "cross_entropy_probabilities",
        lambda F, x: F.cross_entropy(x, const(F, PROBS), label_smoothing=0.1),
        [(5, 4)],
        False,
    ),
    (
        "mlp_block",
        lambda F, x, w, b: F.log_softmax(F.relu(F.linear(x, w, b)).tanh(), dim=1),
        [(5, 4), (3, 4), (3,)],
        False,
    ),
]


SECOND_ORDER_CASES = [
    ("cube", lambda F, x: x**3, [(5,)]),
    ("tanh", lambda F, x: x.tanh(), [(5,)]),
    # 0-dim: NumPy ufuncs return scalars there, and a saved output must still be recorded
    ("tanh_0dim", lambda F, x: x * x.tanh(), [()]),
    ("exp_0dim", lambda F, x: x * x.exp(), [()]),
    ("sigmoid_0dim", lambda F, x: x * x.sigmoid(), [()]),
    ("softmax_0dim", lambda F, x: F.softmax(x, dim=0) * x.exp() + F.log_softmax(x, dim=-1), [()]),
    ("pow_tensor_exponent_0dim", lambda F, x, y: (x * x + 1) ** y.tanh(), [(), ()]),
    ("softmax_hvp", lambda F, x, w: (F.softmax(x @ w, dim=-1) * w.sum()).sum(), [(3, 4), (4, 5)]),
    ("cross_entropy_hvp", lambda F, x, t: F.cross_entropy(x, t), [(5, 4), TARGETS]),
    (
        "mlp_hvp",
        lambda F, x, w, b: F.linear(x, w, b).sigmoid().log_softmax(dim=1).sum(),
        [(5, 4), (3, 4), (3,)],
    ),
]


GRADGRAD_CASES = [
    (
        "abs_sqrt_rsqrt_erf",
        lambda x: (x * x + 1).sqrt() * x.abs() + (x * x + 1).rsqrt() + x.erf(),
        [(3, 4)],
    ),
    (
        "clamp_extrema_where",
        lambda x, y: (
            x.clamp(y - 1, y + 1) * minigrad.maximum(x, y) + minigrad.where(MASK, x, y).minimum(y)
        ),
        [(3, 4), (4,)],
    ),
    (
        "cat_stack_gather",
        lambda x, y: (
            (minigrad.cat([x, y], 0).gather(0, GATHER_INDEX) ** 2).sum()
            + minigrad.stack([x, x * y], 0).sum(0) ** 2
        ),
        [(3, 4), (3, 4)],
    ),
    (
        "masked_fill_embedding",
        lambda x, w, v: x.masked_fill(MASK, v) ** 2 * F.embedding(EMBED_IDS, w).sum() ** 2,
        [(3, 4), (5, 3), ()],
    ),
    (
        "layer_norm_gelu",
        lambda x, w, b: F.gelu(F.layer_norm(x, (4,), w, b)) * F.gelu(x, approximate="tanh"),
        [(2, 3, 4), (4,), (4,)],
    ),
    ("var_logsumexp", lambda x: x.var(dim=1) * x.logsumexp(dim=0).sum() + x.std() ** 3, [(3, 4)]),
    # the same seed before each call: the same mask for every finite-difference evaluation
    ("dropout_fixed_seed", lambda x: (minigrad.manual_seed(0), F.dropout(x * x, 0.3))[1], [(3, 4)]),
    ("mul_div", lambda x, y: x * y / (y * y + 1), [(3, 4), (4,)]),
    ("exp_log", lambda x: (x * x + 1).log().exp(), [(3, 4)]),
    ("tanh_sigmoid", lambda x: x.tanh().sigmoid(), [(3, 4)]),
    ("matmul_batched", lambda x, y: x @ y, [(2, 3, 4), (4,)]),
    ("softmax", lambda x: F.softmax(x, dim=1), [(3, 4)]),
    ("log_softmax", lambda x: F.log_softmax(x, dim=0), [(3, 4)]),
    ("cross_entropy", lambda x: F.cross_entropy(x, TARGETS), [(5, 4)]),
    ("reductions", lambda x: x.max(dim=1).values * x.mean(dim=0).sum() + x.sum(), [(3, 4)]),
    ("shape_ops", lambda x: x.permute(1, 0).reshape(2, 6)[ROWS % 2] ** 2, [(3, 4)]),
    ("sub_neg_expand", lambda x, y: -(x - y).expand(2, 3, 4) * y, [(3, 4), (4,)]),
    ("pow_tensor_exponent", lambda x, y: (x * x + 1) ** y.tanh(), [(3, 4), (4,)]),
    ("amax_dims_and_max", lambda x: x.amax(dim=(0, 1)) * x.sum() + x.max() ** 2, [(3, 4)]),
    ("elementwise_0dim", lambda x: x * x.tanh() + x.exp() * x.sigmoid(), [()]),
    ("pow_tensor_exponent_0dim", lambda x, y: (x * x + 1) ** y.tanh(), [(), ()]),
    ("softmax_0dim", lambda x: F.softmax(x, dim=0) * x.exp() + F.log_softmax(x, dim=0), [()]),
    ("linear_relu", lambda x, w: F.linear(x, w).relu() * x.sum(), [(3, 4), (2, 4)]),
    ("clone", lambda x: x.clone() * x.clone().tanh(), [(3, 4)]),
    ("rounded_div", lambda x, y: x.div(y * y + 1, rounding_mode="floor") * x, [(3, 4), (4,)]),
    (
        "attention_causal",
        lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
        [(2, 3, 2), (2, 3, 2), (2, 3, 2)],
    ),
]


# Custom Functions written exactly as torch.autograd.Functions (used by the tests).
class Swish(minigrad.Function):
    """x * sigmoid(x), written exactly like a torch.autograd.Function."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * x.sigmoid()

    @staticmethod
    def backward(ctx, grad_output):
        (x,) = ctx.saved_tensors
        # Recomputed from the saved *input*, so create_graph differentiates through it.
        s = x.sigmoid()
        return grad_output * (s + x * s * (1 - s))


class SwishSavingSigmoid(minigrad.Function):
    """Saves sigmoid(x) from forward: fine for first order, but that tensor was made under
    no_grad, so it is a constant to create_graph and the second derivative comes out wrong
    (in torch too). gradgradcheck must catch it."""

    @staticmethod
    def forward(ctx, x):
        s = x.sigmoid()
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    def backward(ctx, grad_output):
        x, s = ctx.saved_tensors
        return grad_output * (s + x * s * (1 - s))
