"""The demo report's vocabulary: each lab returns a :class:`Section`; ``tools/run_demo.py``
renders them all (:mod:`phase01_common.render`) into ``report/index.html`` and
``report/summary.md``.

A lab's section builder has the signature::

    def build_section(out_dir: pathlib.Path, quick: bool) -> Section

``out_dir`` is the lab's own folder inside the report (images go there); ``quick`` asks for
the fast variant used by the report's own test. Every figure must be measured in that call.
"""

from __future__ import annotations

import cmath
import math
import numbers
import time
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
    # Where a click on the picture goes (for example the full graph behind an overview);
    # the picture itself when None. A file inside the section's ``out_dir``.
    link: Path | None = None


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
    # Set by the report driver, not by labs: commands that rerun this section, and its time.
    reproduce: list[str] = field(default_factory=list)
    seconds: float | None = None

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks if not c.benchmark)


@dataclass(frozen=True)
class CheckCounts:
    """Checks and benchmark targets counted once, so the console and the report agree."""

    checks: int
    failed: int
    targets: int
    targets_met: int

    @property
    def passed(self) -> int:
        return self.checks - self.failed

    def __str__(self) -> str:
        text = (
            f"all {self.checks} checks passed"
            if self.failed == 0
            else f"{self.failed} of {self.checks} checks failed"
        )
        if self.targets:
            text += f"; {self.targets_met} of {self.targets} benchmark targets met"
        return text


def count_checks(sections: list[Section]) -> CheckCounts:
    """Tests (``benchmark=False``) and speed targets (``benchmark=True``) counted apart."""
    checks = [c for s in sections for c in s.checks if not c.benchmark]
    targets = [c for s in sections for c in s.checks if c.benchmark]
    return CheckCounts(
        checks=len(checks),
        failed=sum(not c.passed for c in checks),
        targets=len(targets),
        targets_met=sum(c.passed for c in targets),
    )


@contextmanager
def step(description: str) -> Iterator[None]:
    """Announce a long step and report how long it took (progress for the demo)."""
    print(f"  … {description}", flush=True)
    start = time.perf_counter()
    yield
    print(f"  ✓ {description} ({time.perf_counter() - start:.1f} s)", flush=True)


# --------------------------------------------------------------------------------------------
# Text: numbers as shown, and a section as console text. The HTML page and the Markdown
# summary are drawn by phase01_common.render.
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


def section_text(section: Section, max_rows: int = 12) -> str:
    """A section as terminal text, for each lab's ``python -m <package> demo``."""
    lines = [section.title]
    lines += [f"  ▸ {label}: {value}" for label, value in section.headline]
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
    lines.append(f"\n{count_checks([section])}")
    return "\n".join(lines)
