"""torch.fx: tracing, an Interpreter profile, a Transformer pass, and the tracing limits."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from concepts.fx_passes import (
    SmallNet,
    data_dependent,
    dynamo_graph_breaks,
    node_table,
    profile_nodes,
    swap_softmax,
    symbolic_trace_error,
    trace,
)


def _net_and_input() -> tuple[SmallNet, torch.Tensor]:
    torch.manual_seed(0)
    return SmallNet(), torch.randn(5, 16)


def test_symbolic_trace_records_every_kind_of_node():
    net, x = _net_and_input()
    gm = trace(net)
    ops = [row[0] for row in node_table(gm)]
    assert ops[0] == "placeholder" and ops[-1] == "output"
    assert {"call_module", "call_method", "call_function"} <= set(ops)
    assert torch.equal(gm(x), net(x))


def test_shape_profiler_records_shape_dtype_time():
    net, x = _net_and_input()
    profile = profile_nodes(trace(net), x)
    by_name = {p.name: p for p in profile}
    assert by_name["fc1"].shape == (5, 32) and by_name["fc2"].shape == (5, 8)
    assert by_name["softmax"].dtype == torch.float32
    assert all(p.seconds >= 0 for p in profile) and len(profile) == len(trace(net).graph.nodes)


def test_softmax_swapped_for_warp_softmax_keeps_outputs():
    import warp_softmax

    net, x = _net_and_input()
    gm = trace(net)
    new_gm, replaced = swap_softmax(gm)
    targets = [n.target for n in new_gm.graph.nodes if n.op == "call_function"]
    assert replaced == 1
    assert warp_softmax.softmax in targets and F.softmax not in targets
    torch.testing.assert_close(new_gm(x), net(x), rtol=1e-6, atol=1e-7)
    x.requires_grad_(True)
    new_gm(x)[:, 0].sum().backward()  # warp_softmax's backward kernel is used too
    assert x.grad is not None and torch.isfinite(x.grad).all()


def test_data_dependent_control_flow_fails_symbolic_trace():
    message = symbolic_trace_error(data_dependent)
    assert message is not None
    assert "symbolically traced variables cannot be used as inputs to control flow" in message
    assert symbolic_trace_error(lambda x: x * 2) is None  # a straight-line function traces


def test_dynamo_handles_it_with_one_graph_break():
    x = torch.randn(6)
    breaks = dynamo_graph_breaks(data_dependent, x)
    assert breaks.graph_break_count == 1 and breaks.graph_count == 2
    assert breaks.reasons
    straight = dynamo_graph_breaks(lambda t: torch.cos(t) * 2, x)
    assert straight.graph_break_count == 0 and straight.graph_count == 1
