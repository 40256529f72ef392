"""PyTorch's own per-op samples (the OpInfo database) as the oracle.

For every OpInfo entry whose op minigrad has (MINIGRAD_OPS below), every float64 CPU sample
runs in both libraries: the outputs, and the gradient of every input that requires grad under
a random upstream gradient, must agree within 1e-7 relative. A sample minigrad cannot run is
listed by name in KNOWN_GAPS with the reason; a listed gap that starts passing fails the test,
so the list stays true.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import minigrad
import minigrad.nn.functional as F
import numpy as np
import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

TOL = 1e-7


def _method(name: str) -> Callable[..., Any]:
    return lambda x, *args, **kwargs: getattr(x, name)(*args, **kwargs)


def _var_like(name: str) -> Callable[..., Any]:
    """torch.var/std's argument forms (unbiased positional or keyword, correction) -> ours."""

    def call(x, *args, dim=None, unbiased=None, keepdim=False, correction=None):
        if args:  # var(unbiased) or var(dim, unbiased, keepdim)
            if isinstance(args[0], bool):
                unbiased = args[0]
            else:
                dim, *rest = args
                unbiased = rest[0] if rest else unbiased
                keepdim = rest[1] if len(rest) > 1 else keepdim
        if correction is None:
            correction = 0 if unbiased is False else 1
        return getattr(x, name)(dim, correction=correction, keepdim=keepdim)

    return call


# OpInfo name (with variant) -> the minigrad call, in the OpInfo op's own argument order.
MINIGRAD_OPS: dict[str, Callable[..., Any]] = {
    "add": lambda x, o, alpha=1: F.add(x, o, alpha=alpha),
    "sub": lambda x, o, alpha=1: F.sub(x, o, alpha=alpha),
    "rsub": lambda x, o, alpha=1: F.sub(o, x, alpha=alpha),
    "mul": F.mul,
    "div.no_rounding_mode": lambda x, o, rounding_mode=None: F.div(x, o),
    "true_divide": F.div,
    "neg": lambda x: -x,
    "pow": lambda x, e: x**e,
    "matmul": F.matmul,
    "nn.functional.linear": F.linear,
    "nn.functional.relu": F.relu,
    "nn.functional.gelu": F.gelu,
    "nn.functional.layer_norm": F.layer_norm,
    "nn.functional.embedding": lambda w, idx, **k: F.embedding(idx, w, **k),
    "nn.functional.dropout": F.dropout,
    "nn.functional.cross_entropy": F.cross_entropy,
    "nn.functional.mse_loss": F.mse_loss,
    "softmax": F.softmax,
    "softmax.with_dtype": F.softmax,
    "log_softmax": F.log_softmax,
    "log_softmax.with_dtype": F.log_softmax,
    "where": lambda x, cond, other: F.where(cond, x, other),
    "cat": lambda xs, dim=0: F.cat(xs, dim),
    "stack": lambda xs, dim=0: F.stack(xs, dim),
    "max.binary": _method("maximum"),
    "min.binary": _method("minimum"),
    "max.reduction_no_dim": _method("max"),
    "max.reduction_with_dim": _method("max"),
    "min.reduction_no_dim": _method("min"),
    "min.reduction_with_dim": _method("min"),
    "split_with_sizes": _method("split"),
    "split.list_args": _method("split"),
    "var": _var_like("var"),
    "var.unbiased": _var_like("var"),
    "std": _var_like("std"),
    "std.unbiased": _var_like("std"),
    "T": lambda x: x.T,
    "mT": lambda x: x.mT,
    **{
        name: _method(name)
        for name in (
            "exp",
            "log",
            "tanh",
            "sigmoid",
            "abs",
            "sqrt",
            "rsqrt",
            "clamp",
            "maximum",
            "minimum",
            "sum",
            "mean",
            "amax",
            "amin",
            "reshape",
            "view",
            "permute",
            "transpose",
            "expand",
            "squeeze",
            "unsqueeze",
            "flatten",
            "clone",
            "split",
            "chunk",
            "gather",
            "index_select",
            "masked_fill",
            "logsumexp",
            "__getitem__",
            "__radd__",
            "__rsub__",
            "__rmul__",
            "__rdiv__",
            "__rpow__",
            "__rmatmul__",
        )
    },  # fmt: skip
    "squeeze.multiple": _method("squeeze"),
}

# "<op>[<sample index>]" -> why minigrad does not run that sample (the target is an empty list)
KNOWN_GAPS: dict[str, str] = {}


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |a - e| / max(|e|, 1e-6), where equal non-finite values (nan, inf) count as equal."""
    a, e = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    same = (a == e) | (np.isnan(a) & np.isnan(e))
    if same.all():
        return 0.0
    with np.errstate(invalid="ignore"):
        return float(np.max(np.where(same, 0.0, np.abs(a - e) / np.maximum(np.abs(e), 1e-6))))


def _op_key(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


OPS = [op for op in op_db if _op_key(op) in MINIGRAD_OPS]


def _convert(x: Any, to_minigrad: bool) -> Any:
    """A fresh copy of a sample's structure: torch tensors become leaves of one library."""
    if isinstance(x, torch.Tensor):
        arr = x.detach().numpy().copy()
        grad = x.requires_grad and arr.dtype.kind == "f"
        if to_minigrad:
            return minigrad.Tensor(arr, requires_grad=grad)
        return torch.tensor(arr, requires_grad=grad)
    if isinstance(x, torch.dtype) and to_minigrad:
        return np.dtype(str(x).removeprefix("torch."))
    if isinstance(x, (list, tuple)):
        return type(x)(_convert(v, to_minigrad) for v in x)
    if isinstance(x, dict):
        return {k: _convert(v, to_minigrad) for k, v in x.items()}
    return x


