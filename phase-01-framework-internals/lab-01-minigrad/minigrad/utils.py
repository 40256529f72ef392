"""Activation checkpointing: trade compute for memory, as ``torch.utils.checkpoint`` does.

``checkpoint(fn, *args)`` runs ``fn`` without recording a graph, so none of its intermediate
activations are kept: only its inputs are saved. In backward it runs ``fn`` again, this time
recording, and differentiates that fresh graph with ``minigrad.grad``: the gradients are the
ones a plain call gives, bit for bit, because the same ops run on the same values. ``fn`` must
therefore compute the same values twice: a random op inside it (dropout) would draw anew in
the recompute, so the recomputed output is compared with a digest of the forward's and a
mismatch is an error rather than a silently wrong gradient.

The parameters ``fn`` uses must be visible to the checkpoint, because the node it records is
the only way their gradients can leave the segment: they are taken from ``fn.parameters()``
when ``fn`` is a minigrad Module, or passed as ``parameters=``. The gradients then flow
through the ordinary engine, so ``loss.backward()`` and ``minigrad.grad`` both work.
``fn`` returns one Tensor; ``create_graph=True`` through a checkpoint is refused.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Callable, Iterable
from typing import Any

import minigrad
from minigrad import Function, Tensor, enable_grad, is_grad_enabled

__all__ = ["checkpoint"]


class _Checkpoint(Function):
    @staticmethod
    def forward(ctx: Any, fn: Callable[..., Tensor], n_args: int, *args_and_params: Any) -> Tensor:
        # A user Function's forward runs under no_grad: fn records nothing, keeps nothing.
        args = args_and_params[:n_args]
        ctx.fn, ctx.n_args = fn, n_args
        ctx.constants = tuple(None if isinstance(a, Tensor) else a for a in args)
        ctx.save_for_backward(*[a for a in args if isinstance(a, Tensor)])
        ctx.params = args_and_params[n_args:]  # leaves: saving them costs no memory
        out = fn(*args)
        if not isinstance(out, Tensor):
            raise TypeError(
                f"checkpoint: fn must return one minigrad Tensor, got {type(out).__name__}"
            )
        ctx.digest = _digest(out)
        return out

    @staticmethod
    def backward(ctx: Any, grad_output: Tensor) -> tuple:
        if is_grad_enabled():
            raise RuntimeError(
                "checkpoint does not support create_graph=True: the recomputed segment is "
                "differentiated once and records no graph of its own gradients"
            )
        saved = iter(ctx.saved_tensors)
        needs = ctx.needs_input_grad[2:]
        inputs: list[Any] = []
        for constant, need in zip(ctx.constants, needs, strict=False):
            # a Tensor comes back as a fresh leaf on the same data: the recomputed graph
            # stops there; anything else is passed as it was
            inputs.append(constant if constant is not None else next(saved).detach())
            if need:
                inputs[-1].requires_grad_(True)
        wanted = [t for t, need in zip((*inputs, *ctx.params), needs, strict=True) if need]
        with enable_grad():
            out = ctx.fn(*inputs)
        if _digest(out) != ctx.digest:
            raise RuntimeError(
                "checkpoint: recomputing fn gave a different output than the forward pass "
                "(a random op such as dropout inside fn?); gradients would be wrong"
            )
        found = iter(minigrad.grad(out, wanted, grad_output, allow_unused=True) if wanted else ())
        grads = tuple(next(found) if need else None for need in needs)
        return (None, None, *grads)


def _digest(t: Tensor) -> bytes:
    """A 16-byte fingerprint of the values (cheaper to keep than the output itself)."""
    data = t.detach().numpy()
    return hashlib.blake2b(data.tobytes() + str(data.dtype).encode(), digest_size=16).digest()


def checkpoint(
    fn: Callable[..., Tensor], *args: Any, parameters: Iterable[Tensor] | None = None
) -> Tensor:
    """``fn(*args)``, recomputed in backward instead of keeping its activations.

    ``parameters``: the trainable tensors ``fn`` uses (default: ``fn.parameters()`` for a
    Module, none otherwise).

    >>> y = checkpoint(block, x)   # block's internal activations are not stored
    >>> y.sum().backward()         # block(x) runs again here, then its backward
    """
    if not callable(fn):
        raise TypeError(f"checkpoint: fn must be callable, got {type(fn).__name__}")
    if parameters is None:
        parameters = fn.parameters() if isinstance(fn, minigrad.nn.Module) else ()
    params = tuple(parameters)
    if is_grad_enabled() and not any(
        isinstance(t, Tensor) and t.requires_grad for t in (*args, *params)
    ):
        warnings.warn(
            "checkpoint: no input or parameter requires grad, so no gradient will flow "
            "through this segment (pass the parameters fn uses as parameters=)",
            stacklevel=2,
        )
    return _Checkpoint.apply(fn, len(args), *args, *params)
