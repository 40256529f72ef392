"""``python -m graph_inspector --help``: every command.

``inspect``, ``convert`` and ``signatures`` are library commands (:mod:`graph_inspector.cli`);
``demo`` and ``bench`` show the library and live in the ``graph_inspector_harness`` package,
imported here, lazily, and nowhere else in the library.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before anything imports TensorFlow

from phase01_common.cli import prepare_out_dir  # noqa: E402

from graph_inspector import cli  # noqa: E402
from graph_inspector.cli_checks import import_tensorflow_quietly  # noqa: E402


def cmd_demo(args: argparse.Namespace) -> int:
    prepare_out_dir(args.out, "--out", create=False)
    import_tensorflow_quietly()
    from graph_inspector_harness.demo import run_demo

    return run_demo(args.out, quick=args.quick)


def cmd_bench(args: argparse.Namespace) -> int:
    import_tensorflow_quietly()
    from graph_inspector_harness.bench import run_bench

    return run_bench(repeats=args.repeats)


def main(argv: list[str] | None = None) -> int:
    return cli.main(argv, harness={"demo": cmd_demo, "bench": cmd_bench})


if __name__ == "__main__":
    raise SystemExit(main())
