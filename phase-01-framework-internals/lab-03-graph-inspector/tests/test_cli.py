"""`python -m graph_inspector`: one-line errors, inspect, convert."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from phase01_common.entry_points import ModuleRun, run_module

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import tensorflow as tf  # noqa: E402
from graph_inspector import cli  # noqa: E402


def run_in_process(capfd, *args: str) -> subprocess.CompletedProcess:
    """``cli.main`` in this process (no second TensorFlow import); ``capfd`` captures file
    descriptors 1 and 2, so TensorFlow's native log lines would be caught as in a subprocess."""
    capfd.readouterr()
    code = cli.main(list(args))
    captured = capfd.readouterr()
    return subprocess.CompletedProcess(args, code, captured.out, captured.err)


def assert_one_line_error(proc: subprocess.CompletedProcess, needle: str) -> None:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("graph_inspector: error:") and needle in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("command", ["inspect", "convert"])
def test_cli_bad_path_and_not_a_savedmodel(tmp_path, command, capfd):
    proc = run_in_process(capfd, command, str(tmp_path / "missing"))
    assert_one_line_error(proc, "no such file or directory")
    assert proc.returncode == cli.EXIT_USAGE
    proc = run_in_process(capfd, command, str(tmp_path))
    assert_one_line_error(proc, "is not a SavedModel")
    assert proc.returncode == cli.EXIT_USAGE


def assert_one_line_from_the_entry_point(run: ModuleRun, needle: str) -> None:
    """``assert_one_line_error`` for a real ``python -m graph_inspector`` process."""
    proc = subprocess.CompletedProcess([], run.returncode, run.stdout, "\n".join(run.stderr_lines))
    assert_one_line_error(proc, needle)
    assert run.returncode == cli.EXIT_USAGE and run.stdout == ""


def test_cli_corrupt_savedmodel_is_one_line_from_the_entry_point(tmp_path):
    # A saved_model.pb that is no protocol buffer is refused by the folder check, before
    # TensorFlow is imported.
    (tmp_path / "saved_model.pb").write_bytes(b"not a protobuf")
    run = run_module("graph_inspector", "inspect", str(tmp_path))
    assert_one_line_from_the_entry_point(run, "could not be loaded as a SavedModel")
    assert "is not a protocol buffer" in run.stderr_lines[0]
    assert run.heavy_imports() == [], run.heavy_imports()


def test_cli_savedmodel_refused_by_tensorflow_is_one_line_from_the_entry_point(tmp_path):
    # The one real process that imports TensorFlow: a well-formed SavedModel message (schema
    # version 1) with no MetaGraph passes the folder check and is refused by tf.saved_model.load.
    # TensorFlow's native start-up lines (absl, oneDNN) go to file descriptor 2 even at
    # TF_CPP_MIN_LOG_LEVEL=2; the quiet import keeps them off, so the error stays one line.
    (tmp_path / "saved_model.pb").write_bytes(b"\x08\x01")
    run = run_module("graph_inspector", "inspect", str(tmp_path))
    assert "tensorflow" in run.heavy_imports()  # it did reach TensorFlow's own loader
    # ...without what TensorFlow imports only for features the commands never use
    assert not {"jax", "sklearn"} & {name.split(".")[0] for name in run.imported}, run.imported
    assert_one_line_from_the_entry_point(run, "could not be loaded as a SavedModel")
    assert "is not a protocol buffer" not in run.stderr_lines[0]


