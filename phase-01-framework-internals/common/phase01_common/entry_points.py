"""``python -m <package> ...`` run in a fresh process, with what it imported.

A command line's ``--help`` and its refusals of bad input should not pay for importing torch or
TensorFlow. Whether they do is a property of the real entry point in a fresh interpreter (in
the test process those libraries are often imported already), so :func:`run_module` starts one
and reads the names in its ``sys.modules`` as it exits. The names are written to a file by an
``atexit`` hook, not read from ``-X importtime`` on stderr: a command may mute file descriptor
2 while it imports (lab 03 does, for TensorFlow's native start-up lines), which would hide
exactly the imports in question.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

HEAVY_PACKAGES = ("torch", "tensorflow", "jax", "keras", "transformers")

# runpy.run_module(..., run_name="__main__", alter_sys=True) is what `python -m` does; the
# atexit hook runs after the command's SystemExit, so every exit path reports its imports.
_RUNNER = """
import atexit, json, runpy, sys
modules_file, package = sys.argv[1], sys.argv[2]
def _write_modules():
    with open(modules_file, "w") as f:
        json.dump(sorted(sys.modules), f)
atexit.register(_write_modules)
sys.argv = [package, *sys.argv[3:]]
runpy.run_module(package, run_name="__main__", alter_sys=True)
"""


@dataclass(frozen=True)
class ModuleRun:
    """One finished ``python -m`` process."""

    returncode: int
    stdout: str
    stderr_lines: list[str]  # the non-blank lines the command wrote to stderr
    imported: frozenset[str]  # every module in sys.modules at exit, by full dotted name

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
    """Run ``package`` as ``python -m package *args`` would, with this interpreter and
    environment (TensorFlow's C++ log level at 2), in a fresh process."""
    with tempfile.TemporaryDirectory(prefix="entry-point-") as tmp:
        modules_file = Path(tmp) / "modules.json"
        proc = subprocess.run(
            [sys.executable, "-c", _RUNNER, str(modules_file), package, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            cwd=cwd,
            env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
        )
        if not modules_file.is_file():
            raise RuntimeError(f"python -m {package} exited without reporting its imports")
        imported = frozenset(json.loads(modules_file.read_text()))
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    return ModuleRun(proc.returncode, proc.stdout, lines, imported)
