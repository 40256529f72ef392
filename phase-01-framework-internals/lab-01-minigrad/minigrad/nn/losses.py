"""cross_entropy beyond the fused fast path, composed of recorded ops (so gradients and
second order come for free): class weights, ignore_index, label smoothing, class-probability
targets, unbatched (C,) and K-dimensional (N, C, d1, ...) inputs, reduction="none"."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from minigrad import ops
from minigrad.tensor import Tensor
from minigrad.tracer_base import is_tracer


def _class_weights(weight: Any, n_classes: int, dtype: np.dtype) -> np.ndarray | None:
    if weight is None:
        return None
    w = np.asarray(weight.data if isinstance(weight, Tensor) else weight, dtype=dtype)
    if w.shape != (n_classes,):
        raise ValueError(f"cross_entropy: weight has shape {w.shape}, expected ({n_classes},)")
    return w


def _requires_grad(x: Any) -> bool:
    return isinstance(x, Tensor) and x.requires_grad


def _classes_last(logp: Tensor) -> Tensor:
    """(N, C, d1, ...) -> (N * d1 * ..., C)."""
    if logp.ndim > 2:
        logp = logp.permute(0, *range(2, logp.ndim), 1)
    return logp.reshape(-1, logp.shape[-1])


def _check_class_ids(t: np.ndarray, valid: np.ndarray, n_classes: int) -> None:
    bad = valid & ((t < 0) | (t >= n_classes))
    if bad.any():
        pos = np.flatnonzero(bad)[0]
        raise IndexError(
            f"cross_entropy: Target {t.flat[pos]} is out of bounds (target[{pos}] in flat "
            f"order; class ids must lie in [0, {n_classes - 1}])"
        )


def cross_entropy_general(
    x: Tensor,
    t: np.ndarray,
    weight: Any,
    ignore_index: int,
    reduction: str,
    smoothing: float,
    target_tensor: Any = None,
) -> Tensor:
    if x.ndim == 0:
        raise ValueError("cross_entropy: input must have at least 1 dim (the classes)")
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {smoothing}")
    probs = t.dtype.kind == "f"
    if is_tracer(target_tensor) or (probs and _requires_grad(target_tensor)):
        t = target_tensor  # traced (vmap over targets), or differentiated as torch does
    if probs and ignore_index != -100:
        raise RuntimeError("ignore_index is not supported for floating point target")
    unbatched = x.ndim == 1
    if unbatched:
        x, t = x.reshape(1, -1), t.reshape((1,) + t.shape)
    n_classes = x.shape[1]
    w = _class_weights(weight, n_classes, x.dtype)
    logp = ops.LogSoftmax.apply(x, 1)
    if probs:
        loss = _probability_targets(x, logp, t, w, smoothing, reduction)
    else:
        loss = _class_targets(x, logp, t, w, ignore_index, smoothing, reduction)
    return loss.reshape(()) if unbatched and reduction == "none" else loss


def _probability_targets(
    x: Tensor, logp: Tensor, t: np.ndarray, w: Any, smoothing: float, reduction: str
) -> Tensor:
    if t.shape != x.shape:
        raise ValueError(
            f"cross_entropy: probability targets of shape {t.shape} must match input {x.shape}"
        )
    n_classes = x.shape[1]
    if not isinstance(t, Tensor):
        t = t.astype(x.dtype, copy=False)
    if smoothing:
        t = t * (1 - smoothing) + smoothing / n_classes
    if w is not None:
        t = t * w.reshape((1, n_classes) + (1,) * (x.ndim - 2))
    loss = -(logp * t).sum(dim=1)
    if reduction == "none":
        return loss
    total = loss.sum()
    if reduction == "sum":
        return total
    # torch's mean divides by the number of rows (N * d1 * ...), whatever the weights
    with np.errstate(invalid="ignore", divide="ignore"):  # no rows: nan, as torch
        return total / np.asarray(math.prod(loss.shape), dtype=x.dtype)


def _class_targets(
    x: Tensor,
    logp: Tensor,
    t: np.ndarray,
    w: Any,
    ignore_index: int,
    smoothing: float,
    reduction: str,
) -> Tensor:
    if t.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: targets must be class ids or probabilities, got {t.dtype}")
    if t.shape != (x.shape[0],) + x.shape[2:]:
        raise ValueError(
            f"cross_entropy: target shape {t.shape} does not match input {x.shape} "
            f"(expected {(x.shape[0],) + x.shape[2:]})"
        )
    n_classes = x.shape[1]
    # Written with ops (Compare, Where, Gather) rather than NumPy indexing, so that a traced
    # target (vmap over labels) stays traced instead of freezing to one example's labels.
    traced = is_tracer(t)
    valid = t != ignore_index if traced else Tensor._wrap(np.asarray(t != ignore_index))
    if not traced:
        _check_class_ids(t, valid.data, n_classes)
    flat = _classes_last(logp)
    ids = ops.Where.apply(valid, t, 0).reshape(-1)
    valid_f = ops.Cast.apply(valid.reshape(-1), x.dtype)
    weight_of_row = valid_f if w is None else ops.gather(Tensor._wrap(w), 0, ids) * valid_f
    picked = ops.gather(flat, 1, ids.reshape(-1, 1)).reshape(-1)
    loss = -(picked * weight_of_row)  # (rows,): the weighted negative log-likelihood
    if smoothing:
        per_class = flat * w if w is not None else flat
        smooth = -per_class.sum(dim=1) * valid_f
        loss = loss * (1 - smoothing) + smooth * (smoothing / n_classes)
    if reduction == "none":
        return loss.reshape(t.shape)
    total = loss.sum()
    if reduction == "sum":
        return total
    # every row ignored: the loss is nan and the gradient 0, as torch (a 0 divisor that is
    # masked afterwards would send inf * 0 = nan back). Valid rows of total weight 0 do give
    # nan gradients in torch, and here too.
    denominator, none = weight_of_row.sum(), valid_f.sum() == 0
    return ops.Where.apply(none, np.nan, total / ops.Where.apply(none, 1.0, denominator))