def test_cli_corrupt_savedmodel_is_one_line(tmp_path, capfd):
    (tmp_path / "saved_model.pb").write_bytes(b"not a protobuf")
    for command in ("inspect", "convert"):
        proc = run_in_process(capfd, command, str(tmp_path))
        assert_one_line_error(proc, "could not be loaded as a SavedModel")
        assert proc.returncode == cli.EXIT_USAGE  # convert exited 1 with an OSError line


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        ([], "required: command"),
        (["frobnicate"], "invalid choice: 'frobnicate'"),
        (["inspect", ".", "--unknown-dim", "x"], "--unknown-dim: invalid int value: 'x'"),
        (["convert", ".", "--bogus"], "unrecognized arguments: --bogus"),
    ],
)
def test_cli_argument_errors_are_one_line(argv, needle, capsys):
    # One line under the program's one name: no usage block, no "python -m ... <cmd>:" prefix.
    assert cli.main(argv) == cli.EXIT_USAGE
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graph_inspector: error: "), captured.err
    assert needle in lines[0] and captured.out == ""


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["inspect", "{sm}", "--json", "{tmp}/missing/r.json"], "missing does not exist"),
        (["inspect", "{sm}", "--dot", "{tmp}"], "is a folder, expected a file name"),
        (["convert", "{sm}", "--out", "{tmp}/a_file"], "a_file: exists and is not a folder"),
        (["convert", "{sm}", "--out", "{tmp}/a_file/sub"], "a_file is a file, not a folder"),
    ],
)
def test_cli_output_paths_are_checked_before_the_work(tmp_path, argv, needle, capsys):
    # Output paths are tried before the work, not at its end. The SavedModel here is corrupt,
    # so a command that reached the work would report that instead.
    sm = tmp_path / "sm"
    sm.mkdir()
    (sm / "saved_model.pb").write_bytes(b"not a protobuf")
    (tmp_path / "a_file").write_text("")
    argv = [a.format(sm=sm, tmp=tmp_path) for a in argv]
    assert cli.main(argv) == cli.EXIT_USAGE
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("graph_inspector: error: ")
    assert needle in lines[0] and "could not be loaded" not in lines[0], lines[0]


def test_cli_unconvertible_graph_is_one_line(tmp_path, capfd):
    class PyFunc(tf.Module):
        @tf.function(input_signature=[tf.TensorSpec([2, 8], tf.float32, name="x")])
        def serve(self, x):
            # tf.py_function runs Python: TFLite has no kernel for it (neither builtin nor flex).
            return {"y": tf.py_function(lambda t: t * 2, [x], tf.float32)}

    module = PyFunc()
    folder = tmp_path / "pyfunc"
    tf.saved_model.save(module, str(folder), signatures={"serving_default": module.serve})
    proc = run_in_process(capfd, "convert", str(folder), "--out", str(tmp_path / "out"))
    assert_one_line_error(proc, "conversion")
    assert proc.returncode == cli.EXIT_FAILED
    assert not (tmp_path / "out" / "model_float32.tflite").exists()


