"""minigrad as a torch.compile backend: same numbers as eager torch, forward and backward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from concepts.compile_backend import (
    ATEN_TO_MINIGRAD,
    MinigradBackend,
    capture_aten_graphs,
    graph_ops,
    minigrad_backend,
)
from concepts_harness.scenarios import compiled_vs_eager, digits_batch, digits_mlp, swish_mlp

TOL = 1e-10  # the tolerance, float64


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
    compiled = torch.compile(lambda t: F.gelu(t) * 2, backend=minigrad_backend, dynamic=False)
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed) as info:
        compiled(torch.randn(3, dtype=torch.float64))
    message = str(info.value)
    assert "aten.gelu.default" in message
    assert "torch._refs.nn.functional.gelu" in message and "add aten.gelu" in message
    torch._dynamo.reset()


def test_unmapped_op_without_decomposition_says_so():
    # erf is what gelu decomposes into; torch._decomp has nothing smaller for it
    torch._dynamo.reset()
    backend = MinigradBackend(decompositions=[torch.ops.aten.gelu])
    compiled = torch.compile(lambda t: F.gelu(t), backend=backend, dynamic=False)
    with pytest.raises(torch._dynamo.exc.BackendCompilerFailed, match="aten.erf.default"):
        compiled(torch.randn(3, dtype=torch.float64))
    assert "aten.gelu.default" in backend.applied
    torch._dynamo.reset()