def _leaves(x: Any) -> list[Any]:
    if isinstance(x, (torch.Tensor, minigrad.Tensor)):
        return [x] if x.requires_grad else []
    if isinstance(x, (list, tuple)):
        return [leaf for v in x for leaf in _leaves(v)]
    if isinstance(x, dict):
        return [leaf for v in x.values() for leaf in _leaves(v)]
    return []


def _outputs(out: Any) -> list[Any]:
    return list(out) if isinstance(out, tuple) else [out]


def _array(t: Any) -> np.ndarray:
    return np.asarray(t.detach().numpy() if isinstance(t, torch.Tensor) else t.data)


def _check_sample(op: Any, sample: Any, seed: int) -> None:
    mg_args = _convert((sample.input, sample.args, sample.kwargs), True)
    if _op_key(op) == "nn.functional.dropout" and _is_random_dropout(**sample.kwargs):
        _check_random_dropout(mg_args[0], sample.kwargs.get("p", 0.5), seed)
        return
    th_args = _convert((sample.input, sample.args, sample.kwargs), False)
    ours = _outputs(MINIGRAD_OPS[_op_key(op)](mg_args[0], *mg_args[1], **mg_args[2]))
    theirs = _outputs(op.op(th_args[0], *th_args[1], **th_args[2]))
    assert len(ours) == len(theirs), f"{len(ours)} outputs, torch has {len(theirs)}"
    rng = np.random.default_rng(seed)
    mg_loss, th_loss = None, None
    for o, t in zip(ours, theirs, strict=True):
        expected = _array(t)
        assert o.shape == expected.shape, f"shape {o.shape}, torch {expected.shape}"
        if expected.dtype.kind != "f":
            np.testing.assert_array_equal(_array(o), expected)
            continue
        assert relative_error(_array(o), expected) < TOL, "output differs"
        if t.requires_grad:
            upstream = rng.standard_normal(expected.shape)
            mg_term = (o * minigrad.tensor(upstream)).sum()
            th_term = (t * torch.from_numpy(upstream)).sum()
            mg_loss = mg_term if mg_loss is None else mg_loss + mg_term
            th_loss = th_term if th_loss is None else th_loss + th_term
    if th_loss is None:
        return
    th_loss.backward()
    if mg_loss.requires_grad:
        mg_loss.backward()
    for i, (m, t) in enumerate(zip(_leaves(mg_args), _leaves(th_args), strict=True)):
        if t.grad is None:
            assert m.grad is None or not np.any(m.grad.data), f"input {i}: torch has no grad"
            continue
        assert m.grad is not None, f"input {i}: no gradient (torch has one)"
        assert relative_error(m.grad.data, t.grad.numpy()) < TOL, f"gradient of input {i}"


def _is_random_dropout(p: float = 0.5, training: bool = True, inplace: bool = False) -> bool:
    return training and 0 < p < 1


def _check_random_dropout(x: minigrad.Tensor, p: float, seed: int) -> None:
    """Masks come from different generators, so compare what is deterministic: every element
    is dropped or scaled by 1 / (1 - p), and the gradient is the upstream times that mask."""
    y = F.dropout(x, p, training=True)
    kept = y.data != 0
    np.testing.assert_allclose(y.data[kept], x.data[kept] / (1 - p), rtol=1e-15)
    upstream = np.random.default_rng(seed).standard_normal(y.shape)
    y.backward(upstream)
    np.testing.assert_allclose(x.grad.data, upstream * kept / (1 - p), rtol=1e-15)


@pytest.mark.parametrize("op", OPS, ids=_op_key)
def test_opinfo_samples_match_torch(op):
    samples = list(op.sample_inputs("cpu", torch.float64, requires_grad=True))
    assert samples, "OpInfo gave no float64 samples"
    failures, fixed = [], []
    for i, sample in enumerate(samples):
        name = f"{_op_key(op)}[{i}]"
        try:
            _check_sample(op, sample, seed=i)
        except Exception as e:  # noqa: BLE001  (every failure is reported with its sample)
            if name not in KNOWN_GAPS:
                failures.append(f"{name}: {type(e).__name__}: {str(e)[:200]}")
        else:
            if name in KNOWN_GAPS:
                fixed.append(name)
    assert not failures, f"{len(failures)} failing samples:\n" + "\n".join(failures)
    assert not fixed, f"known gaps that now pass (remove them from KNOWN_GAPS): {fixed}"


def test_every_mapped_op_is_in_opinfo():
    assert set(MINIGRAD_OPS) == {_op_key(op) for op in OPS}