def test_cli_inspect_small_savedmodel(small_savedmodel, tmp_path, capsys):
    json_path, dot_path = tmp_path / "g.json", tmp_path / "g.dot"
    code = cli.main(
        ["inspect", str(small_savedmodel), "--json", str(json_path), "--dot", str(dot_path)]
        + ["--mlir", "--mlir-dump", str(tmp_path / "mlir"), "--tensorboard", str(tmp_path / "tb")]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "signature 'serving_default'" in out and "MatMul" in out and "tf.MatMul" in out
    assert "MLIR legalized to StableHLO" in out and "stablehlo.dot 1" in out
    dumps = sorted(p.name for p in (tmp_path / "mlir").iterdir())
    assert len(dumps) == 3 and all(name.startswith("serving_default.") for name in dumps)
    data = json.loads(json_path.read_text())["serving_default"]
    assert data["captured_variables"] == {"count": 2, "bytes": (8 * 4 + 4) * 4}
    mm = [n for n in data["nodes"] if n["op"] == "MatMul"][0]
    assert mm["cost"]["flops"] == 2 * 2 * 4 * 8
    assert dot_path.read_text().startswith("digraph")
    assert list((tmp_path / "tb" / "serving_default").glob("events.out.tfevents.*"))


def test_cli_inspect_xla(small_savedmodel, capsys):
    assert cli.main(["inspect", str(small_savedmodel), "--xla"]) == 0
    out = capsys.readouterr().out
    assert "XLA (jit_compile=True" in out and " dot " in out.replace(",", " ")


@pytest.mark.parametrize("command", ["inspect", "convert", "profile", "quant-debug"])
def test_cli_unknown_signature_is_one_line(small_savedmodel, tmp_path, command, capsys):
    # An unknown signature is bad input (exit 2) in every command, not a failed job (exit 1).
    extra = {"convert": ["--out", str(tmp_path / "o")], "profile": ["--logdir", str(tmp_path)]}
    argv = [command, str(small_savedmodel), "--signature", "nope", *extra.get(command, [])]
    assert cli.main(argv) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no signature 'nope'" in err[0]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="needs Linux's /proc")
@pytest.mark.parametrize(
    "argv",
    [
        ["profile", "{sm}", "--logdir", "/proc/nope/prof"],
        ["inspect", "{sm}", "--tensorboard", "/proc/nope/tb"],
        ["convert", "{sm}", "--out", "/proc/nope/out"],
    ],
)
def test_cli_unwritable_output_folder_is_refused_before_the_work(small_savedmodel, argv, capsys):
    # Refused before anything runs, in one line: not after the profile, as TensorFlow's
    # NotFoundError with exit 1.
    argv = [a.format(sm=small_savedmodel) for a in argv]
    assert cli.main(argv) == cli.EXIT_USAGE
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "cannot write there" in err[0], err
    assert captured.out == ""  # nothing ran


def test_cli_output_folder_check_leaves_no_folder_behind(small_savedmodel, tmp_path, capsys):
    # the writability check creates the folder to try it; a failing command must not leave it
    missing = tmp_path / "a" / "b"
    argv = ["profile", str(small_savedmodel), "--logdir", str(missing), "--signature", "nope"]
    assert cli.main(argv) == cli.EXIT_USAGE
    assert not (tmp_path / "a").exists()


def test_quant_debug_that_would_deny_every_layer_says_so(small_savedmodel, capsys):
    # A deny list covering every layer leaves nothing for the debugger to run: the command says
    # so (the float32 model is that fix) instead of passing on the debugger's own error.
    assert cli.main(["quant-debug", str(small_savedmodel), "--deny", "50", "--samples", "8"]) == 0
    out = capsys.readouterr().out
    assert "leaves none in int8: the float32 model is that fix" in out
    assert "int8: relative error vs TensorFlow" in out


def test_selective_int8_denying_every_layer_names_the_problem(small_savedmodel):
    import numpy as np
    from graph_inspector.errors import ConversionError
    from graph_inspector.quant_debug import layer_errors, selective_int8
    from graph_inspector.tflite import representative_from

    samples = np.random.default_rng(0).standard_normal([8, 8]).astype(np.float32)
    calibration = representative_from({"x": samples})
    every_layer = tuple(layer.tensor for layer in layer_errors(small_savedmodel, calibration))
    with pytest.raises(ConversionError, match="keeps every quantized layer in float"):
        selective_int8(small_savedmodel, calibration, every_layer)


# --- --help, --unknown-dim, convert --signature -------------------------------------------------


COMMANDS = ("inspect", "convert", "signatures", "profile", "quant-debug", "demo", "bench")


def test_help_lists_every_command():
    run = run_module("graph_inspector", "--help")
    assert run.returncode == 0, run.stderr_lines
    for command in COMMANDS:
        assert re.search(rf"^\s+{command}\s", run.stdout, re.M), run.stdout
    assert run.heavy_imports() == [] and run.stderr_lines == []  # --help imports no TensorFlow


@pytest.mark.parametrize("command", ["inspect", "demo"])  # a library and a harness command
def test_a_commands_help_imports_no_tensorflow(command):
    run = run_module("graph_inspector", command, "--help")
    assert run.returncode == 0 and run.stderr_lines == [], run.stderr_lines
    assert f"python -m graph_inspector {command}" in run.stdout
    assert run.heavy_imports() == [], run.heavy_imports()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["inspect", "{tmp}/missing"], "no such file or directory"),
        (["profile", "{tmp}", "--steps", "0"], "--steps: must be a positive size"),
        (["demo", "--out", "/proc/nope"], "--out /proc/nope: cannot write there"),
    ],
)
def test_bad_input_is_refused_before_tensorflow(tmp_path, argv, needle):
    run = run_module("graph_inspector", *[a.format(tmp=tmp_path) for a in argv])
    assert_one_line_from_the_entry_point(run, needle)
    assert run.heavy_imports() == [], run.heavy_imports()


