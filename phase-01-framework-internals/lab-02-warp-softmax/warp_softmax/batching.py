"""vmap batching rules for the four ops: move the batch dimension to the front, shift ``dim``.

Without these, ``torch.func.vmap`` runs the op once per example through functorch's generic
fallback (with a performance warning). A C++ rule would need functorch's DynamicLayer header,
which includes a third-party JSON header the torch wheel does not ship, so the rules live here,
registered once by the package at the ``FuncTorchBatched`` key. They are the only registrations
the package makes: ``torch.ops.load_library`` alone still gives a working op, vmap included
(through the fallback).
"""

from __future__ import annotations

import torch


def _logical_dim(dim: int, logical_rank: int) -> int:
    """``dim`` of the per-example tensor, as an index into the batched tensor (batch first)."""
    rank = max(logical_rank, 1)  # a 0-dim example accepts dim in {-1, 0}, like F.softmax
    if not -rank <= dim < rank:
        raise IndexError(
            f"warp_softmax: dim {dim} is out of range for a per-example tensor of rank "
            f"{logical_rank} under vmap (expected in [{-rank}, {rank - 1}])"
        )
    return (dim % rank) + 1 if logical_rank > 0 else 0


def _batch_first(t: torch.Tensor, bdim: int | None, batch_size: int) -> torch.Tensor:
    if bdim is None:
        return t.unsqueeze(0).expand(batch_size, *t.shape)
    return t.movedim(bdim, 0)


def _forward_vmap(op):
    """The rule for softmax or log_softmax (`op`): one call on the whole batch."""

    def rule(info, in_dims, x: torch.Tensor, dim: int = -1, dtype: torch.dtype | None = None):
        (x_bdim,) = in_dims[:1]
        if x_bdim is None:
            return op(x, dim, dtype), None
        x = x.movedim(x_bdim, 0)
        batched_dim = _logical_dim(dim, x.dim() - 1)  # checks dim, 0-dim examples included
        if x.dim() == 1:  # each example is 0-dim: a row of one value
            return op(x.unsqueeze(1), 1, dtype).squeeze(1), 0
        return op(x, batched_dim, dtype), 0

    return rule


def _backward_vmap(op):
    """The rule for softmax_backward or log_softmax_backward (`op`)."""

    def rule(info, in_dims, grad_output: torch.Tensor, output: torch.Tensor, dim: int):
        g_bdim, y_bdim = in_dims[0], in_dims[1]
        if g_bdim is None and y_bdim is None:
            return op(grad_output, output, dim), None
        g = _batch_first(grad_output, g_bdim, info.batch_size)
        y = _batch_first(output, y_bdim, info.batch_size)
        batched_dim = _logical_dim(dim, g.dim() - 1)
        if g.dim() == 1:
            return op(g.unsqueeze(1), y.unsqueeze(1), 1).squeeze(1), 0
        return op(g, y, batched_dim), 0

    return rule


def register() -> None:
    ops = torch.ops.warp_softmax
    for name in ("softmax", "log_softmax"):
        torch.library.register_vmap(f"warp_softmax::{name}", _forward_vmap(getattr(ops, name)))
        backward = f"{name}_backward"
        torch.library.register_vmap(
            f"warp_softmax::{backward}", _backward_vmap(getattr(ops, backward))
        )
