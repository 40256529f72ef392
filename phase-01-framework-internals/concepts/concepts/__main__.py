"""``python -m concepts <command>``: the spec's PyTorch concepts, one command each.

compile     torch.compile with minigrad as the backend: the graphs and the op mapping
fx          symbolic_trace, the shape/time profile, the softmax swap, the tracing limits
precision   summation error by dtype and algorithm, variance, determinism
memory      saved activations and checkpointing in minigrad, lifetimes, views vs copies
demo        everything, with checks and the precision plot (``--quick``, ``--out DIR``)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from phase01_common.cli import OneLineArgumentParser, positive_int

# <repository>/out/ is git-ignored; parents: concepts/ → concepts/ → phase-01 → root.
DEFAULT_OUT = Path(__file__).resolve().parents[3] / "out" / "concepts"


def _compile(args: argparse.Namespace) -> int:
    import torch

    from concepts import compile_backend

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(64, 32), torch.nn.SiLU(), torch.nn.Linear(32, 10)
    ).double()
    backend = compile_backend.MinigradBackend()
    compiled = torch.compile(model, backend=backend, dynamic=False)
    x = torch.randn(args.batch, 64, dtype=torch.float64)
    compiled(x).sum().backward()
    graphs = backend.graphs[0]
    print("Dynamo graph (what the backend receives):\n" + graphs.dynamo_code)
    print("ATen forward graph after decomposition (run by minigrad):\n" + graphs.forward.gm.code)
    print("ATen backward graph after decomposition (run by minigrad):\n" + graphs.backward.gm.code)
    print("decompositions applied:", dict(backend.applied))
    eager = model(x)
    print(f"max |compiled - eager| = {(compiled(x) - eager).abs().max().item():.2e}")
    return 0


def _fx(_args: argparse.Namespace) -> int:
    import torch

    from concepts import fx_passes

    torch.manual_seed(0)
    net, x = fx_passes.SmallNet(), torch.randn(8, 16)
    gm = fx_passes.trace(net)
    print(gm.code)
    for p in fx_passes.profile_nodes(gm, x):
        print(f"{p.name:10s} {p.op:14s} {p.shape!s:10s} {p.dtype!s:15s} {p.seconds * 1e6:8.1f} µs")
    swapped, replaced = fx_passes.swap_softmax(gm)
    diff = (swapped(x) - net(x)).abs().max().item()
    print(f"softmax calls swapped for warp_softmax: {replaced}, max |Δ| = {diff:.1e}")
    print("symbolic_trace(data_dependent):", fx_passes.symbolic_trace_error())
    print(
        "torch._dynamo.explain(data_dependent):",
        fx_passes.dynamo_graph_breaks(fx_passes.data_dependent, torch.randn(8)),
    )
    return 0


def _precision(args: argparse.Namespace) -> int:
    from concepts import precision

    sizes = [10**k for k in range(2, args.max_exponent + 1)]
    print(f"{'n':>9s} {'dtype':9s} {'naive':>9s} {'pairwise':>9s} {'kahan':>9s}")
    errors = precision.summation_errors(sizes)
    for n in sizes:
        for dtype in precision.DTYPES:
            row = {e.method: e.relative_error for e in errors if e.n == n and e.dtype == dtype}
            print(
                f"{n:9.0e} {dtype:9s} "
                + " ".join(f"{row[m]:9.1e}" for m in ("naive", "pairwise", "kahan"))
            )
    for r in precision.variance_cancellation():
        print(
            f"variance, shift {r.shift:7.0e}: one-pass err {r.one_pass_relative_error:.1e}, "
            f"Welford err {r.welford_relative_error:.1e}"
        )
    print(precision.probe_deterministic_mode())
    print(precision.dot_by_thread_count())
    return 0


def _memory(_args: argparse.Namespace) -> int:
    from concepts import memory

    cmp = memory.compare_checkpointing()
    for name, m in (("plain", cmp.plain), ("checkpointed", cmp.checkpointed)):
        print(
            f"{name:13s} graph {m.graph_bytes / memory.MiB:6.2f} MiB, "
            f"peak {m.peak_bytes / memory.MiB:6.2f} MiB, step {m.step_seconds * 1e3:7.2f} ms"
        )
    print(
        f"gradients bit-identical: {cmp.bit_identical}; recompute cost ×{cmp.recompute_ratio:.2f}"
    )
    print(memory.tensor_lifetimes())
    for row in memory.storage_sharing():
        print(f"{row[0]:20s} shares storage={row[1]!s:5s} contiguous={row[2]}")
    try:
        print(memory.cuda_allocator_tour())
    except RuntimeError as error:
        print(f"CUDA caching allocator: skipped ({error})")
    return 0


def _demo(args: argparse.Namespace) -> int:
    from concepts_harness.demo import run_demo  # only __main__ touches the harness

    return run_demo(args.out, quick=args.quick)


def main(argv: list[str] | None = None) -> int:
    # Only the standard library and phase01_common are imported up to here: --help and every
    # usage error answer without torch, which each command imports when it runs.
    parser = OneLineArgumentParser(
        prog="python -m concepts",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True)
    c = commands.add_parser("compile", help="minigrad as a torch.compile backend")
    c.add_argument("--batch", type=positive_int, default=4)
    c.set_defaults(run=_compile)
    commands.add_parser("fx", help="torch.fx trace, Interpreter, Transformer, limits").set_defaults(
        run=_fx
    )
    p = commands.add_parser("precision", help="FP16/BF16/FP32 sums, variance, determinism")
    p.add_argument(
        "--max-exponent", type=int, default=6, choices=range(2, 8), help="largest n = 10**k"
    )
    p.set_defaults(run=_precision)
    commands.add_parser(
        "memory", help="checkpointing, lifetimes, views, CUDA allocator"
    ).set_defaults(run=_memory)
    d = commands.add_parser("demo", help="every concept with checks and plots")
    d.add_argument("--quick", action="store_true", help="smaller sizes (about 15 s)")
    d.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the plot goes")
    d.set_defaults(run=_demo)
    args = parser.parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    sys.exit(main())