@pytest.mark.parametrize("value", ["-3", "0"])
def test_unknown_dim_is_checked_before_any_work(tmp_path, value, capsys):
    # --unknown-dim is checked by the parser, before any summary or XLA compile. The SavedModel
    # here is corrupt: a command that reached the work would say so.
    (tmp_path / "saved_model.pb").write_bytes(b"not a protobuf")
    assert cli.main(["inspect", str(tmp_path), "--unknown-dim", value, "--xla"]) == cli.EXIT_USAGE
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "--unknown-dim: must be a positive size" in lines[0], captured.err
    assert captured.out == ""


def test_unknown_dim_drives_the_cost_estimate(dynamic_savedmodel, capsys):
    # Without --unknown-dim a None batch dimension is not costed (0 FLOP, and the hint says how);
    # with it, the MatMul is costed at that size.
    assert cli.main(["inspect", str(dynamic_savedmodel)]) == 0
    out = capsys.readouterr().out
    assert "estimated cost: 0 FLOP" in out and "pass --unknown-dim N" in out
    assert cli.main(["inspect", str(dynamic_savedmodel), "--unknown-dim", "4"]) == 0
    out = capsys.readouterr().out
    flops = 2 * 4 * 8 * 4  # MatMul [4, 8] @ [8, 4]
    assert f"estimated cost: {flops} FLOP" in out, out
    assert "unknown dimensions costed as 4" in out and "pass --unknown-dim" not in out


def test_convert_takes_a_signature_and_prints_sizes_in_fitting_units(
    dynamic_savedmodel, tmp_path, capsys
):
    # A SavedModel without serving_default converts through --signature; a model of a few KB is
    # printed in KiB, not as "0.00 MB".
    out = tmp_path / "out"
    assert cli.main(["convert", str(dynamic_savedmodel), "--out", str(out)]) == cli.EXIT_USAGE
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no signature 'serving_default'" in err[0] and "classify" in err[0]
    argv = ["convert", str(dynamic_savedmodel), "--out", str(out), "--signature", "classify"]
    assert cli.main(argv) == 0
    stdout = capsys.readouterr().out
    assert (out / "model_float32.tflite").is_file()
    assert (out / "model_dynamic_range.tflite").is_file()
    assert re.search(r"float32 .* \d[\d.]* KiB ", stdout), stdout
    assert " MB" not in stdout


def test_tensorboard_suggestion_names_an_installed_tensorboard(small_savedmodel, tmp_path, capsys):
    logdir = tmp_path / "tb"
    assert cli.main(["inspect", str(small_savedmodel), "--tensorboard", str(logdir)]) == 0
    out = capsys.readouterr().out
    command = re.search(r"view it: (\S+) --logdir", out).group(1)
    assert os.access(command, os.X_OK), f"{command} is not an installed program"
    # The venv's console script, run by the venv's Python, with the package importable.
    with open(command) as script:
        assert script.readline().strip() == f"#!{sys.executable}"
    import tensorboard

    assert tensorboard.__version__.startswith("2.")


def test_model_sizes_print_in_the_unit_that_fits():
    from phase01_common.units import format_bytes

    assert format_bytes(2_100, binary=True) == "2.05 KiB"
    assert format_bytes(17_400_000, binary=True) == "16.6 MiB"
    assert format_bytes(512, binary=True) == "512 B"
