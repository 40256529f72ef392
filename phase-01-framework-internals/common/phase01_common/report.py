"""The demo report's vocabulary: each lab returns a :class:`Section`; ``tools/run_demo.py``
renders them all into ``report/index.html`` and ``report/summary.md``.

A lab's section builder has the signature::

    def build_section(out_dir: pathlib.Path, quick: bool) -> Section

``out_dir`` is the lab's own folder inside the report (images go there); ``quick`` asks for
the fast variant used by the report's own test. Every figure must be measured in that call.
"""

from __future__ import annotations

import math
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


@dataclass
class Table:
    """A small table of measured numbers (floats are formatted by the renderer)."""

    title: str
    columns: list[str]
    rows: list[list[object]]

    def has_nan(self) -> bool:
        return any(isinstance(v, float) and math.isnan(v) for row in self.rows for v in row)


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

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


@contextmanager
def step(description: str) -> Iterator[None]:
    """Announce a long step and report how long it took (progress for the demo)."""
    print(f"  … {description}", flush=True)
    start = time.perf_counter()
    yield
    print(f"  ✓ {description} ({time.perf_counter() - start:.1f} s)", flush=True)
