"""The demo report: rendered from a real quick run, complete, honest about failures, and
laid out to be looked at (headline block first, plots next, long parts folded)."""

from __future__ import annotations

import html
import re
from pathlib import Path

from phase01_common.render import render_html, render_markdown
from phase01_common.report import Check, Image, Section, Table, nan_table_checks
from PIL import Image as PILImage

# Every section run_demo.py runs, by the start of its title, in order.
SECTION_TITLES = (
    "Lab 01",
    "Lab 02",
    "Lab 03",
    "The spec's PyTorch concepts",
    "Framework fundamentals",
    "Inference pipeline",
)

# NaN or inf written as a standalone token ("NaN", "-inf", "Infinity"), not inside a word
# such as "inference", "infinite" or "is_nan".
NON_FINITE_TOKEN = re.compile(r"(?<![\w.+-])[-+]?(?:nan|inf(?:inity)?)(?![\w])", re.IGNORECASE)


# Rows that quote NaN/inf on purpose: a deliberately broken model's outputs (the check passes
# because the validator caught them) and the concepts section's uninitialised memory read
# back by torch.empty. Every other figure in summary.md must be finite.
QUOTES_NON_FINITE_ON_PURPOSE = (
    "validator rejects the broken export",
    "torch.empty after a freed tensor",
)

COUNT = re.compile(r"all \d+ checks passed(?:; \d+ of \d+ benchmark targets met)?|"
                   r"\d+ of \d+ checks failed(?:; \d+ of \d+ benchmark targets met)?")  # fmt: skip


def non_finite_tokens(text: str) -> list[str]:
    return NON_FINITE_TOKEN.findall(text)


def summary_figures(summary: str) -> str:
    """summary.md less its verbatim text blocks (fenced; they quote logs and error messages)
    and the check rows in QUOTES_NON_FINITE_ON_PURPOSE."""
    kept: list[str] = []
    fence = ""
    for line in summary.splitlines():
        marker = re.fullmatch(r"(`{3,})\s*", line)
        if fence:
            if marker and len(marker.group(1)) >= len(fence):
                fence = ""
        elif marker:
            fence = marker.group(1)
        elif not line.startswith(tuple(f"| {name}" for name in QUOTES_NON_FINITE_ON_PURPOSE)):
            kept.append(line)
    return "\n".join(kept)


def headline_rows(page: str) -> list[str]:
    block = re.search(r"<table id='headline'>(.*?)</table>", page, re.S)
    assert block, "the page has no headline block"
    return re.findall(r"<tr>(.*?)</tr>", block.group(1), re.S)


