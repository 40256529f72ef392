"""The demo report as a page to look at: ``index.html`` (offline, images beside it) and
``summary.md`` (the same content for GitHub).

Order, so the first screen tells the story: the title and check count, a headline block with
one line per section (its status and its key figures), every plot, then each section's
detail. Long tables, check lists and logs are folded in ``<details>``; failed checks are never
folded. Table columns with no value in any row are left out. Check texts, captions and
headline figures are inline Markdown (`code`, *emphasis*); logs stay verbatim.
"""

from __future__ import annotations

import html
import os
import re
import urllib.parse
from pathlib import Path

from markdown_it import MarkdownIt

from phase01_common.report import Check, Section, Table, count_checks, format_value

# A table or log longer than this is folded (its title stays visible as the fold's summary).
FOLD_ROWS = 10
FOLD_LINES = 12

# Inline Markdown only: code spans and emphasis. No raw HTML (it is escaped), no links, and
# no entities, so "a&amp;b" in the data is shown as typed.
_INLINE = MarkdownIt("zero").enable(["backticks", "emphasis", "escape"])


def inline_markdown(text: object) -> str:
    """``text`` rendered as inline Markdown to safe HTML (raw HTML in it is escaped)."""
    return _INLINE.renderInline(str(text)).replace("\n", "<br>")


def _esc(text: object) -> str:
    return html.escape(str(text))


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


def shown_columns(table: Table) -> list[int]:
    """Indexes of the columns that hold a value in at least one row (all, if none does)."""
    keep = [
        i
        for i in range(len(table.columns))
        if any(
            i < len(row) and format_value(row[i]).strip() not in ("", "None") for row in table.rows
        )
    ]
    return keep or list(range(len(table.columns)))


def headline_figures(section: Section) -> list[tuple[str, str]]:
    """The section's key figures (without any, its pass count), and its first failure."""
    counts = count_checks([section])
    figures = list(section.headline) or [("checks", f"{counts.passed} of {counts.checks} passed")]
    failed = [c for c in section.checks if not c.passed and not c.benchmark]
    if failed:
        measured = failed[0].measured if len(failed[0].measured) <= 120 else "see below"
        figures.append((f"failed ({counts.failed})", f"{failed[0].name}: {measured}"))
    return figures


# --------------------------------------------------------------------------------------------
# HTML
# --------------------------------------------------------------------------------------------

_CSS = """
body{font-family:system-ui,sans-serif;max-width:1240px;margin:1em auto;padding:0 1em;color:#222;
 line-height:1.35}
h1{margin:.2em 0;font-size:1.6em} h2{border-bottom:2px solid #ddd;padding-bottom:.2em;
 margin-top:1.6em;font-size:1.3em} h3{font-size:1.05em}
.meta{color:#555;margin:.2em 0 .6em} .meta code,.repro code{background:#f3f3f3;padding:0 .25em}
table{border-collapse:collapse;margin:.4em 0 1em} td,th{border:1px solid #ccc;padding:.2em .5em;
 vertical-align:top} th{background:#f3f3f3;text-align:left}
table:not(#headline){display:block;max-width:100%;overflow-x:auto}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
.pass{color:#137333;font-weight:600} .fail{color:#c5221f;font-weight:600}
.missed{color:#b06000;font-weight:600}
#headline{width:100%;margin:0} #headline td{border:none;border-bottom:1px solid #eee;
 padding:.3em .5em} #headline td.status{white-space:nowrap;width:4.5em}
#headline td.name{width:30%} .fig{display:inline-block;margin-right:1.4em}
.fig b{font-variant-numeric:tabular-nums}
.plots{display:grid;grid-template-columns:repeat(auto-fill,minmax(380px,1fr));gap:1em;
 margin:1em 0}
figure{margin:0} figure img{width:100%;max-height:420px;object-fit:contain;
 border:1px solid #eee;background:#fff}
figcaption{color:#555;font-size:.85em}
details{margin:.4em 0} summary{cursor:pointer;color:#333}
pre{background:#f7f7f7;padding:.6em;white-space:pre-wrap;overflow-wrap:anywhere;font-size:.85em}
"""


def _status_html(section: Section) -> str:
    return "<span class='pass'>pass</span>" if section.passed else "<span class='fail'>FAIL</span>"


