"""minigrad.nn modules and minigrad.optim optimizers against torch."""

from __future__ import annotations

import minigrad
import minigrad.nn.functional as F
import numpy as np
import pytest
import torch
from minigrad_harness.digits_mlp import (
    initial_weights,
    load_digits_split,
)


@pytest.mark.parametrize(
    "make_opts",
    [
        lambda lib, ps: lib.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.01),
        lambda lib, ps: lib.Adam(ps, lr=0.05, weight_decay=0.01),
    ],
    ids=["sgd_momentum_wd", "adam"],
)
def test_optimizers_match_torch(make_opts):
    data, weights = load_digits_split(), initial_weights(hidden=16)
    x, y = data.x_train[:64].astype(np.float64), data.y_train[:64]
    f64 = np.float64
    ours = minigrad.nn.Sequential(
        minigrad.nn.Linear(64, 16, dtype=f64),
        minigrad.nn.ReLU(),
        minigrad.nn.Linear(16, 10, dtype=f64),
    )
    ours.load_state_dict(weights)
    theirs = torch.nn.Sequential(torch.nn.Linear(64, 16), torch.nn.ReLU(), torch.nn.Linear(16, 10))
    theirs.load_state_dict({k: torch.tensor(v, dtype=torch.float64) for k, v in weights.items()})
    theirs.double()
    opt_ours = make_opts(minigrad.optim, list(ours.parameters()))
    opt_theirs = make_opts(torch.optim, list(theirs.parameters()))
    for _ in range(5):
        for model, opt, lib_x, lib_y, lib_f in (
            (ours, opt_ours, minigrad.tensor(x), minigrad.tensor(y), F),
            (theirs, opt_theirs, torch.tensor(x), torch.tensor(y), torch.nn.functional),
        ):
            opt.zero_grad()
            lib_f.cross_entropy(model(lib_x), lib_y).backward()
            opt.step()
    state = theirs.state_dict()
    for name, value in ours.state_dict().items():
        assert np.max(np.abs(value - state[name].numpy())) < 1e-10, name


def test_a_module_used_twice_is_one_set_of_parameters():
    lin = minigrad.nn.Linear(2, 2, dtype=np.float64, rng=np.random.default_rng(0))
    model = minigrad.nn.Sequential(lin, minigrad.nn.ReLU(), lin)
    tl = torch.nn.Linear(2, 2).double()
    reference = torch.nn.Sequential(tl, torch.nn.ReLU(), tl)
    with torch.no_grad():
        tl.weight.copy_(torch.from_numpy(lin.weight.data))
        tl.bias.copy_(torch.from_numpy(lin.bias.data))
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias"]
    assert len(list(model.parameters())) == len(list(reference.parameters())) == 2
    assert list(model.state_dict()) == list(reference.state_dict())  # both keys, as torch
    model.load_state_dict(model.state_dict())
    x = np.array([[1.0, 2.0], [3.0, -1.0]])
    opt, opt_t = (
        minigrad.optim.SGD(model.parameters(), lr=0.1),
        torch.optim.SGD(reference.parameters(), lr=0.1),
    )
    model(minigrad.tensor(x)).sum().backward()
    reference(torch.tensor(x)).sum().backward()
    opt.step()
    opt_t.step()  # one update per parameter, not two
    np.testing.assert_allclose(lin.weight.data, tl.weight.detach().numpy(), rtol=1e-12)


def test_optimizers_accept_a_zero_learning_rate():
    p = minigrad.nn.Parameter(np.ones(2))
    for make in (minigrad.optim.SGD, minigrad.optim.Adam):
        make([p], lr=0.0)
        with pytest.raises(ValueError, match="learning rate"):
            make([p], lr=-0.1)


def test_optimizers_skip_none_grads_and_count_adam_steps_per_parameter():
    """q gets no gradient for two steps: it must not move, and its first Adam update must use
    the bias correction of step 1, not of step 3 (torch keeps one step count per parameter)."""
    rng = np.random.default_rng(0)
    w0, v0 = rng.standard_normal(3), rng.standard_normal(3)
    for name, kw in [("Adam", {"lr": 0.1}), ("SGD", {"lr": 0.1, "momentum": 0.9})]:
        results = []
        for lib, make in (
            (minigrad, minigrad.nn.Parameter),
            (torch, lambda a: torch.nn.Parameter(torch.tensor(a))),
        ):
            p, q = make(w0.copy()), make(v0.copy())
            opt = getattr(lib.optim, name)([p, q], **kw)
            for step in range(4):
                opt.zero_grad()
                loss = (p * p).sum() if step < 2 else (p * p).sum() + (q * q * q).sum()
                loss.backward()
                opt.step()
            results.append([np.asarray(t.detach().numpy()) for t in (p, q)])
        for ours, theirs in zip(*results, strict=True):
            np.testing.assert_allclose(ours, theirs, rtol=1e-12, err_msg=name)


def test_assigning_none_unregisters_a_parameter():
    lin = minigrad.nn.Linear(3, 2)
    ref = torch.nn.Linear(3, 2)
    lin.bias = None
    ref.bias = None
    assert [n for n, _ in lin.named_parameters()] == [n for n, _ in ref.named_parameters()]
    assert list(lin.state_dict()) == list(ref.state_dict())
    np.testing.assert_array_equal(
        lin(minigrad.tensor(np.ones((1, 3), np.float32))).data.shape, (1, 2)
    )
    with pytest.raises(TypeError, match="Parameter or None expected"):
        lin.weight = minigrad.tensor(np.ones((2, 3)))
