"""`python -m fundamentals`: every command listed, bad input answered in one line (exit 2)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from fundamentals.__main__ import main

LAB = Path(__file__).resolve().parents[1]
COMMANDS = ("autograd", "swish", "tf", "finetune", "demo")


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fundamentals", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
    )


def test_help_lists_every_command(tmp_path: Path):
    proc = run_cli("--help", cwd=tmp_path)
    assert proc.returncode == 0
    for command in COMMANDS:
        assert f"    {command} " in proc.stdout, f"{command} missing from --help"


@pytest.mark.parametrize("where", ["a file", "/proc"])
def test_demo_refuses_an_unusable_out_in_one_line(tmp_path: Path, where: str):
    a_file = tmp_path / "README.md"
    a_file.write_text("keep me")
    out = str(a_file) if where == "a file" else "/proc/nope"
    proc = run_cli("demo", "--quick", "--out", out, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and out in lines[0] and "Traceback" not in proc.stderr
    assert a_file.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]  # nothing written


def test_autograd_command_prints_the_worked_example(capsys):
    assert main(["autograd", "--x", "2"]) == 0
    out = capsys.readouterr().out
    assert "dy/dx = 14" in out and "AccumulateGrad" in out  # 6x + 2 at x = 2


@pytest.mark.parametrize(
    ("argv", "named"),
    [(["tf", "--lr", "-1"], "learning_rate"), (["autograd", "--x", "nan"], "finite")],
)
def test_bad_numbers_get_one_line_and_exit_2(capsys, argv, named):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals exit 2 the same way
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and named in err


def test_the_library_never_imports_the_harness():
    for module in (LAB / "fundamentals").glob("*.py"):
        if module.name == "__main__.py":
            continue  # the one place allowed to, lazily, for `demo`
        imports = re.findall(
            r"^\s*(?:from|import)\s+(fundamentals_harness\b\S*)", module.read_text(), re.M
        )
        assert not imports, f"{module.name} imports {imports}"