def png(path: Path, size: tuple[int, int] = (64, 48)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    PILImage.new("RGB", size, "white").save(path)
    return path


def test_renderer_shows_failures_and_nan(tmp_path: Path):
    plot = png(tmp_path / "plot.png")
    section = Section(
        title="A lab",
        checks=[
            Check("ok", True, "1.0"),
            Check("broken", False, "3.2e-2", "over 1e-5"),
            Check("fast enough", False, "1.1x", benchmark=True),
        ],
        tables=[Table("numbers", ["name", "value"], [["a", 1.5], ["b", float("nan")]])],
        images=[Image(plot, "a plot")],
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


def test_headline_block_opens_the_page_then_the_plots(tmp_path: Path):
    with_figures = Section(
        "Lab A: fast",
        checks=[Check(f"check {i}", True, "1") for i in range(30)],
        images=[Image(png(tmp_path / "a" / "speed.png"), "speed")],
        headline=[("speedup vs `F.softmax`", "2.5×"), ("worst error", "3e-14 (limit 1e-5)")],
    )
    without = Section("Lab B: plain", checks=[Check("x", True, "1"), Check("y", False, "2")])
    page = render_html([with_figures, without], tmp_path, "t", "m")
    headline, plots, detail = page.index("id='headline'"), page.index("<img"), page.index("<h2")
    assert headline < plots < detail  # the headline block, then the plots, then the detail
    first, second = headline_rows(page)
    assert "<code>F.softmax</code>" in first and "2.5×" in first and "3e-14 (limit 1e-5)" in first
    assert "FAIL" in second and "1 of 2 passed" in second  # no headline: its pass count
    assert "failed (1): <b>y: 2</b>" in second  # and a failure is named on the first screen
    md = render_markdown([with_figures, without], tmp_path, "t", "m")
    assert md.index("| status | section | key figures |") < md.index("## Lab A")
    assert "2.5×" in md.split("## Lab A")[0]


def test_long_parts_are_folded_and_failures_are_not(tmp_path: Path):
    rows = [[f"op{i}", 1e-9, ""] for i in range(40)]
    long_table = Table("gradients", ["op", "error", "note"], rows)
    log = "\n".join(f"trace {i}" for i in range(50))
    section = Section(
        "Lab",
        checks=[Check("ok", True, "1"), Check("broken `x`", False, "2")],
        tables=[long_table, Table("short", ["a", "b"], [[1, 2]])],
        texts=[("retrace log", log)],
    )
    page = render_html([section], tmp_path, "t", "m")
    assert "<summary>gradients (40 rows)</summary>" in page
    assert "<summary>retrace log (50 lines)</summary>" in page
    assert "<h3>short</h3>" in page  # a short table stays open
    before_fold = page.split("<details>")[0]
    assert "broken <code>x</code>" in before_fold  # a failed check shows outside any fold
    assert "<th>note</th>" not in page  # an empty column is dropped
    assert "<th>detail</th>" not in page  # no check has a detail
    raw_html = Section("s", checks=[Check("<b>", True, "")])
    assert "&lt;b&gt;" in render_html([raw_html], tmp_path, "t", "m")


def test_quick_report_is_complete(quick_report, assert_valid_image):
    out, proc = quick_report
    assert proc.returncode == 0, f"demo failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    page = (out / "index.html").read_text()
    summary = (out / "summary.md").read_text()
    for title in SECTION_TITLES:
        heading = re.escape(html.escape(title))
        assert re.search(rf"<h2 id='s\d+'>{heading}", page), f"{title!r} not in index.html"
        assert f"## {title}" in summary, f"section {title!r} missing from summary.md"
    images = re.findall(r"<img src='([^']+)'", page)
    assert len(images) >= 4, f"expected plots from every lab, found {images}"
    for rel in images:
        assert_valid_image(out / rel)
    for cell in re.findall(r"<td[^>]*>([^<]*)</td>", page):
        assert cell.strip().lower() not in {"nan", "inf", "-inf"}, "a table holds a non-number"
    assert "FAIL" not in page


def test_quick_report_opens_with_every_sections_key_figures(quick_report):
    out, proc = quick_report
    page = (out / "index.html").read_text()
    assert page.index("id='headline'") < page.index("<img") < page.index("<h2")
    rows = headline_rows(page)
    assert len(rows) == len(SECTION_TITLES)
    for title, row in zip(SECTION_TITLES, rows, strict=True):
        assert html.escape(title) in row, f"headline row {row[:80]!r} is not {title!r}"
        figures = re.findall(r"<span class='fig'>(.*?)</span>", row)
        assert len(figures) >= 2, f"{title}: the section sets no headline figures ({figures})"
        assert all(re.search(r"\d", f) for f in figures), f"{title}: a figure without a number"
    assert "`" not in "".join(rows)  # Markdown is rendered, not shown


def test_header_count_is_the_consoles(quick_report):
    out, proc = quick_report
    page = (out / "index.html").read_text()
    in_page = COUNT.search(page.split("id='headline'")[0])
    in_console = COUNT.findall(proc.stdout)
    assert in_page and in_console, proc.stdout[-2000:]
    assert in_console[-1] == in_page.group(0)
    assert "make demo" in page or "tools/run_demo.py --quick" in page  # how to reproduce


def test_quick_report_numbers_are_finite(quick_report):
    out, _ = quick_report
    summary = (out / "summary.md").read_text()
    assert re.search(r"\d+\.\d+", summary), "the summary holds no measured numbers"
    found = non_finite_tokens(summary_figures(summary))
    assert not found, f"summary.md shows non-finite numbers: {found}"


def test_non_finite_tokens_are_found_and_words_are_not():
    assert non_finite_tokens("NaN inf 1.5") == ["NaN", "inf"]
    assert non_finite_tokens("| loss | -inf | +Infinity | nan, 2.0 | (inf) |") == [
        "-inf",
        "+Infinity",
        "nan",
        "inf",
    ]
    words = "inference, infinite loop, information, nano, Inf1, is_nan, IsInf, banana, 1.5e-3"
    assert non_finite_tokens(words) == []


def test_summary_figures_skip_only_quoted_text():
    section = Section(
        "lab",
        checks=[
            Check("validator rejects the broken export (x)", True, "outputs are NaN or inf"),
            Check("loss", True, "nan"),
        ],
        tables=[Table("t", ["k", "v"], [["a", float("inf")]])],
        texts=[("log", "step 3: loss NaN\n````\ninf"), ("after", "fine")],
    )
    summary = render_markdown([section], Path("."), "t", "m")
    assert non_finite_tokens(summary_figures(summary)) == ["nan", "inf"]
