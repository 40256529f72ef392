"""`python -m inference_pipeline --help`: the pipeline's one command-line entry point.

Offline commands (build, gate, bench) live in ``cli_offline``; serving commands (serve,
loadtest) in ``cli_serving``; generation commands in ``cli_generation``. Each module exposes
``add_commands(subparsers)``.
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMAND_MODULES = (
    "inference_pipeline.cli_offline",
    "inference_pipeline.cli_serving",
    "inference_pipeline.cli_generation",
)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m inference_pipeline", description=__doc__)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
            continue  # not written yet
        module.add_commands(sub)
    args = parser.parse_args(argv)
    if not getattr(args, "run", None):
        parser.print_help()
        return 2
    return int(args.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
