"""format_bytes (sizes in sensible units) and prepare_out_dir (one-line --out errors)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from phase01_common.cli import OutputFolderError, prepare_out_dir
from phase01_common.units import format_bytes


@pytest.mark.parametrize(
    ("size", "shown"),
    [
        (0, "0 B"),
        (17, "17 B"),
        (2_048, "2.05 KB"),  # a 2 KB model is not "0.00 MB"
        (999_960, "1 MB"),  # rounds up a unit rather than to "1e+03 KB"
        (1_500_000, "1.5 MB"),
        (87_654_321, "87.7 MB"),
        (5.5e12, "5.5 TB"),
        (-2_048, "-2.05 KB"),
        (3e18, "3000 PB"),
    ],
)
def test_format_bytes_decimal(size, shown):
    assert format_bytes(size) == shown


def test_format_bytes_binary():
    assert format_bytes(1024, binary=True) == "1 KiB"
    assert format_bytes(1_500_000, binary=True) == "1.43 MiB"


@pytest.mark.parametrize("bad", [math.nan, math.inf, "12", True])
def test_format_bytes_refuses_what_is_not_a_size(bad):
    with pytest.raises((TypeError, ValueError)):
        format_bytes(bad)


def test_prepare_out_dir_creates_nested_folders(tmp_path: Path):
    folder = prepare_out_dir(tmp_path / "a" / "b")
    assert folder.is_dir() and list(folder.iterdir()) == []  # its write probe leaves nothing


@pytest.mark.parametrize("where", ["file", "proc", "under_a_file"])
def test_prepare_out_dir_refuses_with_one_line(tmp_path: Path, where: str):
    a_file = tmp_path / "notes.md"
    a_file.write_text("x")
    target = {
        "file": a_file,
        "proc": Path("/proc/nope"),
        "under_a_file": a_file / "sub",
    }[where]
    with pytest.raises(OutputFolderError) as info:
        prepare_out_dir(target)
    message = str(info.value)
    assert "\n" not in message and str(target) in message
    assert a_file.read_text() == "x"


def test_one_line_parser_errors(capsys):
    from phase01_common.cli import OneLineArgumentParser

    parser = OneLineArgumentParser(prog="tool")
    parser.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["--n", "x"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("tool: error: argument --n")
