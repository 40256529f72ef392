"""The demo report's vocabulary: each lab returns a :class:`Section`; ``tools/run_demo.py``
renders them all into ``report/index.html`` and ``report/summary.md``.

A lab's section builder has the signature::

    def build_section(out_dir: pathlib.Path, quick: bool) -> Section

``out_dir`` is the lab's own folder inside the report (images go there); ``quick`` asks for
the fast variant used by the report's own test. Every figure must be measured in that call.
"""

from __future__ import annotations

import cmath
import html
import math
import numbers
import os
import re
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Check:
    """One acceptance check: what was checked, whether it passed, and the measured figure."""

    name: str
    passed: bool
    measured: str
    detail: str = ""
    # A benchmark target (a speed goal) is shown as met or missed but never fails the run:
    # timings move with machine load, and benchmarks are not tests.
    benchmark: bool = False

    @property
    def status(self) -> str:
        if self.benchmark:
            return "target met" if self.passed else "target missed"
        return "pass" if self.passed else "FAIL"


@dataclass
class Table:
    """A small table of measured numbers (floats are formatted by the renderer)."""

    title: str
    columns: list[str]
    rows: list[list[object]]

    def has_nan(self) -> bool:
        """Whether any cell is not a finite number: NaN or ±inf of any numeric type (Python,
        NumPy scalar, 0-d array), or the text "nan", "inf" or "-inf" in any case."""
        return any(is_non_finite(v) for row in self.rows for v in row)


_NON_FINITE_TEXT = {
    "nan",
    "+nan",
    "-nan",
    "inf",
    "+inf",
    "-inf",
    "infinity",
    "+infinity",
    "-infinity",
}


def is_non_finite(value: object) -> bool:
    """True for NaN and ±inf in any numeric form, and for their spellings as text."""
    if isinstance(value, bool):
        return False
    if isinstance(value, str | bytes):
        text = value.decode(errors="replace") if isinstance(value, bytes) else value
        return text.strip().lower() in _NON_FINITE_TEXT
    if isinstance(value, numbers.Complex) and not isinstance(value, numbers.Real):
        try:
            return not cmath.isfinite(complex(value))
        except (TypeError, ValueError, OverflowError):
            return False
    tolist = getattr(value, "tolist", None)  # NumPy scalars and arrays (any shape)
    if callable(tolist) and not isinstance(value, numbers.Number | list | tuple):
        try:
            items = tolist()
        except Exception:
            items = None
        if items is not None and items is not value:
            return is_non_finite(items)
    if isinstance(value, list | tuple):
        return any(is_non_finite(v) for v in value)
    try:
        return not math.isfinite(float(value))  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return False


@dataclass
class Image:
    """A picture the report shows; ``path`` is a file inside the section's ``out_dir``."""

    path: Path
    caption: str


@dataclass
class Section:
    title: str
    checks: list[Check] = field(default_factory=list)
    tables: list[Table] = field(default_factory=list)
    images: list[Image] = field(default_factory=list)
    # Preformatted text blocks (for example retrace explanations), shown verbatim.
    texts: list[tuple[str, str]] = field(default_factory=list)
    # The section's 2-3 key figures as (label, value), shown in the report's opening block,
    # for example ("worst gradient error vs torch", "3e-14 (limit 1e-5)").
    headline: list[tuple[str, str]] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks if not c.benchmark)


@contextmanager
def step(description: str) -> Iterator[None]:
    """Announce a long step and report how long it took (progress for the demo)."""
    print(f"  … {description}", flush=True)
    start = time.perf_counter()
    yield
    print(f"  ✓ {description} ({time.perf_counter() - start:.1f} s)", flush=True)


# --------------------------------------------------------------------------------------------
# Rendering: one HTML page (images beside it, no network) and a Markdown summary.
# --------------------------------------------------------------------------------------------


