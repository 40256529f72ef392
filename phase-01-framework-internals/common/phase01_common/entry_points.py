"""``python -m <package> ...`` run in a fresh process, with what it imported.

A command line's ``--help`` and its refusals of bad input should not pay for importing torch or
TensorFlow. Whether they do is a property of the real entry point in a fresh interpreter (in
the test process those libraries are often imported already), so :func:`run_module` starts one
with ``-X importtime`` and reads the imported packages from that log: CPython writes one
``import time:`` line to stderr for every module it imports, and those lines are separated
from the command's own stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

HEAVY_PACKAGES = ("torch", "tensorflow", "jax", "keras", "transformers")

_IMPORT_TIME = "import time:"


@dataclass(frozen=True)
class ModuleRun:
    """One finished ``python -m`` process."""

    returncode: int
    stdout: str
    stderr_lines: list[str]  # the command's own stderr, without the import-time log
    imported: frozenset[str]  # every module imported, by full dotted name

    def heavy_imports(self, packages: tuple[str, ...] = HEAVY_PACKAGES) -> list[str]:
        """The ``packages`` (top-level names) that were imported, sorted."""
        tops = {name.split(".")[0] for name in self.imported}
        return sorted(tops.intersection(packages))


def run_module(
    package: str,
    *args: str,
    cwd: Path | str | None = None,
    timeout: float = 120,
) -> ModuleRun:
    """Run ``python -X importtime -m package *args`` with this interpreter and environment."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", package, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=cwd,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    own, imported = [], set()
    for line in proc.stderr.splitlines():
        if line.startswith(_IMPORT_TIME):
            name = line.rsplit("|", 1)[-1].strip()
            if name != "imported package":  # the log's header line
                imported.add(name)
        elif line.strip():
            own.append(line)
    return ModuleRun(proc.returncode, proc.stdout, own, frozenset(imported))
