"""tools/run_demo.py against fake labs: a section that fails in any way still lands in the
report, the run's exit status says so, and a bad command line is one line with exit code 2."""

from __future__ import annotations

import re
import subprocess
import sys
import types
from pathlib import Path

import pytest
from phase01_common.report import Check, Image, Section
from PIL import Image as PILImage

ROOT = Path(__file__).resolve().parent.parent


class LabError(BaseException):
    """A BaseException that is neither Exception nor KeyboardInterrupt."""


def png(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    PILImage.new("RGB", (32, 32), "white").save(path)
    return path


@pytest.fixture
def fake_demo(monkeypatch: pytest.MonkeyPatch, run_demo_module):
    """run_demo with its labs replaced: ``install({key: build_section})`` returns the module
    and the list of keys whose builders were called."""
    run_demo = run_demo_module
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


def test_images_outside_the_report_are_copied_in(fake_demo, tmp_path, assert_valid_image):
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


@pytest.mark.parametrize("where", ["a file", "/proc"])
def test_an_unusable_out_is_one_line_and_exit_2(fake_demo, tmp_path, capsys, where):
    run_demo, calls = fake_demo({"alpha": good_section})
    a_file = tmp_path / "README.md"
    a_file.write_text("keep me")
    out = str(a_file) if where == "a file" else "/proc/nope"
    with pytest.raises(SystemExit) as exit_info:
        run_demo.main(["--quick", "--out", out])
    err = capsys.readouterr().err.strip()
    assert exit_info.value.code == 2 and calls == []
    assert len(err.splitlines()) == 1 and out in err and "Traceback" not in err
    assert a_file.read_text() == "keep me"


def test_the_script_itself_answers_a_bad_out_in_one_line(tmp_path):
    a_file = tmp_path / "README.md"
    a_file.write_text("keep me")
    proc = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "run_demo.py"), "--quick", "--out", str(a_file)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and "exists and is not a folder" in proc.stderr


def test_each_section_says_how_to_reproduce_it(fake_demo, tmp_path):
    run_demo, _ = fake_demo({"alpha": good_section})
    assert run_demo.main(["--quick", "--out", str(tmp_path)]) == 0
    page = (tmp_path / "index.html").read_text()
    assert "<code>.venv/bin/python tools/run_demo.py --quick --only alpha</code>" in page
    assert "<code>.venv/bin/python -m alpha demo --quick</code>" in page
    assert "section wall time" not in page  # a time is not a check; it shows in the headline


def test_a_full_run_says_first_how_long_it_takes_and_what_it_caches(
    run_demo_module, tmp_path, monkeypatch
):
    monkeypatch.setenv("INFERENCE_PIPELINE_CACHE", str(tmp_path))  # an empty cache
    plan = run_demo_module.cache_plan(["minigrad", "inference_pipeline"], quick=False)
    first = run_demo_module.WARM_MINUTES + sum(run_demo_module.FIRST_RUN_MINUTES.values())
    assert plan.startswith(f"About {first} minutes") and str(tmp_path) in plan
    assert "MiniLM" in plan and "GPT" in plan and "later runs reuse them" in plan
    assert run_demo_module.cache_plan(["inference_pipeline"], quick=True) == ""
    assert run_demo_module.cache_plan(["minigrad"], quick=False) == ""
