"""``python -m fundamentals [--quick] [--out DIR]``: run every answer and print the checks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from phase01_common.report import section_text

from fundamentals.report_section import build_section

# <repository>/out/ is git-ignored; parents: fundamentals/ → framework-fundamentals/ → root.
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "out" / "fundamentals"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fundamentals", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller fine-tuning run")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the loss plot goes")
    args = parser.parse_args(argv)
    section = build_section(args.out, quick=args.quick)
    print(section_text(section))
    return 0 if section.passed else 1


if __name__ == "__main__":
    sys.exit(main())
