"""What a PyTorch user types first, checked against torch: in-place operators, Python scalars,
creation functions, the full cross_entropy signature, the new nn modules and print(model)."""

from __future__ import annotations

import itertools

import minigrad
import minigrad.nn.functional as F
import numpy as np
import pytest
import torch


# ----------------------------------------------------------------------------- in-place
def test_sgd_idiom_updates_the_same_leaf_in_place_and_bumps_its_version():
    w = minigrad.tensor(np.array([1.0, -2.0]), requires_grad=True)
    (w * w).sum().backward()
    data, version = w.data, w._version
    with minigrad.no_grad():
        w -= 0.1 * w.grad
    assert w.data is data and w._version == version + 1
    assert w.requires_grad and w.is_leaf and w.grad_fn is None
    np.testing.assert_allclose(w.data, [0.8, -1.6])
    (w * w).sum().backward()  # still a leaf that requires grad: the next step works
    np.testing.assert_allclose(w.grad.data, 2 * np.array([1.0, -2.0]) + 2 * w.data)


@pytest.mark.parametrize("op", ["+=", "-=", "*=", "/="])
def test_in_place_on_a_leaf_that_requires_grad_is_torchs_error(op):
    for make in (torch.tensor, minigrad.tensor):
        w = make([1.0, 2.0], requires_grad=True)
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
            exec(f"w {op} 2.0", {"w": w})


@pytest.mark.parametrize("op", ["+=", "-=", "*=", "/="])
def test_in_place_operators_match_torch(op):
    a = np.array([[1.0, -2.0, 3.0], [0.5, 4.0, -1.0]])
    b = np.array([2.0, -0.5, 4.0])
    results = []
    for make in (torch.tensor, minigrad.tensor):
        t = make(a.copy())
        ns = {"t": t, "b": make(b.copy())}
        exec(f"t {op} b", ns)
        assert ns["t"] is t
        results.append(np.asarray(t.numpy()))
    np.testing.assert_array_equal(results[1], results[0])
    x = minigrad.tensor(np.ones(3))
    with pytest.raises(RuntimeError, match="doesn't match the broadcast shape"):
        x += minigrad.tensor(np.ones((2, 3)))
    i = minigrad.tensor(np.array([1, 2]))
    with pytest.raises(RuntimeError, match="can't be cast"):
        i += 0.5


def test_in_place_on_a_non_leaf_is_recorded_like_torch():
    def run(lib, make):
        x = make([1.0, 2.0], requires_grad=True)
        y = x * 3
        y += x * x  # recorded: y = 3x + x²
        y *= 2
        y.sum().backward()
        return np.asarray(x.grad.numpy())

    np.testing.assert_allclose(
        run(minigrad, lambda v, **k: minigrad.tensor(np.array(v), **k)),
        run(torch, lambda v, **k: torch.tensor(v, dtype=torch.float64, **k)),
    )
    x = minigrad.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = x.exp()
    z = y * y  # saved y
    y += 1
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        z.sum().backward()


def test_python_scalars_from_one_element_tensors():
    for make in (torch.tensor, minigrad.tensor):
        t = make(2.5)
        assert float(t) == 2.5 and int(t) == 2 and format(t, ".3f") == "2.500"
        assert float(make([1.5])) == 1.5 and f"{make(3.0):6.2f}" == "  3.00"
        with pytest.raises((ValueError, RuntimeError)):
            float(make([1.0, 2.0]))
        with pytest.raises(TypeError):
            format(make([1.0, 2.0]), ".2f")  # torch formats only 0-dim tensors
    assert list(range(5))[minigrad.tensor(np.array(3))] == 3


# ----------------------------------------------------------------------------- creation
def test_creation_functions_like_torch():
    pairs = [
        (lambda L: L.zeros(2, 3), None),
        (lambda L: L.ones((2, 3)), None),
        (lambda L: L.full((2, 2), 7), None),
        (lambda L: L.full((2,), 1.5), None),
        (lambda L: L.arange(5), None),
        (lambda L: L.arange(1, 2.5, 0.5), None),
        (lambda L: L.arange(0, -3, -1), None),
        (lambda L: L.zeros_like(L.ones(2, dtype=L.float64)), None),
        (lambda L: L.ones_like(L.zeros(3)), None),
        (lambda L: L.full_like(L.zeros(2), 4.0), None),
    ]
    for make, _ in pairs:
        ours, theirs = make(minigrad), make(torch)
        assert ours.shape == tuple(theirs.shape)
        assert ours.dtype == np.dtype(str(theirs.dtype).removeprefix("torch."))
        np.testing.assert_array_equal(ours.data, theirs.numpy())
    assert minigrad.zeros(2, requires_grad=True).requires_grad
    for name in ("randn", "rand"):
        fn = getattr(minigrad, name)
        minigrad.manual_seed(3)
        a = fn(4, 5)
        minigrad.manual_seed(3)
        assert a.dtype == np.float32 and a.shape == (4, 5)
        np.testing.assert_array_equal(a.data, fn(4, 5).data)
        like = getattr(minigrad, name + "_like")(minigrad.zeros(3, dtype=np.float64))
        assert like.shape == (3,) and like.dtype == np.float64
    assert 0 <= minigrad.rand(1000).data.min() and minigrad.rand(1000).data.max() < 1
    with pytest.raises(ValueError, match="non-negative"):
        minigrad.zeros(-1)


