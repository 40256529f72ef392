"""PyTorch's own per-op samples (the OpInfo database) as the oracle, called as torch calls them.

Every OpInfo entry whose op minigrad has (a function of that name in ``minigrad`` or
``minigrad.nn.functional``, or a ``Tensor`` method) is run on every float64 CPU sample, and
minigrad is called exactly as the sample calls torch: the entry's own callable with torch's
names bound to minigrad's (``torch.add`` -> ``minigrad.add``, ``torch.nn.functional.linear`` ->
``minigrad.nn.functional.linear``, ``Tensor.add`` -> minigrad's ``Tensor.add``; an entry's
lambda runs unchanged with ``torch`` meaning ``minigrad``), for the function variant and the
method variant alike. No sample is rewritten and none is left out.

Each sample ends one of three ways: it *agrees* (outputs, and the gradient of every input
under a random upstream gradient, within 1e-7 relative of torch's), it is *refused* (minigrad
raises a TypeError that names what it does not support: a clear no, never a different
answer), or it fails the test (a different answer, or any other exception). Random ops are
checked for what is deterministic (shape, dtype, range; for dropout the kept elements'
scale and the gradient). ``python tests/test_opinfo.py`` prints the tally.
"""

from __future__ import annotations

import sys
import types
from collections import Counter
from collections.abc import Callable
from typing import Any

import minigrad
import minigrad.nn.functional as F
import numpy as np
import pytest
import torch
from torch.testing._internal.common_methods_invocations import op_db

TOL = 1e-7
# Ops whose values are random draws: checked against properties, not torch's values.
RANDOM_OPS = {"randn", "randn_like", "rand_like", "nn.functional.dropout"}


def _op_key(op: Any) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def _tensor_has(name: str) -> bool:
    return any(name in vars(c) for c in minigrad.Tensor.__mro__ if c is not object)


def _minigrad_has(op: Any) -> bool:
    parts = op.name.split(".")
    if parts[:2] == ["nn", "functional"]:
        return hasattr(F, parts[2])
    return hasattr(minigrad, op.name) or _tensor_has(op.name)


