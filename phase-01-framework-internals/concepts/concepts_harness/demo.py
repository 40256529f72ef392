"""``python -m concepts demo [--quick] [--out DIR]``: every concept run, its figures printed."""

from __future__ import annotations

import sys
from pathlib import Path

from phase01_common.cli import OutputPathError, prepare_out_dir
from phase01_common.report import section_text


def run_demo(out_dir: Path, quick: bool) -> int:
    """Build the report section into ``out_dir`` and print it; exit status 0 if all checks pass
    (2, with one line, when ``out_dir`` cannot be written: checked before any work)."""
    try:
        out_dir = prepare_out_dir(out_dir)
    except OutputPathError as error:
        print(f"python -m concepts demo: error: {error}", file=sys.stderr)
        return 2
    from concepts_harness.report_section import build_section  # torch: after the --out check

    section = build_section(out_dir, quick=quick)
    for label, value in section.headline:
        print(f"* {label}: {value}")
    print(section_text(section, max_rows=40))
    for image in section.images:
        print(f"plot: {image.path}")
    return 0 if section.passed else 1
