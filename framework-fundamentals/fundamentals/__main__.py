"""``python -m fundamentals [--quick] [--out DIR]``: run every answer and print the checks."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from fundamentals.report_section import build_section

# <repository>/out/ is git-ignored; parents: fundamentals/ → framework-fundamentals/ → root.
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "out" / "fundamentals"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fundamentals", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="smaller fine-tuning run")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help="where the loss plot goes")
    args = parser.parse_args(argv)
    section = build_section(args.out, quick=args.quick)
    print(f"\n{section.title}")
    for check in section.checks:
        print(f"  [{'PASS' if check.passed else 'FAIL'}] {check.name}: {check.measured}")
        if check.detail:
            print(f"         {check.detail}")
    for title, text in section.texts:
        print(f"\n{title}\n{text}")
    for table in section.tables:
        print(f"\n{table.title}")
        print("  " + " | ".join(table.columns))
        for row in table.rows:
            print("  " + " | ".join(f"{v:.3g}" if isinstance(v, float) else str(v) for v in row))
    for image in section.images:
        print(f"\n{image.caption}: {image.path}")
    print(f"\n{'all checks passed' if section.passed else 'SOME CHECKS FAILED'}")
    return 0 if section.passed else 1


if __name__ == "__main__":
    sys.exit(main())
