"""``python -m minigrad demo [--quick] [--out DIR]``: run Lab 01's main job, print its checks.

Gradient checks against PyTorch, the digits MLP trained in both libraries, second order and
(without --quick) a short benchmark. The loss-curve plot goes to ``--out``; without it, to a
temporary folder that is removed before the command returns.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from phase01_common.cli import OneLineArgumentParser, OutputPathError, prepare_out_dir
from phase01_common.report import section_text

from minigrad_harness.report_section import build_section


def main(argv: list[str] | None = None) -> int:
    parser = OneLineArgumentParser(prog="python -m minigrad demo", description=__doc__)
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.add_argument("--quick", action="store_true", help="skip finite differences and bench")
    parser.add_argument("--out", type=Path, default=None, help="folder to keep the plot in")
    args = parser.parse_args(argv)
    if args.out is not None:
        try:
            prepare_out_dir(args.out)
        except OutputPathError as exc:
            parser.error(str(exc))
        section = build_section(args.out, quick=args.quick)
        print(section_text(section))
        print(f"plot written to {args.out}")
    else:
        with tempfile.TemporaryDirectory(prefix="minigrad-demo-") as tmp:
            section = build_section(Path(tmp), quick=args.quick)
            print(section_text(section))
        print("(plot not kept: pass --out DIR to keep it)")
    return 0 if section.passed else 1
