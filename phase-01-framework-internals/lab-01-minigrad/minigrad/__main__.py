"""``python -m minigrad <command>``: Lab 01's commands.

  demo [--quick] [--out DIR]    gradient checks vs PyTorch, the digits MLP in both libraries,
                                second order, a short benchmark; prints the checks
  bench [--quick] [--threads N] [--out FILE.json]
                                one MLP training step: minigrad eager and jit vs JAX eager and
                                jax.jit vs torch eager vs hand NumPy; per-sample gradients
  explain [NAME ...]            the guide's small demonstrations (graph, why-topo, recursion,
                                cycle, create-graph, torch, transformations)

Every command is a harness command: it imports ``minigrad_harness`` (installed with the lab;
its extra dependencies are the ``harness`` extra: torch, scikit-learn, matplotlib).
"""

from __future__ import annotations

import argparse
import importlib
import sys

COMMANDS = {"demo": "minigrad_harness.demo", "bench": "minigrad_harness.bench"}
COMMANDS["explain"] = "minigrad_harness.explain"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:  # the labs' shared parser is a harness dependency, like every command here
        from phase01_common.cli import OneLineArgumentParser
    except ModuleNotFoundError as exc:
        print(
            f"python -m minigrad: error: {exc} (install the lab's harness extra)", file=sys.stderr
        )
        return 2
    parser = OneLineArgumentParser(
        prog="python -m minigrad",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=sorted(COMMANDS), help="what to run (see above)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="the command's own options")
    if not argv:
        parser.error("a command is required: demo, bench or explain (--help lists them)")
    if argv[0] in ("-h", "--help"):
        parser.print_help()
        return 0
    ns = parser.parse_args(argv[:1])
    # Imported only here: the library never depends on its harness. The harness modules
    # import torch and JAX inside the work, after their own parsers and path checks.
    module = importlib.import_module(COMMANDS[ns.command])
    return module.main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
