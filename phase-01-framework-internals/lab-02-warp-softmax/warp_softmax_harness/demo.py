"""``python -m warp_softmax demo [--quick] [--out DIR]``: Lab 02's checks and a short
benchmark, printed; the speedup plot goes to --out (else a temp folder, removed afterwards)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from phase01_common.report import section_text

from .bench import output_folder
from .report_section import build_section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m warp_softmax demo", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="skip torch.compile, fewer shapes")
    parser.add_argument("--out", type=Path, default=None, help="keep the plot in this folder")
    args = parser.parse_args(argv)
    if args.out is not None:
        section = build_section(output_folder(parser.prog, args.out), quick=args.quick)
    else:
        with tempfile.TemporaryDirectory(prefix="warp-softmax-demo-") as tmp:
            section = build_section(Path(tmp), quick=args.quick)
    print(section_text(section))
    return 0 if section.passed else 1
