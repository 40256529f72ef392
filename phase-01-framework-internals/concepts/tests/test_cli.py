"""``python -m concepts``: every command listed; bad input is one line and exit status 2."""

from __future__ import annotations

import pytest
from concepts.__main__ import main
from phase01_common.entry_points import run_module


def test_help_lists_every_command(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for command in ("compile", "fx", "precision", "memory", "demo"):
        assert command in out


@pytest.mark.parametrize(
    "argv",
    [["precision", "--max-exponent", "9"], ["compile", "--batch", "0"], ["nonsense"]],
)
def test_bad_input_exits_2(argv, capsys):
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    # one line, no usage block above it (argparse's default prints two)
    assert len(lines) == 1 and lines[0].startswith("python -m concepts"), captured.err
    assert "error:" in lines[0] and captured.out == ""


@pytest.mark.parametrize("where", ["file", "unwritable"])
def test_demo_out_that_cannot_be_written_is_one_line_before_any_work(where, tmp_path, capsys):
    # `--out README.md` (a file) and `--out /proc/nope` end in one line before any work, not in
    # a mkdir traceback.
    target = tmp_path / "a_file"
    target.write_text("")
    out = target if where == "file" else target / "sub"
    assert main(["demo", "--quick", "--out", str(out)]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("python -m concepts demo: error: --out"), lines
    assert captured.out == ""


def test_precision_command_prints_the_table(capsys):
    assert main(["precision", "--max-exponent", "3"]) == 0
    out = capsys.readouterr().out
    assert "bfloat16" in out and "Welford" in out and "ThreadReduction" in out


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["compile", "--help"], ["compile", "--batch", "0"], ["demo", "--out", "{file}"]],
)
def test_help_and_bad_input_do_not_import_torch(argv, tmp_path):
    # The real entry point in a fresh process: --help, a subcommand's help, a usage error and
    # an --out refused by the demo answer from the parser and the path check, before torch.
    (tmp_path / "a_file").write_text("")
    argv = [a.format(file=tmp_path / "a_file") for a in argv]
    run = run_module("concepts", *argv, cwd=tmp_path)
    assert run.heavy_imports() == [], run.heavy_imports()
    assert "concepts" in run.imported
    if "--help" in argv:
        assert run.returncode == 0 and run.stderr_lines == [] and "usage:" in run.stdout
    else:
        assert run.returncode == 2 and run.stdout == ""
        assert len(run.stderr_lines) == 1, run.stderr_lines
        assert run.stderr_lines[0].startswith("python -m concepts"), run.stderr_lines
        assert "error:" in run.stderr_lines[0] and "Traceback" not in run.stderr_lines[0]