# ----------------------------------------------------------------------------- cross_entropy
OPTIONS = list(
    itertools.product(
        [None, np.array([0.3, 1.0, 2.0, 0.5])],  # weight
        [-100, 1],  # ignore_index (1 is a real class: its rows are dropped)
        ["mean", "sum", "none"],
        [0.0, 0.25],  # label_smoothing
    )
)


@pytest.mark.parametrize("shape", [(5, 4), (4,), (2, 4, 3), (2, 4, 2, 3)], ids=str)
@pytest.mark.parametrize("weight,ignore_index,reduction,smoothing", OPTIONS)
def test_cross_entropy_full_signature_matches_torch(
    shape, weight, ignore_index, reduction, smoothing
):
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape)
    target_shape = () if len(shape) == 1 else (shape[0],) + shape[2:]
    t = rng.integers(0, 4, target_shape)
    probs = rng.dirichlet(np.ones(4), target_shape).reshape(target_shape + (4,))
    probs = np.moveaxis(probs, -1, 1 if len(shape) > 1 else 0)
    for target in (t, probs):
        kw = dict(ignore_index=ignore_index, reduction=reduction, label_smoothing=smoothing)
        xm = minigrad.tensor(x, requires_grad=True)
        xt = torch.tensor(x, requires_grad=True)
        wm = None if weight is None else minigrad.tensor(weight)
        wt = None if weight is None else torch.tensor(weight)
        if target is probs and ignore_index != -100:  # refused by both
            with pytest.raises(RuntimeError, match="ignore_index is not supported"):
                torch.nn.functional.cross_entropy(xt, torch.tensor(target), weight=wt, **kw)
            with pytest.raises(RuntimeError, match="ignore_index is not supported"):
                F.cross_entropy(xm, target, weight=wm, **kw)
            continue
        ours = F.cross_entropy(xm, target, weight=wm, **kw)
        theirs = torch.nn.functional.cross_entropy(xt, torch.tensor(target), weight=wt, **kw)
        np.testing.assert_allclose(ours.data, theirs.detach().numpy(), rtol=1e-10, atol=1e-12)
        up = rng.standard_normal(theirs.shape)
        ours.backward(up)
        theirs.backward(torch.tensor(up))
        np.testing.assert_allclose(xm.grad.data, xt.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_cross_entropy_second_order_with_options_matches_torch():
    x = np.random.default_rng(0).standard_normal((4, 3))
    t, w = np.array([0, 2, 1, 2]), np.array([1.0, 0.5, 2.0])
    res = []
    for lib, make, grad in (
        (F, lambda a: minigrad.tensor(a, requires_grad=True), minigrad.grad),
        (torch.nn.functional, lambda a: torch.tensor(a, requires_grad=True), torch.autograd.grad),
    ):
        xx = make(x)
        tt = t if lib is F else torch.tensor(t)
        ww = minigrad.tensor(w) if lib is F else torch.tensor(w)
        loss = lib.cross_entropy(xx, tt, weight=ww, label_smoothing=0.1)
        (g,) = grad(loss, xx, create_graph=True)
        (h,) = grad((g * g).sum(), xx)
        res.append(np.asarray(h.detach().numpy() if lib is not F else h.data))
    np.testing.assert_allclose(res[0], res[1], rtol=1e-10)


# ----------------------------------------------------------------------------- nn modules
def test_modules_match_torch_and_print_like_torch():
    ours = minigrad.nn.Sequential(
        minigrad.nn.Embedding(10, 4, padding_idx=0),
        minigrad.nn.LayerNorm(4),
        minigrad.nn.Linear(4, 8),
        minigrad.nn.GELU(),
        minigrad.nn.Dropout(0.1),
        minigrad.nn.Sequential(minigrad.nn.Linear(8, 3, bias=False), minigrad.nn.ReLU()),
    )
    theirs = torch.nn.Sequential(
        torch.nn.Embedding(10, 4, padding_idx=0),
        torch.nn.LayerNorm(4),
        torch.nn.Linear(4, 8),
        torch.nn.GELU(),
        torch.nn.Dropout(0.1),
        torch.nn.Sequential(torch.nn.Linear(8, 3, bias=False), torch.nn.ReLU()),
    )
    assert repr(ours) == repr(theirs)
    assert np.all(ours[0].weight.data[0] == 0)  # the padding row starts at zero, as torch
    ours.double(), theirs.double()  # float64, so the comparison can be tight
    theirs.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in ours.state_dict().items()})
    ours.eval(), theirs.eval()  # dropout off: the identity in both
    ids = np.array([[1, 0, 3], [9, 9, 2]])
    out, ref = ours(ids), theirs(torch.from_numpy(ids))
    np.testing.assert_allclose(out.data, ref.detach().numpy(), rtol=1e-10, atol=1e-12)
    out.sum().backward()
    ref.sum().backward()
    for (name, p), q in zip(ours.named_parameters(), theirs.parameters(), strict=True):
        np.testing.assert_allclose(
            p.grad.data, q.grad.numpy(), rtol=1e-10, atol=1e-12, err_msg=name
        )
    assert np.all(ours[0].weight.grad.data[0] == 0)  # no gradient for padding_idx