def _table_html(table: Table, fold: bool) -> list[str]:
    keep = shown_columns(table)
    rows = ["<table><tr>" + "".join(f"<th>{_esc(table.columns[i])}</th>" for i in keep) + "</tr>"]
    for row in table.rows:
        cells = []
        for i in keep:
            v = row[i] if i < len(row) else ""
            if isinstance(v, int | float) and not isinstance(v, bool):
                cells.append(f"<td class='num'>{_esc(format_value(v))}</td>")
            else:
                cells.append(f"<td>{inline_markdown(format_value(v))}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    rows.append("</table>")
    title = inline_markdown(table.title)
    if fold and len(table.rows) > FOLD_ROWS:
        return [
            f"<details><summary>{title} ({len(table.rows)} rows)</summary>",
            *rows,
            "</details>",
        ]
    return [f"<h3>{title}</h3>", *rows]


def _checks_table_html(checks: list[Check]) -> list[str]:
    with_detail = any(c.detail.strip() for c in checks)  # an empty column is left out
    head = "<tr><th>check</th><th>result</th><th>measured</th>"
    out = ["<table>" + head + ("<th>detail</th>" if with_detail else "") + "</tr>"]
    for c in checks:
        css = "pass" if c.passed else ("missed" if c.benchmark else "fail")
        detail = f"<td>{inline_markdown(c.detail)}</td>" if with_detail else ""
        out.append(
            f"<tr><td>{inline_markdown(c.name)}</td><td class='{css}'>{c.status}</td>"
            f"<td>{inline_markdown(c.measured)}</td>{detail}</tr>"
        )
    out.append("</table>")
    return out


def _checks_html(section: Section) -> list[str]:
    failed = [c for c in section.checks if not c.passed and not c.benchmark]
    out = _checks_table_html(failed) if failed else []  # failures are never folded
    summary = f"{count_checks([section])} — every check"
    return [
        *out,
        f"<details><summary>{summary}</summary>",
        *_checks_table_html(section.checks),
        "</details>",
    ]


def _text_html(heading: str, body: str) -> list[str]:
    pre = f"<pre>{_esc(body)}</pre>"
    lines = body.count("\n") + 1
    if lines > FOLD_LINES:
        return [
            f"<details><summary>{inline_markdown(heading)} ({lines} lines)</summary>{pre}</details>"
        ]
    return [f"<h3>{inline_markdown(heading)}</h3>{pre}"]


def _headline_html(sections: list[Section]) -> list[str]:
    out = ["<table id='headline'>"]
    for i, s in enumerate(sections):
        figures = "".join(
            f"<span class='fig'>{inline_markdown(label)}: <b>{inline_markdown(value)}</b></span>"
            for label, value in headline_figures(s)
        )
        seconds = f" <span class='meta'>({s.seconds:.0f} s)</span>" if s.seconds is not None else ""
        out.append(
            f"<tr><td class='status'>{_status_html(s)}</td>"
            f"<td class='name'><a href='#s{i}'>{_esc(s.title)}</a>{seconds}</td>"
            f"<td>{figures}</td></tr>"
        )
    out.append("</table>")
    return out


def _plots_html(sections: list[Section], report_dir: Path) -> list[str]:
    figures = []
    for i, s in enumerate(sections):
        for img in s.images:
            rel = _esc(image_href(img.path, report_dir))
            target = _esc(image_href(img.link, report_dir)) if img.link else rel
            figures.append(
                f"<figure><a href='{target}'><img src='{rel}' alt='{_esc(img.caption)}'></a>"
                f"<figcaption><a href='#s{i}'>{_esc(s.title.split(':')[0])}</a>: "
                f"{inline_markdown(img.caption)}</figcaption></figure>"
            )
    return ["<div class='plots'>", *figures, "</div>"] if figures else []


def _section_html(i: int, section: Section) -> list[str]:
    out = [f"<h2 id='s{i}'>{_esc(section.title)} — {_status_html(section)}</h2>"]
    if section.reproduce:
        commands = " · ".join(f"<code>{_esc(c)}</code>" for c in section.reproduce)
        out.append(f"<p class='repro'>Reproduce: {commands}</p>")
    out += _checks_html(section)
    for t in section.tables:
        out += _table_html(t, fold=True)
    for heading, body in section.texts:
        out += _text_html(heading, body)
    return out


def render_html(
    sections: list[Section], report_dir: Path, title: str, meta: str, reproduce: str = ""
) -> str:
    """The report page: headline block, plots, then each section's detail."""
    counts = count_checks(sections)
    verdict = f"<span class='{'pass' if counts.failed == 0 else 'fail'}'>{counts}</span>"
    out = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        "<meta name='viewport' content='width=device-width'>",
        f"<title>{_esc(title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>{_esc(title)}</h1>",
        f"<p class='meta'>{_esc(meta)} — {verdict}"
        + (f"<br>Reproduce: {inline_markdown(reproduce)}" if reproduce else "")
        + "</p>",
    ]
    out += _headline_html(sections)
    out += _plots_html(sections, report_dir)
    for i, s in enumerate(sections):
        out += _section_html(i, s)
    out.append("</body></html>")
    return "\n".join(out)


