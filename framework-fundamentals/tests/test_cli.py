"""`python -m fundamentals`: every command listed, bad input answered in one line (exit 2)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from fundamentals.__main__ import main
from phase01_common.entry_points import ModuleRun, run_module

LAB = Path(__file__).resolve().parents[1]
COMMANDS = ("autograd", "swish", "tf", "finetune", "demo")


def run_cli(*args: str, cwd: Path) -> ModuleRun:
    """The real entry point in a fresh process; none of these runs may import torch or
    TensorFlow (help and refusals come from the parser and the path checks)."""
    run = run_module("fundamentals", *args, cwd=cwd)
    assert run.heavy_imports() == [], f"{args} imported {run.heavy_imports()}"
    return run


def test_help_lists_every_command(tmp_path: Path):
    proc = run_cli("--help", cwd=tmp_path)
    assert proc.returncode == 0
    for command in COMMANDS:
        assert f"    {command} " in proc.stdout, f"{command} missing from --help"
    for command in COMMANDS:  # each command's own help, from the parser alone
        proc = run_cli(command, "--help", cwd=tmp_path)
        assert proc.returncode == 0 and proc.stderr_lines == [], proc.stderr_lines
        assert f"python -m fundamentals {command}" in proc.stdout


@pytest.mark.parametrize("where", ["a file", "/proc"])
def test_demo_refuses_an_unusable_out_in_one_line(tmp_path: Path, where: str):
    a_file = tmp_path / "README.md"
    a_file.write_text("keep me")
    out = str(a_file) if where == "a file" else "/proc/nope"
    proc = run_cli("demo", "--quick", "--out", out, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr_lines
    assert len(lines) == 1 and out in lines[0] and "Traceback" not in lines[0], lines
    assert a_file.read_text() == "keep me"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md"]  # nothing written


def test_autograd_command_prints_the_worked_example(capsys):
    assert main(["autograd", "--x", "2"]) == 0
    out = capsys.readouterr().out
    assert "dy/dx = 14" in out and "AccumulateGrad" in out  # 6x + 2 at x = 2


@pytest.mark.parametrize(
    ("argv", "named"),
    [(["tf", "--lr", "-1"], "--lr: expected a positive"), (["autograd", "--x", "nan"], "finite")],
)
def test_bad_numbers_get_one_line_and_exit_2(capsys, argv, named):
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse's own refusals exit 2 the same way
        code = exc.code
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and named in err


@pytest.mark.parametrize(
    ("argv", "named"),
    [(["tf", "--lr", "-1"], "--lr"), (["finetune", "--max-length", "0"], "--max-length")],
)
def test_bad_numbers_are_refused_before_torch_or_tensorflow(tmp_path: Path, argv, named):
    proc = run_cli(*argv, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr_lines) == 1 and named in proc.stderr_lines[0], proc.stderr_lines
    assert proc.stderr_lines[0].startswith(f"python -m fundamentals {argv[0]}: error:")


def test_the_library_never_imports_the_harness():
    for module in (LAB / "fundamentals").glob("*.py"):
        if module.name == "__main__.py":
            continue  # the one place allowed to, lazily, for `demo`
        imports = re.findall(
            r"^\s*(?:from|import)\s+(fundamentals_harness\b\S*)", module.read_text(), re.M
        )
        assert not imports, f"{module.name} imports {imports}"