def test_dropout_mask_is_reproducible_and_its_gradient_is_the_mask():
    x = minigrad.tensor(np.ones((200, 50)), requires_grad=True)
    minigrad.manual_seed(7)
    y = F.dropout(x, 0.25)
    minigrad.manual_seed(7)
    np.testing.assert_array_equal(y.data, F.dropout(x, 0.25).data)
    assert set(np.unique(y.data)) == {0.0, 1 / 0.75}
    assert abs((y.data == 0).mean() - 0.25) < 0.02
    y.backward(np.full(y.shape, 2.0))
    np.testing.assert_array_equal(x.grad.data, 2.0 * y.data)
    assert F.dropout(x, 0.0) is x and F.dropout(x, 0.6, training=False) is x
    assert np.all(F.dropout(x, 1.0).data == 0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout(x, 1.5)


def test_squeeze_min_and_tensor_methods_like_torch():
    a = np.random.default_rng(0).standard_normal((3, 1, 4, 1))
    for fn in (
        lambda t: t.squeeze(),
        lambda t: t.squeeze(1),
        lambda t: t.squeeze(0),  # size 3: unchanged, as torch
        lambda t: t.squeeze((1, -1)),
        lambda t: t.min(),
        lambda t: t.min(dim=2).indices,
        lambda t: t.argmin(dim=0),
    ):
        ours, theirs = fn(minigrad.tensor(a)), fn(torch.tensor(a))
        assert ours.shape == tuple(theirs.shape)
        np.testing.assert_array_equal(ours.data, theirs.numpy())


def test_small_torch_conveniences():
    a = np.arange(6.0).reshape(2, 3)
    for fn in (lambda t: t.t(), lambda t: t.T.contiguous(), lambda t: t.square()):
        np.testing.assert_array_equal(fn(minigrad.tensor(a)).data, fn(torch.tensor(a)).numpy())
    ours = minigrad.nn.Sequential(minigrad.nn.Linear(3, 2), minigrad.nn.ReLU())
    theirs = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU())
    assert [type(m).__name__ for m in ours.modules()] == [
        type(m).__name__ for m in theirs.modules()
    ]
    assert len(list(ours.children())) == len(list(theirs.children())) == 2
    weight = ours[0].weight
    assert ours.double() is ours and weight.dtype == np.float64 and ours[0].weight is weight
    assert ours(minigrad.tensor(a)).dtype == np.float64


def test_recorded_in_place_op_on_a_view_is_refused_not_silently_wrong():
    # torch rewrites the base's history (w's gradient is 2 in row 0); minigrad used to update
    # the view only, so the base kept its old value and w.grad came out as all ones
    w = minigrad.tensor(np.ones((3, 4)), requires_grad=True)
    a = w * 1
    for view in (a[0], a.t(), a[None].expand(2, 3, 4)):
        with pytest.raises(RuntimeError, match="in-place operation on a view"):
            view *= 2
    base = minigrad.zeros(3)
    with pytest.raises(RuntimeError, match="in-place operation on a view"):
        base[1:] += w[0, :2]  # a view that does not require grad, updated from one that does
    with minigrad.no_grad():  # outside the graph the base sees the change, as in torch
        view = a[0]
        view *= 2
    assert a.data[0].tolist() == [2.0] * 4 and a.data[1].tolist() == [1.0] * 4


