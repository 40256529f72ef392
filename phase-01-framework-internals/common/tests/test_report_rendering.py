"""The report renderer: non-finite numbers are caught, Markdown is escaped, images never crash it.

The Markdown checks parse ``summary.md`` with markdown-it (CommonMark, as GitHub renders it;
installed with rich), so they test what a reader sees, not the characters written.
"""

from __future__ import annotations

import html
import os
import re
from pathlib import Path

import numpy as np
import pytest
from markdown_it import MarkdownIt
from phase01_common.render import image_href, render_html, render_markdown
from phase01_common.report import (
    Check,
    Image,
    Section,
    Table,
    nan_table_checks,
)
from PIL import Image as PILImage


def shown_markdown(md: str) -> str:
    """The text a reader sees once ``md`` is rendered (tags dropped, entities decoded)."""
    rendered = MarkdownIt("commonmark").enable("table").render(md)
    return html.unescape(re.sub(r"<[^>]+>", " ", rendered))


@pytest.mark.parametrize(
    "value",
    [
        np.float32("nan"),
        np.float16("nan"),
        np.array(float("nan")),  # a 0-d array, as a reduction returns
        np.array([1.0, np.inf], dtype=np.float32),
        float("inf"),
        float("-inf"),
        np.float32("inf"),
        np.float64("-inf"),
        np.array(-np.inf),
        complex(float("nan"), 0.0),
        "nan",
        "NaN",
        " -Inf ",
        "INF",
    ],
    ids=repr,
)
def test_table_has_nan_catches_every_non_finite_value(value):
    table = Table("t", ["name", "value"], [["ok", 1.5], ["bad", value]])
    assert table.has_nan()
    checks = nan_table_checks(Section("s", tables=[table]))
    assert len(checks) == 1 and not checks[0].passed


@pytest.mark.parametrize(
    "value",
    [1.5, 0.0, np.float32(2.5), np.array(3.0), 7, True, None, "inference", "infinite", "n/a", ""],
    ids=repr,
)
def test_table_has_nan_leaves_finite_values_and_words_alone(value):
    assert not Table("t", ["v"], [[value]]).has_nan()


def test_markdown_escapes_html_in_checks_and_tables(tmp_path: Path):
    section = Section(
        "Lab <x> & co",
        checks=[
            Check("spec of <input>", True, "TensorSpec(shape=<unknown>, dtype=tf.int32)"),
            Check("a & b", False, "x<y>z"),
        ],
        tables=[Table("sizes <MB>", ["op <kind>", "n"], [["<b>MatMul</b>", 3], ["a&amp;b", 1]])],
    )
    md = render_markdown([section], tmp_path, "title <t>", "meta & more")
    shown = shown_markdown(md)
    for text in (
        "TensorSpec(shape=<unknown>, dtype=tf.int32)",
        "spec of <input>",
        "x<y>z",
        "a & b",
        "sizes <MB>",
        "op <kind>",
        "<b>MatMul</b>",
        "a&amp;b",  # an entity in the data is shown as typed, not decoded
        "Lab <x> & co",
        "title <t>",
    ):
        assert text in shown, f"{text!r} is lost when summary.md is rendered"
    assert "<unknown>" not in md  # escaped in the file itself


def test_markdown_text_fence_survives_backticks_in_the_body(tmp_path: Path):
    body = "before\n```\ninside\n```\nafter ```` four"
    section = Section("s", texts=[("retrace", body)])
    md = render_markdown([section], tmp_path, "t", "m")
    fences = [t for t in MarkdownIt("commonmark").parse(md) if t.type == "fence"]
    assert len(fences) == 1 and fences[0].content == body + "\n"


def test_image_outside_the_report_folder_does_not_crash_rendering(tmp_path: Path):
    report_dir = tmp_path / "report"
    report_dir.mkdir()
    outside = tmp_path / "elsewhere" / "plot.png"
    outside.parent.mkdir()
    PILImage.new("RGB", (32, 32), "white").save(outside)
    section = Section("s", images=[Image(outside, "a plot")])
    page = render_html([section], report_dir, "t", "m")
    md = render_markdown([section], report_dir, "t", "m")
    assert outside.as_uri() in page and outside.as_uri() in md


def test_image_linked_into_the_report_folder_gets_a_relative_url(tmp_path: Path):
    report_dir = tmp_path / "report"
    (report_dir / "lab").mkdir(parents=True)
    target = tmp_path / "cache" / "plot.png"
    target.parent.mkdir()
    PILImage.new("RGB", (32, 32), "white").save(target)
    link = report_dir / "lab" / "plot.png"
    os.symlink(target, link)
    section = Section("s", images=[Image(link, "linked")])
    assert "src='lab/plot.png'" in render_html([section], report_dir, "t", "m")
    assert "](lab/plot.png)" in render_markdown([section], report_dir, "t", "m")


def test_image_url_is_percent_encoded(tmp_path: Path):
    path = tmp_path / "lab" / "loss curve #1 (log).png"
    assert image_href(path, tmp_path) == "lab/loss%20curve%20%231%20%28log%29.png"
    md = render_markdown([Section("s", images=[Image(path, "loss [log]")])], tmp_path, "t", "m")
    tokens = [t for block in MarkdownIt("commonmark").parse(md) for t in block.children or []]
    image = next(t for t in tokens if t.type == "image")
    assert image.attrs["src"] == "lab/loss%20curve%20%231%20%28log%29.png"
    assert "".join(t.content for t in image.children) == "loss [log]"  # the alt text


def test_a_picture_with_a_link_opens_the_linked_file(tmp_path: Path):
    """An overview drawing links to the full drawing behind it (Lab 03's FuncGraph)."""
    report_dir = tmp_path / "report"
    (report_dir / "lab").mkdir(parents=True)
    overview, full = report_dir / "lab" / "overview.svg", report_dir / "lab" / "full.svg"
    section = Section("s", images=[Image(overview, "graph", link=full), Image(full, "plain")])
    page = render_html([section], report_dir, "t", "m")
    assert "<a href='lab/full.svg'><img src='lab/overview.svg'" in page
    assert "<a href='lab/full.svg'><img src='lab/full.svg'" in page  # no link: the picture
    assert "[![graph](lab/overview.svg)](lab/full.svg)" in render_markdown(
        [section], report_dir, "t", "m"
    )
