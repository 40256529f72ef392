"""``python -m minigrad [--quick] [--out DIR]``: run Lab 01's demo and print its checks."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from phase01_common.report import section_text

from minigrad.report_section import build_section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minigrad", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="skip finite differences/bench")
    parser.add_argument("--out", type=Path, default=None, help="folder for the plot")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="minigrad-demo-"))
    section = build_section(out, quick=args.quick)
    print(section_text(section))
    return 0 if section.passed else 1


if __name__ == "__main__":
    sys.exit(main())