@pytest.mark.parametrize("op", ["cat", "stack"])
def test_cat_and_stack_promote_dtypes_like_torch(op):
    pairs = [(np.int64, np.float32), (np.float32, np.float64), (np.bool_, np.int64)]
    for d1, d2 in pairs:
        a, b = np.arange(3).astype(d1), np.arange(3).astype(d2)
        m = getattr(minigrad, op)([minigrad.tensor(a), minigrad.tensor(b)])
        t = getattr(torch, op)([torch.tensor(a), torch.tensor(b)])
        assert str(m.dtype) == str(t.dtype).removeprefix("torch."), (d1, d2)
    x = minigrad.tensor(np.ones(3, np.float32), requires_grad=True)
    out = getattr(minigrad, op)([x, minigrad.tensor(np.arange(3))])  # int64 beside float32
    out.sum().backward()
    assert out.dtype == np.float32 and x.grad.dtype == np.float32


def test_positional_forms_mean_what_they_mean_in_torch():
    """torch's overloads read positionally as torch reads them (native_functions.yaml /
    torch.nn.functional's signatures), including the arguments minigrad ignores or refuses."""
    rng = np.random.default_rng(7)
    x, w = rng.standard_normal((4, 3)), rng.random(3) + 0.5
    t = np.array([0, 2, 1, 1])
    calls = [
        # cross_entropy(input, target, weight, size_average, ignore_index, reduce, reduction)
        (lambda lib, F, a: F.cross_entropy(a, lib.tensor(t), lib.tensor(w), None, 1, None, "sum")),
        (lambda lib, F, a: F.cross_entropy(a, lib.tensor(t), None, False)),  # size_average
        (lambda lib, F, a: F.cross_entropy(a, lib.tensor(t), None, None, -100, False)),  # reduce
        (lambda lib, F, a: F.softmax(a, 0, 3, lib.float64)),  # _stacklevel, then dtype
        (lambda lib, F, a: F.log_softmax(a, 1, 5)),
        (lambda lib, F, a: a.var(0, False, True)),  # dim, unbiased, keepdim
        (lambda lib, F, a: a.var(False)),  # unbiased
        (lambda lib, F, a: a.std(1, correction=0)),
        (lambda lib, F, a: lib.var(a, 1, True, True)),
        (lambda lib, F, a: a.max(a.tanh())),  # the binary overload
        (lambda lib, F, a: lib.min(a, 1, True).values),
        (lambda lib, F, a: a.to(lib.float64, False, True) * 2),  # dtype, non_blocking, copy
        (lambda lib, F, a: a.to("cpu", lib.float64) * 2),  # device, dtype
        (lambda lib, F, a: a.to(a) * 2),  # other's dtype
        (lambda lib, F, a: F.mse_loss(a, a.tanh(), None, None, "sum")),
        (lambda lib, F, a: lib.sub(a, a.exp(), alpha=0.5)),
        (lambda lib, F, a: lib.rsub(a, 2.0, alpha=3)),
        (lambda lib, F, a: a.where(a > 0, -a)),
        (lambda lib, F, a: lib.div(a * 7, a.tanh() + 2, rounding_mode="floor") + a),
        (lambda lib, F, a: (a * 7).div(-2, rounding_mode="trunc") * a),
    ]
    for i, call in enumerate(calls):
        ours_x = minigrad.tensor(x, requires_grad=True)
        theirs_x = torch.tensor(x, requires_grad=True)
        ours = call(minigrad, minigrad.nn.functional, ours_x)
        theirs = call(torch, torch.nn.functional, theirs_x)
        np.testing.assert_allclose(ours.data, theirs.detach().numpy(), rtol=1e-12, err_msg=i)
        ours.sum().backward()
        theirs.sum().backward()
        np.testing.assert_allclose(ours_x.grad.data, theirs_x.grad.numpy(), rtol=1e-12, atol=1e-15)


def test_unsupported_torch_options_are_refused_with_a_type_error():
    x = minigrad.tensor(np.ones((2, 3)))
    for call in (
        lambda: minigrad.nn.functional.mse_loss(x, x, weight=x),
        lambda: x.to("cuda"),
        lambda: minigrad.zeros(2, device="cuda"),
        lambda: minigrad.nn.functional.dropout(x, 0.5, True, True),
        lambda: minigrad.nn.functional.embedding(np.array([0]), x, None, 1.0),
        lambda: minigrad.nn.functional.scaled_dot_product_attention(x, x, x, dropout_p=0.1),
    ):
        with pytest.raises(TypeError, match="not supported by minigrad"):
            call()
