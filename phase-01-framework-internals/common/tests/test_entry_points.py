"""``run_module``: a fresh ``python -m`` process, its exit status, its stderr and its imports."""

from __future__ import annotations

from phase01_common.entry_points import run_module


def test_imports_are_seen_even_while_stderr_is_muted(tmp_path):
    # A command that mutes file descriptor 2 for an import (as lab 03 does for TensorFlow)
    # hides that import from -X importtime; sys.modules at exit still has it.
    (tmp_path / "muted_cmd.py").write_text(
        "import os, sys\n"
        "saved = os.dup(2)\n"
        "os.dup2(os.open(os.devnull, os.O_WRONLY), 2)\n"
        "import wave\n"
        "os.dup2(saved, 2)\n"
        "print('ran', sys.argv[1:])\n"
        "sys.exit('muted_cmd: error: one line')\n"
    )
    run = run_module("muted_cmd", "--flag", cwd=tmp_path)
    assert "wave" in run.imported and "muted_cmd" not in run.imported  # run as __main__
    assert run.returncode == 1 and run.stdout == "ran ['--flag']\n"
    assert run.stderr_lines == ["muted_cmd: error: one line"]
    assert run.heavy_imports() == []
    assert run.heavy_imports(("wave", "torch")) == ["wave"]
