"""``python -m concepts``: every command listed; bad input is one line and exit status 2."""

from __future__ import annotations

import pytest
from concepts.__main__ import main


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
    assert "error:" in capsys.readouterr().err


def test_precision_command_prints_the_table(capsys):
    assert main(["precision", "--max-exponent", "3"]) == 0
    out = capsys.readouterr().out
    assert "bfloat16" in out and "Welford" in out and "ThreadReduction" in out