def format_value(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if value == 0 or 1e-3 <= abs(value) < 1e5:
            return f"{value:.4g}"
        return f"{value:.3e}"
    return str(value)


def nan_table_checks(section: Section) -> list[Check]:
    """A table holding NaN or inf is a failure the report must show, not a number to print."""
    return [
        Check(f"table '{t.title}' has no NaN", False, "NaN or inf found")
        for t in section.tables
        if t.has_nan()
    ]


def _esc(text: object) -> str:
    return html.escape(str(text))


_CSS = """
body{font-family:system-ui,sans-serif;max-width:1100px;margin:2em auto;padding:0 1em;color:#222}
h1{margin-bottom:.2em} h2{border-bottom:2px solid #ddd;padding-bottom:.2em;margin-top:2em}
table{border-collapse:collapse;margin:.6em 0 1.2em} td,th{border:1px solid #ccc;padding:.25em .6em}
th{background:#f3f3f3} td.num{text-align:right;font-variant-numeric:tabular-nums}
.pass{color:#137333;font-weight:600} .fail{color:#c5221f;font-weight:600}
.missed{color:#b06000;font-weight:600}
figure{margin:1em 0} figure img{max-width:100%;border:1px solid #eee}
figcaption{color:#555;font-size:.9em}
pre{background:#f7f7f7;padding:.6em;white-space:pre-wrap;overflow-wrap:anywhere}
"""


def render_html(sections: list[Section], report_dir: Path, title: str, meta: str) -> str:
    checks = [c for s in sections for c in s.checks if not c.benchmark]
    targets = [c for s in sections for c in s.checks if c.benchmark]
    failed = sum(not c.passed for c in checks)
    verdict = (
        f'<span class="pass">all {len(checks)} checks passed</span>'
        if failed == 0
        else f'<span class="fail">{failed} of {len(checks)} checks failed</span>'
    )
    if targets:
        met = sum(c.passed for c in targets)
        verdict += f"; {met} of {len(targets)} benchmark targets met"
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_esc(title)}</h1><p>{_esc(meta)} — {verdict}</p><ul>",
    ]
    out += [
        f"<li><a href='#s{i}'>{_esc(s.title)}</a> — "
        + ("<span class='pass'>pass</span>" if s.passed else "<span class='fail'>FAIL</span>")
        + "</li>"
        for i, s in enumerate(sections)
    ]
    out.append("</ul>")
    for i, s in enumerate(sections):
        out.append(f"<h2 id='s{i}'>{_esc(s.title)}</h2>")
        out.append("<table><tr><th>check</th><th>result</th><th>measured</th><th>detail</th></tr>")
        for c in s.checks:
            css = "pass" if c.passed else ("missed" if c.benchmark else "fail")
            mark = f"<span class='{css}'>{c.status}</span>"
            out.append(
                f"<tr><td>{_esc(c.name)}</td><td>{mark}</td><td>{_esc(c.measured)}</td>"
                f"<td>{_esc(c.detail)}</td></tr>"
            )
        out.append("</table>")
        for t in s.tables:
            out.append(f"<h3>{_esc(t.title)}</h3><table><tr>")
            out += [f"<th>{_esc(col)}</th>" for col in t.columns]
            out.append("</tr>")
            for row in t.rows:
                cells = "".join(
                    f"<td class='num'>{_esc(format_value(v))}</td>"
                    if isinstance(v, int | float) and not isinstance(v, bool)
                    else f"<td>{_esc(format_value(v))}</td>"
                    for v in row
                )
                out.append(f"<tr>{cells}</tr>")
            out.append("</table>")
        for img in s.images:
            rel = image_href(img.path, report_dir)
            out.append(
                f"<figure><img src='{_esc(rel)}' alt='{_esc(img.caption)}'>"
                f"<figcaption>{_esc(img.caption)}</figcaption></figure>"
            )
        for heading, body in s.texts:
            out.append(f"<h3>{_esc(heading)}</h3><pre>{_esc(body)}</pre>")
    out.append("</body></html>")
    return "\n".join(out)


def _md(text: object) -> str:
    """Text for Markdown that GitHub would otherwise read as HTML: escape &, < and >."""
    return html.escape(str(text), quote=False)


def _fence(body: str) -> str:
    """A backtick fence longer than any run of backticks in ``body``, so it cannot close early."""
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    return "`" * max(3, longest + 1)


def image_href(path: Path | str, report_dir: Path) -> str:
    """The URL of an image as seen from the report folder, percent-encoded.

    A file inside the report folder (directly, or through a link placed there) gets a relative
    URL; anything else, which ``tools/run_demo.py`` copies in first, falls back to a file: URL
    rather than failing the whole report.
    """
    path = Path(path)
    report_dir = Path(report_dir)
    for candidate, base in (
        (path.resolve(), report_dir.resolve()),
        (Path(os.path.abspath(path)), Path(os.path.abspath(report_dir))),
    ):
        if candidate.is_relative_to(base):
            return urllib.parse.quote(candidate.relative_to(base).as_posix())
    return path.resolve().as_uri()


def render_markdown(sections: list[Section], report_dir: Path, title: str, meta: str) -> str:
    def cell(v: object) -> str:
        return _md(format_value(v)).replace("|", "\\|").replace("\n", " ")

    lines = [f"# {_md(title)}", "", _md(meta), ""]
    for s in sections:
        lines += [f"## {_md(s.title)} — {'pass' if s.passed else 'FAIL'}", ""]
        lines += ["| check | result | measured |", "|---|---|---|"]
        lines += [
            f"| {cell(c.name)} | {c.status if c.passed or c.benchmark else '**FAIL**'} "
            f"| {cell(c.measured)} |"
            for c in s.checks
        ]
        lines.append("")
        for t in s.tables:
            lines += [f"**{cell(t.title)}**", "", "| " + " | ".join(map(cell, t.columns)) + " |"]
            lines.append("|" + "---|" * len(t.columns))
            lines += ["| " + " | ".join(map(cell, row)) + " |" for row in t.rows]
            lines.append("")
        for img in s.images:
            alt = re.sub(r"([\\\[\]])", r"\\\1", _md(img.caption).replace("\n", " "))
            lines += [f"![{alt}]({image_href(img.path, report_dir)})", ""]
        for heading, body in s.texts:
            fence = _fence(body)
            lines += [f"**{cell(heading)}**", "", fence, body, fence, ""]
    return "\n".join(lines)


def section_text(section: Section, max_rows: int = 12) -> str:
    """A section as terminal text, for each lab's ``python -m <package>`` demo."""
    lines = [section.title]
    for c in section.checks:
        lines.append(
            f"  [{c.status}] {c.name}: {c.measured}" + (f" ({c.detail})" if c.detail else "")
        )
    for t in section.tables:
        lines += ["", f"  {t.title}", "    " + " | ".join(t.columns)]
        lines += ["    " + " | ".join(map(format_value, row)) for row in t.rows[:max_rows]]
        if len(t.rows) > max_rows:
            lines.append(f"    … {len(t.rows) - max_rows} more rows in the report")
    for heading, body in section.texts:
        lines += ["", f"  {heading}", *("    " + line for line in body.splitlines())]
    lines += [f"  image: {img.path} ({img.caption})" for img in section.images]
    failed = sum(not c.passed and not c.benchmark for c in section.checks)
    lines.append(f"\n{len(section.checks) - failed}/{len(section.checks)} checks passed")
    return "\n".join(lines)
