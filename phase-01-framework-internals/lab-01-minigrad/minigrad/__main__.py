"""``python -m minigrad [--quick] [--out DIR]``: run Lab 01's demo and print its checks."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

from minigrad.report_section import build_section


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minigrad", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="skip finite differences/bench")
    parser.add_argument("--out", type=Path, default=None, help="folder for the plot")
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="minigrad-demo-"))
    section = build_section(out, quick=args.quick)
    print(f"\n{section.title}")
    for c in section.checks:
        mark = "PASS" if c.passed else "FAIL"
        print(f"  [{mark}] {c.name}: {c.measured}" + (f" ({c.detail})" if c.detail else ""))
    for t in section.tables[1:]:  # the per-case gradient table is long; the report shows it
        print(f"\n  {t.title}")
        print("    " + " | ".join(t.columns))
        for row in t.rows:
            cells = [f"{v:.4g}" if isinstance(v, float) else str(v) for v in row]
            print("    " + " | ".join(cells))
    for img in section.images:
        print(f"\n  plot: {img.path}")
    print(f"\n{sum(c.passed for c in section.checks)}/{len(section.checks)} checks passed")
    return 0 if section.passed else 1


if __name__ == "__main__":
    sys.exit(main())
