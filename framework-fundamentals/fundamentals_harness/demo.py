"""``python -m fundamentals demo [--quick] [--out DIR]``: every answer, run and checked.

Prints the checks with their measured figures; the fine-tuning loss plot goes to ``--out``
(default ``report/fundamentals/`` at the repository root, which ``make clean`` removes).
"""

from __future__ import annotations

import sys
from pathlib import Path

from phase01_common.cli import OutputPathError, prepare_out_dir
from phase01_common.report import section_text

# fundamentals_harness/ → framework-fundamentals/ → the repository root.
DEFAULT_OUT = Path(__file__).resolve().parents[2] / "report" / "fundamentals"


def run_demo(out: Path | None, quick: bool) -> int:
    """Run the section and print it; 0 if every check passed, 1 if not, 2 for a bad ``out``."""
    try:
        out_dir = prepare_out_dir(DEFAULT_OUT if out is None else out)
    except OutputPathError as exc:
        print(f"python -m fundamentals demo: error: {exc}", file=sys.stderr)
        return 2
    from fundamentals_harness.report_section import build_section

    section = build_section(out_dir, quick=quick)
    print(section_text(section))
    return 0 if section.passed else 1
