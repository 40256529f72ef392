"""format_bytes / format_count (numbers for people), the output-path checks (one-line errors
before any work), positive_int and the one-line parser."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest
from phase01_common.cli import (
    OneLineArgumentParser,
    OutputPathError,
    check_out_file,
    positive_int,
    prepare_out_dir,
)
from phase01_common.units import format_bytes, format_count


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
    with pytest.raises(OutputPathError) as info:
        prepare_out_dir(target)
    message = str(info.value)
    assert "\n" not in message and str(target) in message
    assert a_file.read_text() == "x"


def test_one_line_parser_errors(capsys):
    parser = OneLineArgumentParser(prog="tool")
    parser.add_argument("--n", type=int)
    with pytest.raises(SystemExit) as info:
        parser.parse_args(["--n", "x"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and len(err.strip().splitlines()) == 1
    assert err.startswith("tool: error: argument --n")


def test_prepare_out_dir_without_create_leaves_nothing_behind(tmp_path: Path):
    target = tmp_path / "a" / "b"
    assert prepare_out_dir(target, "--logdir", create=False) == target
    assert not (tmp_path / "a").exists()
    existing = tmp_path / "kept"
    existing.mkdir()
    prepare_out_dir(existing, create=False)
    assert existing.is_dir()  # a folder that was there stays


def test_prepare_out_dir_names_the_option_and_the_file_in_the_way(tmp_path: Path):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    with pytest.raises(OutputPathError, match=r"^--logdir .*: .*a_file is a file, not a folder$"):
        prepare_out_dir(a_file / "sub", "--logdir")
    with pytest.raises(OutputPathError, match="exists and is not a folder"):
        prepare_out_dir(a_file)


def test_check_out_file(tmp_path: Path):
    assert check_out_file(tmp_path / "r.json", "--json") == tmp_path / "r.json"
    assert list(tmp_path.iterdir()) == []  # checked, not created
    for bad, why in ((tmp_path, "is a folder"), (tmp_path / "no" / "r.json", "does not exist")):
        with pytest.raises(OutputPathError, match=why):
            check_out_file(bad, "--json")
    with pytest.raises(OutputPathError, match="cannot write there"):
        check_out_file("/proc/r.json", "--json")


@pytest.mark.parametrize(("text", "value"), [("1", 1), ("64", 64)])
def test_positive_int_accepts_whole_numbers_from_one(text, value):
    assert positive_int(text) == value


@pytest.mark.parametrize(("text", "why"), [("0", "positive"), ("-3", "positive"), ("2.5", "int")])
def test_positive_int_refuses(text, why):
    with pytest.raises(argparse.ArgumentTypeError, match=why):
        positive_int(text)


def test_format_count():
    assert format_count(1_234_567) == "1.23 M"
    assert format_count(12) == "12 "
    assert format_count(999) == "999 "
    assert format_count(2.5e15) == "2.5 P"


def test_one_line_parser_names_the_program_in_subcommand_errors(capsys):
    class Parser(OneLineArgumentParser):
        error_name = "tool"

    parser = Parser(prog="python -m tool")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run").add_argument("--n", type=positive_int)
    with pytest.raises(SystemExit):
        parser.parse_args(["run", "--n", "0"])
    err = capsys.readouterr().err
    assert err.startswith("tool: error: argument --n: must be a positive size, got 0")
