"""minigrad as a torch.compile backend: same numbers as eager torch, forward and backward."""

from __future__ import annotations

import minigrad
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from concepts.compile_backend import (
    ATEN_TO_MINIGRAD,
    DECOMPOSED_OPS,
    MinigradBackend,
    MinigradInterpreter,
    UnmappedAtenOpError,
    capture_aten_graphs,
    graph_ops,
    minigrad_backend,
)
from concepts_harness.scenarios import compiled_vs_eager, digits_batch, digits_mlp, swish_mlp
from torch import nn

TOL = 1e-10  # float64 end to end: compiled and eager differ only in summation order


@pytest.fixture(scope="module")
def digits() -> tuple[torch.Tensor, torch.Tensor]:
    return digits_batch(96)


@pytest.fixture(scope="module")
def mlp_run(digits):
    # the whole objective compiled: MLP + cross-entropy (log_softmax, nll_loss decomposed)
    return compiled_vs_eager(digits_mlp(), *digits, steps=6, compile_loss=True)


@pytest.fixture(scope="module")
def swish_run(digits):
    # the model compiled, the loss eager: its gradient enters the backward graph as a tangent
    return compiled_vs_eager(swish_mlp(), *digits, steps=6)


@pytest.mark.parametrize("run_name", ["mlp_run", "swish_run"])
def test_outputs_and_gradients_match_eager(run_name, request):
    run = request.getfixturevalue(run_name)
    assert run.max_output_diff <= TOL
    assert run.max_grad_diff <= TOL
    # minigrad ran both graphs: the gradients really came through its backward execution
    (graphs,) = run.backend.graphs
    assert graphs.forward.calls == 6 and graphs.backward.calls == 6


@pytest.mark.parametrize("run_name", ["mlp_run", "swish_run"])
def test_training_matches_eager_loss_curve(run_name, request):
    run = request.getfixturevalue(run_name)
    assert run.max_loss_diff <= TOL
    assert run.compiled_losses[-1] < run.compiled_losses[0]  # it did train


def test_decompositions_applied_and_graphs_are_minigrad_ops(mlp_run, swish_run):
    mlp_decomposed = {
        "aten.addmm.default",
        "aten.threshold_backward.default",
        "aten._log_softmax.default",
        "aten.nll_loss_forward.default",
        "aten.nll_loss_backward.default",
    }
    assert mlp_decomposed <= set(mlp_run.backend.applied)
    assert {"aten.silu.default", "aten.silu_backward.default"} <= set(swish_run.backend.applied)
    for run in (mlp_run, swish_run):
        graphs = run.backend.graphs[0]
        ops = graph_ops(graphs.forward.gm) + graph_ops(graphs.backward.gm)
        assert ops and all(op in {str(k) for k in ATEN_TO_MINIGRAD} for op in ops)
        assert "aten.addmm.default" not in ops and "aten.silu.default" not in ops


def test_graph_before_decomposition_has_the_fused_ops(digits):
    x, _ = digits
    before_fw, before_bw = capture_aten_graphs(swish_mlp(), x[:8])
    assert "aten.silu.default" in graph_ops(before_fw)
    assert "aten.silu_backward.default" in graph_ops(before_bw)


def test_unmapped_op_error_names_op_and_decomposition():
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: F.softplus(t) * 2, backend=minigrad_backend, dynamic=False)
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as info:
        compiled(torch.randn(3, dtype=torch.float64))
    message = str(info.value)
    assert "ATen op aten.softplus.default" in message
    assert "torch._refs.nn.functional.softplus" in message and "add aten.softplus" in message
    torch._dynamo.reset()


def test_unmapped_op_without_decomposition_says_so():
    # following the advice for sin leads to prims.sin, which torch._decomp cannot break down
    torch._dynamo.reset()
    backend = MinigradBackend(decompositions=[*DECOMPOSED_OPS, torch.ops.aten.sin])
    compiled = torch.compile(lambda t: torch.sin(t), backend=backend, dynamic=False)
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as info:
        compiled(torch.randn(3, dtype=torch.float64))
    message = str(info.value)
    assert "op prims.sin.default" in message and "ATen op prims" not in message
    assert "has no decomposition for it: add a mapping to ATEN_TO_MINIGRAD" in message
    assert "aten.sin.default" in backend.applied
    torch._dynamo.reset()


def test_sequential_with_layernorm_gelu_dropout_matches_eager():
    # what a user tries first: LayerNorm (var_mean, rsqrt, a tuple output), GELU (erf),
    # Dropout(p=0); forward and backward on minigrad, equal to eager float64
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(8, 16), nn.LayerNorm(16), nn.GELU(), nn.Dropout(0.0), nn.Linear(16, 3)
    ).double()
    x = torch.randn(4, 8, dtype=torch.float64)
    torch._dynamo.reset()
    backend = MinigradBackend()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    out = compiled(x)
    out.square().sum().backward()
    compiled_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    expected = model(x)
    expected.square().sum().backward()
    assert (out - expected).abs().max().item() <= TOL
    for got, param in zip(compiled_grads, model.parameters(), strict=True):
        assert (got - param.grad).abs().max().item() <= TOL
    assert {"aten.native_layer_norm.default", "aten.gelu.default"} <= set(backend.applied)
    (graphs,) = backend.graphs
    assert graphs.forward.calls == 1 and graphs.backward.calls == 1
    torch._dynamo.reset()


def test_interpreter_names_an_unmapped_node_at_run_time():
    # a graph built by hand skips the compile-time check: the run itself must say what failed
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output(graph.call_function(torch.ops.aten.sin.default, (x,)))
    interpreter = MinigradInterpreter(torch.fx.GraphModule(torch.nn.Module(), graph))
    with pytest.raises(UnmappedAtenOpError, match="aten.sin.default \\(node 'sin_default'\\)"):
        interpreter.run(minigrad.tensor(np.ones(3)))


def test_structural_ops_run_as_minigrad_primitives():
    """Comparisons, where and gather map to minigrad's Compare, Where and Gather (not NumPy
    rebuilt beside them): same values and dtypes as torch's own ops."""
    aten = torch.ops.aten
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((4, 5)))
    mx = minigrad.tensor(x.numpy())
    for name, torch_op in (("lt", torch.lt), ("le", torch.le), ("gt", torch.gt),
                           ("ge", torch.ge), ("eq", torch.eq), ("ne", torch.ne)):  # fmt: skip
        threshold = float(x[1, 2]) if name in ("eq", "ne") else 0.0
        mask = ATEN_TO_MINIGRAD[getattr(aten, name).Scalar](mx, threshold)
        assert isinstance(mask, minigrad.Tensor) and mask.dtype == np.bool_
        assert np.array_equal(mask.numpy(), torch_op(x, threshold).numpy()), name
    mask = ATEN_TO_MINIGRAD[aten.lt.Scalar](mx, 0.0)
    picked = ATEN_TO_MINIGRAD[aten.where.self](mask, mx, minigrad.tensor(np.zeros(5)))
    expected = torch.where(x < 0, x, torch.zeros(5, dtype=torch.float64))
    assert np.array_equal(picked.numpy(), expected.numpy())
    index = torch.from_numpy(rng.integers(0, 5, (4, 2)))
    gathered = ATEN_TO_MINIGRAD[aten.gather.default](mx, 1, minigrad.tensor(index.numpy()))
    assert np.array_equal(gathered.numpy(), torch.gather(x, 1, index).numpy())
