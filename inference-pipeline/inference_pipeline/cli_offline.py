"""Offline commands: `build`, `gate` (registered by ``__main__``; `bench` and `demo` show the
library and live in the harness, registered by ``__main__`` too).

Bad input (a missing folder, a corrupt .onnx, a config that does not match its model) is one
line on stderr and exit status 2; a gate failure is exit status 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

from phase01_common.cli import OutputPathError, prepare_out_dir

EXIT_GATE_FAILED = 1
EXIT_BAD_INPUT = 2


def _bad_input(message: str) -> int:
    print(f"error: {message}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _progress(message: str) -> None:
    print(message, flush=True)


def run_build(args: argparse.Namespace) -> int:
    from inference_pipeline.pipeline import QUICK_BUILD, BuildSettings, build

    out = Path(args.out)
    if args.threads < 1:
        return _bad_input(f"--threads must be at least 1, got {args.threads}")
    settings = QUICK_BUILD if args.quick else BuildSettings()
    if args.recipes is not None:
        from inference_pipeline.quantize import RECIPES

        names = tuple(name for name in args.recipes.split(",") if name)
        known = [row.name for row in RECIPES]
        unknown = [name for name in names if name not in known]
        if unknown or not names:
            return _bad_input(
                f"--recipes: no recipe {', '.join(map(repr, unknown)) or 'given'}; "
                f"recipes: {', '.join(known)}"
            )
        settings = dataclasses.replace(settings, recipes=names)
    settings = dataclasses.replace(settings, threads=args.threads)
    try:
        prepare_out_dir(out)
    except OutputPathError as exc:
        return _bad_input(str(exc))
    result = build(out, settings, _progress)
    promoted = [v.name for v in result.variants if v.promoted]
    print(f"\nmodel repository: {result.repository}")
    print(f"promoted ({len(promoted)}/{len(result.variants)}): {', '.join(promoted)}")
    for variant in result.variants:
        for failed in variant.gates.failed if variant.gates else []:
            print(f"not promoted: {variant.name}: gate {failed.describe()}")
    return 0 if promoted else EXIT_GATE_FAILED


def run_gate(args: argparse.Namespace) -> int:
    from inference_pipeline.pipeline import gate_repository
    from inference_pipeline.repository import RepositoryError

    if args.threads < 1:
        return _bad_input(f"--threads must be at least 1, got {args.threads}")
    try:
        reports = gate_repository(Path(args.repository), args.threads, _progress)
    except RepositoryError as exc:
        return _bad_input(str(exc))
    if not reports:
        return _bad_input(f"{args.repository}: the manifest lists no promoted variant")
    failed = [r for r in reports if not r.passed]
    print(f"{len(reports) - len(failed)}/{len(reports)} promoted variants pass every gate")
    return EXIT_GATE_FAILED if failed else 0


def add_commands(subparsers: argparse._SubParsersAction) -> None:
    build = subparsers.add_parser(
        "build",
        help="train or load the model, export, fuse, quantize, gate, write the repository",
    )
    build.add_argument("--out", required=True, help="output folder (model_repository/ and work/)")
    build.add_argument("--quick", action="store_true", help="small model/gate set (tests, smoke)")
    build.add_argument("--threads", type=int, default=2, help="ONNX Runtime / torch threads")
    build.add_argument(
        "--recipes",
        metavar="NAME[,NAME...]",
        help="make only these rows of the recipe table and the rows they are made from "
        "(default: every row)",
    )
    build.set_defaults(run=run_build)

    gate = subparsers.add_parser("gate", help="re-run the gates on an existing model repository")
    gate.add_argument("repository", help="DIR/model_repository written by build")
    gate.add_argument("--threads", type=int, default=2)
    gate.set_defaults(run=run_gate)