def _seeded(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    minigrad.manual_seed(42)
    return fn(*args, **kwargs)


def as_minigrad(fn: Callable[..., Any]) -> Callable[..., Any]:
    """The callable that stands where OpInfo's ``fn`` calls torch."""
    if isinstance(fn, types.FunctionType) and fn.__module__.startswith("torch.testing"):
        # OpInfo's own lambda: the same code, with minigrad's names
        scope = dict(fn.__globals__, torch=minigrad, wrapper_set_seed=_seeded)
        return types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
    name, owner = fn.__name__, getattr(fn, "__qualname__", "").split(".")[0]
    if owner in ("TensorBase", "Tensor"):  # a method (or operator) of the tensor
        if not _tensor_has(name):
            raise AttributeError(f"minigrad.Tensor has no method {name!r} (torch.Tensor has)")
        return lambda x, *args, **kwargs: getattr(x, name)(*args, **kwargs)
    module = getattr(fn, "__module__", "") or ""
    namespace = F if module in ("torch.nn.functional", "torch._C._nn") else minigrad
    if not hasattr(namespace, name):
        raise AttributeError(f"{namespace.__name__} has no {name!r} (torch has)")
    return getattr(namespace, name)


OPS = [op for op in op_db if _minigrad_has(op)]


def _variants(op: Any) -> list[tuple[str, Any]]:
    out = [("function", op.op)]
    if op.method_variant is not None and op.method_variant is not op.op:
        out.append(("method", op.method_variant))
    return out


def relative_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |a - e| / max(|e|, 1e-6), where equal non-finite values (nan, inf) count as equal."""
    a, e = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    same = (a == e) | (np.isnan(a) & np.isnan(e))
    if same.all():
        return 0.0
    with np.errstate(invalid="ignore"):
        return float(np.max(np.where(same, 0.0, np.abs(a - e) / np.maximum(np.abs(e), 1e-6))))


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
    if isinstance(t, torch.Tensor):
        return t.detach().numpy()
    return np.asarray(t.data if isinstance(t, minigrad.Tensor) else t)


def _check_sample(key: str, ours_fn: Callable, theirs_fn: Callable, sample: Any, seed: int) -> None:
    mg_args = _convert((sample.input, sample.args, sample.kwargs), True)
    th_args = _convert((sample.input, sample.args, sample.kwargs), False)
    ours = _outputs(ours_fn(mg_args[0], *mg_args[1], **mg_args[2]))
    theirs = _outputs(theirs_fn(th_args[0], *th_args[1], **th_args[2]))
    assert len(ours) == len(theirs), f"{len(ours)} outputs, torch has {len(theirs)}"
    if key in RANDOM_OPS:
        _check_random(key, mg_args[0], ours, theirs, sample, seed)
        return
    rng = np.random.default_rng(seed)
    mg_loss, th_loss = None, None
    for o, t in zip(ours, theirs, strict=True):
        expected = _array(t)
        got = _array(o)
        assert got.shape == expected.shape, f"shape {got.shape}, torch {expected.shape}"
        assert got.dtype == expected.dtype, f"dtype {got.dtype}, torch {expected.dtype}"
        if expected.dtype.kind != "f":
            np.testing.assert_array_equal(got, expected)
            continue
        assert relative_error(got, expected) < TOL, "output differs"
        if isinstance(t, torch.Tensor) and t.requires_grad:
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


def _check_random(key: str, x: Any, ours: list, theirs: list, sample: Any, seed: int) -> None:
    """Draws come from different generators: compare what is deterministic."""
    (o,), (t,) = ours, theirs
    got, expected = _array(o), _array(t)
    assert got.shape == expected.shape and got.dtype == expected.dtype, "shape or dtype"
    if key in ("randn", "randn_like", "rand_like"):  # (OpInfo's rand_like calls randn_like)
        assert np.isfinite(got).all() and (got.size < 2 or got.std() > 0), "randn values"
    else:  # dropout: every element is dropped or scaled by 1 / (1 - p); gradient = upstream × that
        p = sample.kwargs.get("p", sample.args[0] if sample.args else 0.5)
        training = sample.kwargs.get("training", True)
        xs = x.data
        if not training or p == 0:
            np.testing.assert_array_equal(got, xs)
        elif p == 1:
            assert not np.any(got), "p=1 drops everything"
        else:
            kept = got != 0
            np.testing.assert_allclose(got[kept], xs[kept] / (1 - p), rtol=1e-15)
        if isinstance(x, minigrad.Tensor) and x.requires_grad and o.requires_grad:
            upstream = np.random.default_rng(seed).standard_normal(got.shape)
            o.backward(minigrad.tensor(upstream))
            scale = np.where(xs != 0, got / np.where(xs != 0, xs, 1), got != 0)
            np.testing.assert_allclose(x.grad.data, upstream * scale, rtol=1e-12)


def run_op(op: Any) -> tuple[Counter, list[str]]:
    """Every float64 sample of ``op`` through each of its variants: the tally and failures."""
    tally: Counter = Counter()
    failures: list[str] = []
    samples = list(op.sample_inputs("cpu", torch.float64, requires_grad=True))
    for variant, fn in _variants(op):
        ours_fn = as_minigrad(fn)
        for i, sample in enumerate(samples):
            name = f"{_op_key(op)}[{variant} {i}]"
            try:
                _check_sample(_op_key(op), ours_fn, fn, sample, seed=i)
            except TypeError as e:
                if "minigrad" in str(e) and "not supported" in str(e):
                    tally["refused"] += 1  # a clear no
                    continue
                tally["crash"] += 1
                failures.append(f"{name}: TypeError: {str(e)[:200]}")
            except AssertionError as e:
                tally["wrong"] += 1
                failures.append(f"{name}: {str(e)[:200]}")
            except Exception as e:  # noqa: BLE001  (every failure is reported with its sample)
                tally["crash"] += 1
                failures.append(f"{name}: {type(e).__name__}: {str(e)[:200]}")
            else:
                tally["agree"] += 1
    return tally, failures


@pytest.mark.parametrize("op", OPS, ids=_op_key)
def test_opinfo_samples_match_torch(op):
    tally, failures = run_op(op)
    assert sum(tally.values()), "OpInfo gave no float64 samples"
    assert not failures, f"{len(failures)} failing samples:\n" + "\n".join(failures)


def test_the_ops_minigrad_has_are_all_checked():
    """The selection is by name, so a new minigrad function joins the test by itself; this
    pins the ones known to be there, so that a rename cannot drop one silently."""
    keys = {_op_key(op) for op in OPS}
    for expected in ("add", "matmul", "nn.functional.linear", "var.unbiased", "where", "cat"):
        assert expected in keys


if __name__ == "__main__":
    total: Counter = Counter()
    for op in OPS:
        tally, failures = run_op(op)
        total.update(tally)
        for f in failures:
            print(f)
    print(
        f"OpInfo: {len(OPS)} entries, {sum(total.values())} sample calls: "
        f"{total['agree']} agree, {total['refused']} refused (TypeError), "
        f"{total['wrong']} wrong, {total['crash']} crash"
    )
    sys.exit(1 if total["wrong"] or total["crash"] else 0)