# --------------------------------------------------------------------------------------------
# Markdown
# --------------------------------------------------------------------------------------------


def _md(text: object) -> str:
    """Text for Markdown that GitHub would otherwise read as HTML: escape &, < and >."""
    return html.escape(str(text), quote=False)


def _cell(v: object) -> str:
    return _md(format_value(v)).replace("|", "\\|").replace("\n", " ")


def _fence(body: str) -> str:
    """A backtick fence longer than any run of backticks in ``body``, so it cannot close early."""
    longest = max((len(run) for run in re.findall(r"`+", body)), default=0)
    return "`" * max(3, longest + 1)


def _fold_md(summary: str, body: list[str], fold: bool) -> list[str]:
    if not fold:
        return [f"**{summary}**", "", *body, ""]
    # GitHub renders Markdown inside <details> when blank lines surround it.
    return [f"<details><summary>{summary}</summary>", "", *body, "", "</details>", ""]


def _table_md(table: Table) -> list[str]:
    keep = shown_columns(table)
    lines = ["| " + " | ".join(_cell(table.columns[i]) for i in keep) + " |"]
    lines.append("|" + "---|" * len(keep))
    lines += [
        "| " + " | ".join(_cell(row[i] if i < len(row) else "") for i in keep) + " |"
        for row in table.rows
    ]
    return lines


def _section_md(section: Section, report_dir: Path) -> list[str]:
    lines = [f"## {_md(section.title)} — {'pass' if section.passed else 'FAIL'}", ""]
    if section.reproduce:
        lines += ["Reproduce: " + " · ".join(f"`{c}`" for c in section.reproduce), ""]
    checks = ["| check | result | measured |", "|---|---|---|"]
    checks += [
        f"| {_cell(c.name)} | {c.status if c.passed or c.benchmark else '**FAIL**'} "
        f"| {_cell(c.measured)} |"
        for c in section.checks
    ]
    failed = not section.passed
    lines += _fold_md(f"{count_checks([section])}", checks, fold=not failed)
    for t in section.tables:
        lines += _fold_md(_cell(t.title), _table_md(t), fold=len(t.rows) > FOLD_ROWS)
    for img in section.images:
        alt = re.sub(r"([\\\[\]])", r"\\\1", _md(img.caption).replace("\n", " "))
        picture = f"![{alt}]({image_href(img.path, report_dir)})"
        if img.link:
            picture = f"[{picture}]({image_href(img.link, report_dir)})"
        lines += [picture, ""]
    for heading, body in section.texts:
        fence = _fence(body)
        lines += _fold_md(_cell(heading), [fence, body, fence], fold=body.count("\n") >= FOLD_LINES)
    return lines


def render_markdown(
    sections: list[Section], report_dir: Path, title: str, meta: str, reproduce: str = ""
) -> str:
    """summary.md: the headline table first, then each section (long parts folded)."""
    lines = [f"# {_md(title)}", "", f"{_md(meta)} — {count_checks(sections)}", ""]
    if reproduce:
        lines += [f"Reproduce: {reproduce}", ""]
    lines += ["| status | section | key figures |", "|---|---|---|"]
    for s in sections:
        figures = "; ".join(
            f"{_cell(label)}: **{_cell(value)}**" for label, value in headline_figures(s)
        )
        lines.append(f"| {'pass' if s.passed else '**FAIL**'} | {_cell(s.title)} | {figures} |")
    lines.append("")
    for s in sections:
        lines += _section_md(s, report_dir)
    return "\n".join(lines)
