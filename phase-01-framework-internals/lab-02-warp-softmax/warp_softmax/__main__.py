"""``python -m warp_softmax --help``: every command.

``info`` is the library's own command. ``demo``, ``bench`` and ``check`` show and measure the
library; they live in the ``warp_softmax_harness`` package, imported here, lazily, and nowhere
else in the library.
"""

from __future__ import annotations

import argparse
import importlib
import sys

import torch

import warp_softmax


def cmd_info(args: argparse.Namespace) -> int:
    print(f"library      {warp_softmax.LIBRARY_PATH}")
    print(f"torch        {torch.__version__} (CUDA {torch.version.cuda or 'none'})")
    print(f"CPU kernel   {warp_softmax.cpu_capability()} "
          f"(runnable here: {', '.join(warp_softmax.cpu_capabilities())})")  # fmt: skip
    keys = [
        line.split(":")[0] for line in torch._C._dispatch_dump("warp_softmax::softmax").split("\n")
    ]
    cuda = "registered" if "CUDA" in keys else "not built (no CUDA in this torch, or no nvcc)"
    print(f"CUDA kernels {cuda}")
    return 0


def run_harness(module: str, args: argparse.Namespace) -> int:
    """``warp_softmax_harness.<module>.main(options)``, or one line if it is not installed."""
    try:
        harness = importlib.import_module(f"warp_softmax_harness.{module}")
    except ModuleNotFoundError as e:
        print(
            f"python -m warp_softmax {args.command}: needs the harness ({e.name} is missing); "
            "install the lab with its extra: pip install -e '<lab folder>[harness]'",
            file=sys.stderr,
        )
        return 2
    return harness.main(args.harness_args)


def cmd_demo(args: argparse.Namespace) -> int:
    return run_harness("demo", args)


def cmd_bench(args: argparse.Namespace) -> int:
    return run_harness("bench", args)


def cmd_check(args: argparse.Namespace) -> int:
    return run_harness("check", args)


COMMANDS = {
    "info": (cmd_info, "where the library is, which CPU kernel runs, whether CUDA is built"),
    "demo": (cmd_demo, "the lab's checks and a short benchmark, printed (--quick, --out DIR)"),
    "bench": (cmd_bench, "warp_softmax vs F.softmax; results go to a temp folder or --out DIR"),
    "check": (cmd_check, "accuracy sweep over every kernel path, and opcheck on every op"),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m warp_softmax",
        description="softmax and log_softmax as PyTorch custom operators. Commands after the "
        "first take their own options: python -m warp_softmax bench --help",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="command")
    for name, (_, help_text) in COMMANDS.items():
        # The harness commands parse their own options, --help included.
        sub.add_parser(name, help=help_text, add_help=name == "info")
    args, rest = parser.parse_known_args(argv)
    if args.command == "info" and rest:
        parser.error(f"info takes no arguments, got {' '.join(rest)}")
    args.harness_args = rest
    return COMMANDS[args.command][0](args)


if __name__ == "__main__":
    sys.exit(main())
