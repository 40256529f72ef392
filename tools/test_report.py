"""The demo report: rendered from a real quick run, complete, and honest about failures."""

from __future__ import annotations

import math
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from phase01_common.report import (
    Check,
    Image,
    Section,
    Table,
    nan_table_checks,
    render_html,
    render_markdown,
)
from PIL import Image as PILImage

ROOT = Path(__file__).resolve().parent.parent
SECTION_TITLES = ("Lab 01", "Lab 02", "Lab 03", "Framework fundamentals")


def assert_valid_image(path: Path) -> None:
    assert path.is_file(), f"report references a missing image: {path}"
    if path.suffix == ".svg":
        root = ET.parse(path).getroot()
        assert root.tag.endswith("svg"), f"{path} is not an SVG document"
    else:
        with PILImage.open(path) as img:
            img.verify()
            assert img.size[0] > 10 and img.size[1] > 10, f"{path} is a degenerate image"


def test_renderer_shows_failures_and_nan(tmp_path: Path):
    png = tmp_path / "plot.png"
    PILImage.new("RGB", (64, 48), "white").save(png)
    section = Section(
        title="A lab",
        checks=[
            Check("ok", True, "1.0"),
            Check("broken", False, "3.2e-2", "over 1e-5"),
            Check("fast enough", False, "1.1x", benchmark=True),
        ],
        tables=[Table("numbers", ["name", "value"], [["a", 1.5], ["b", float("nan")]])],
        images=[Image(png, "a plot")],
        texts=[("explanation", "x: now float32[4,3], before float32[2,3]")],
    )
    nan_checks = nan_table_checks(section)
    assert len(nan_checks) == 1 and not nan_checks[0].passed
    assert not section.passed
    page = render_html([section], tmp_path, "t", "m")
    assert "FAIL" in page and "broken" in page and "plot.png" in page
    assert "target missed" in page and "1 of 2 checks failed" in page
    timing_only = Section("timings", checks=[Check("fast enough", False, "1.1x", benchmark=True)])
    assert timing_only.passed  # a missed speed target is reported, not a failure
    assert "now float32[4,3]" in page
    md = render_markdown([section], tmp_path, "t", "m")
    assert "**FAIL**" in md and "| b | NaN |" in md


@pytest.fixture(scope="module")
def quick_report(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[Path, subprocess.CompletedProcess]:
    out = tmp_path_factory.mktemp("report")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "run_demo.py"), "--quick", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    return out, proc


def test_quick_report_is_complete(quick_report):
    out, proc = quick_report
    assert proc.returncode == 0, f"demo failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    page = (out / "index.html").read_text()
    summary = (out / "summary.md").read_text()
    for title in SECTION_TITLES:
        assert re.search(rf"<h2 id='s\d+'>{re.escape(title)}", page), f"{title!r} not in index.html"
        assert f"## {title}" in summary, f"section {title!r} missing from summary.md"
    images = re.findall(r"<img src='([^']+)'", page)
    assert len(images) >= 4, f"expected plots from every lab, found {images}"
    for rel in images:
        assert_valid_image(out / rel)
    for cell in re.findall(r"<td[^>]*>([^<]*)</td>", page):
        assert cell.strip().lower() not in {"nan", "inf", "-inf"}, "a table holds a non-number"
    assert "FAIL" not in page


def test_quick_report_numbers_are_finite(quick_report):
    out, _ = quick_report
    summary = (out / "summary.md").read_text()
    numbers = [float(x) for x in re.findall(r"(?<![\w.])-?\d+\.\d+(?:e[-+]?\d+)?", summary)]
    assert numbers and all(math.isfinite(x) for x in numbers)
