"""``python -m graph_inspector demo [--quick] [--out DIR]``: the lab's main job, printed.

Builds the report section (graph inspection, every retracing scenario, determinism, XLA/MLIR on
a full run, the BERT pipeline to TFLite) into ``--out`` and prints it; exit status 1 if a check
failed.
"""

from __future__ import annotations

from pathlib import Path

from phase01_common.report import section_text

from graph_inspector_harness.report_section import build_section


def run_demo(out: str | Path, quick: bool = False) -> int:
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    section = build_section(out, quick=quick)
    print()
    print(section_text(section))
    print(f"images and files in {out}")
    return 0 if section.passed else 1
