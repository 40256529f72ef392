"""The demo report: rendered from a real quick run, complete, and honest about failures."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import types
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

# NaN or inf written as a standalone token ("NaN", "-inf", "Infinity"), not inside a word
# such as "inference", "infinite" or "is_nan".
NON_FINITE_TOKEN = re.compile(r"(?<![\w.+-])[-+]?(?:nan|inf(?:inity)?)(?![\w])", re.IGNORECASE)


# Checks whose measured text quotes a deliberately broken model's NaN/inf outputs: they pass
# because the validator caught them. Every other figure in summary.md must be finite.
QUOTES_NON_FINITE_ON_PURPOSE = ("validator rejects the broken export",)


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


def load_run_demo() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("run_demo", ROOT / "tools" / "run_demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


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


# --------------------------------------------------------------------------------------------
# run_demo.py against fake labs: a section that fails in any way still lands in the report.
# --------------------------------------------------------------------------------------------


class LabError(BaseException):
    """A BaseException that is neither Exception nor KeyboardInterrupt."""


def png(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    PILImage.new("RGB", (32, 32), "white").save(path)
    return path


@pytest.fixture
def fake_demo(monkeypatch: pytest.MonkeyPatch):
    """run_demo with its labs replaced: ``install({key: build_section})`` returns the module
    and the list of keys whose builders were called."""
    run_demo = load_run_demo()
    calls: list[str] = []

    def install(builders):
        sections = []
        for key, build in builders.items():
            module = types.ModuleType(f"fake_lab_{key}")

            def build_section(out_dir, quick, key=key, build=build):
                calls.append(key)
                return build(out_dir, quick)

            module.build_section = build_section
            monkeypatch.setitem(sys.modules, module.__name__, module)
            sections.append((key, f"Lab {key}", module.__name__))
        monkeypatch.setattr(run_demo, "SECTIONS", sections)
        return run_demo, calls

    return install


def good_section(out_dir: Path, quick: bool) -> Section:
    return Section("x", checks=[Check("fine", True, "1.0")])


def test_only_rejects_any_unknown_key_before_running(fake_demo, tmp_path, capsys):
    run_demo, calls = fake_demo({"alpha": good_section, "beta": good_section})
    out = tmp_path / "report"
    with pytest.raises(SystemExit) as exit_info:
        run_demo.main(["--only", "alpha,bta", "--out", str(out)])
    assert exit_info.value.code == 2
    assert calls == [] and not out.exists()
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "bta" in err and "alpha, beta" in err


def test_only_strips_spaces(fake_demo, tmp_path):
    run_demo, calls = fake_demo({"alpha": good_section, "beta": good_section})
    assert run_demo.main(["--only", " beta , alpha", "--out", str(tmp_path)]) == 0
    assert calls == ["alpha", "beta"]


def returns_none(out_dir, quick):
    return None


def exits_cleanly(out_dir, quick):
    raise SystemExit(0)


def raises_base_exception(out_dir, quick):
    raise LabError("lab gave up")


def raises_error(out_dir, quick):
    raise RuntimeError("boom <b>")


def unrenderable(out_dir, quick):
    return Section("x", checks=[Check("fine", True, "1")], texts=[("only a heading",)])


@pytest.mark.parametrize(
    "build",
    [returns_none, exits_cleanly, raises_base_exception, raises_error, unrenderable],
    ids=lambda f: f.__name__,
)
def test_a_failing_section_is_reported_and_fails_the_run(fake_demo, tmp_path, build):
    run_demo, calls = fake_demo({"bad": build, "good": good_section})
    rc = run_demo.main(["--out", str(tmp_path)])
    assert rc == 1 and calls == ["bad", "good"]
    page = (tmp_path / "index.html").read_text()
    summary = (tmp_path / "summary.md").read_text()
    assert "## Lab bad — FAIL" in summary and "## Lab good — pass" in summary
    assert "section ran to completion" in page and "Traceback (most recent call last)" in page


def test_keyboard_interrupt_still_stops_the_run(fake_demo, tmp_path):
    def interrupted(out_dir, quick):
        raise KeyboardInterrupt

    run_demo, calls = fake_demo({"bad": interrupted, "good": good_section})
    with pytest.raises(KeyboardInterrupt):
        run_demo.main(["--out", str(tmp_path)])
    assert calls == ["bad"]


def test_images_outside_the_report_are_copied_in(fake_demo, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    outside = png(elsewhere / "plot.png")
    linked = png(elsewhere / "linked.png")

    def with_images(out_dir: Path, quick: bool) -> Section:
        (out_dir / "link.png").symlink_to(linked)
        png(out_dir / "plot.png")  # a name clash with the outside image
        return Section(
            "x",
            checks=[Check("fine", True, "1")],
            images=[Image(outside, "outside"), Image(out_dir / "link.png", "link")],
        )

    run_demo, _ = fake_demo({"lab": with_images})
    out = tmp_path / "report"
    assert run_demo.main(["--out", str(out)]) == 0
    page = (out / "index.html").read_text()
    srcs = re.findall(r"<img src='([^']+)'", page)
    assert srcs == ["lab/plot-1.png", "lab/link.png"]
    assert all(f"]({src})" in (out / "summary.md").read_text() for src in srcs)
    for src in srcs:
        copy = out / src
        assert copy.is_file() and not copy.is_symlink()
        assert_valid_image(copy)
    assert outside.is_file() and linked.is_file()  # the originals are left alone
