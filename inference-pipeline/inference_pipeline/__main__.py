"""`python -m inference_pipeline --help`: the pipeline's one command-line entry point.

Offline commands (build, gate) live in ``cli_offline``; serving commands (serve, loadtest)
in ``cli_serving``; generation commands in ``cli_generation``. Each module exposes
``add_commands(subparsers)``. ``bench`` and ``demo`` show the library: they live in the
``inference_pipeline_harness`` package, imported here, lazily, and by no library module.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

COMMAND_MODULES = (
    "inference_pipeline.cli_offline",
    "inference_pipeline.cli_serving",
    "inference_pipeline.cli_generation",
)


def run_bench(args: argparse.Namespace) -> int:
    if args.serving:
        from inference_pipeline_harness import serving_bench

        argv = ([args.repository] if args.repository else []) + (["--quick"] if args.quick else [])
        return int(serving_bench.main(argv) or 0)
    if args.profile_openvino:
        from inference_pipeline_harness import openvino_profile

        return openvino_profile.main(args.repository, 20 if args.quick else args.iterations)
    from inference_pipeline_harness import bench

    return bench.main(args)


def run_demo(args: argparse.Namespace) -> int:
    from inference_pipeline_harness import demo

    return demo.main(quick=args.quick, out=Path(args.out) if args.out else None)


def add_harness_commands(subparsers: argparse._SubParsersAction) -> None:
    bench = subparsers.add_parser(
        "bench", help="latency p50/p90/p99 (batch 1, seq 128) and throughput (batch 8) per variant"
    )
    bench.add_argument(
        "repository",
        nargs="?",
        help="DIR/model_repository (default: the cached full build)",
    )
    bench.add_argument("--threads", type=int, default=1, help="intra-op threads (as promotion)")
    bench.add_argument("--iterations", type=int, default=100, help="timed runs per variant")
    bench.add_argument("--quick", action="store_true", help="a smoke run: 6 rounds per variant")
    bench.add_argument("--plot", help="write the latency plot to this PNG file")
    bench.add_argument(
        "--pinning",
        choices=("on", "off"),
        default="on",
        help="OpenVINO CPU pinning for its default and our OpenVINO rows alike (on: its default)",
    )
    bench.add_argument("--serving", action="store_true", help="the serving benchmark instead")
    bench.add_argument(
        "--profile-openvino",
        action="store_true",
        help="OpenVINO's per-node counters: its default vs the promoted default, batch 1 and 8",
    )
    bench.set_defaults(run=run_bench)

    demo = subparsers.add_parser("demo", help="build, gate and bench, printed to the console")
    demo.add_argument("--quick", action="store_true")
    demo.add_argument("--out", help="build here (default: cached full build; --quick: temp folder)")
    demo.set_defaults(run=run_demo)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inference_pipeline", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(name).add_commands(sub)
    add_harness_commands(sub)
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
