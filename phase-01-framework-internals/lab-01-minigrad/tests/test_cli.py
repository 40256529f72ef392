"""``python -m minigrad``: the commands, one-line errors with exit code 2, no leftovers."""

from __future__ import annotations

import json
import tempfile
import warnings
from pathlib import Path

import minigrad
import minigrad.nn.functional as F
import numpy as np
import pytest
import torch
from minigrad.__main__ import main as minigrad_main
from minigrad_harness import demo
from phase01_common.entry_points import run_module
from phase01_common.report import Section


def test_help_lists_every_command(capsys):
    assert minigrad_main(["--help"]) == 0
    out = capsys.readouterr().out
    for command in ("demo [--quick] [--out DIR]", "bench", "explain"):
        assert command in out
    from minigrad_harness.explain import DEMOS
    from minigrad_harness.explain import __doc__ as explain_doc

    listed = out.split("explain [NAME ...]")[1].split("Every command")[0]
    for name in DEMOS:  # every demonstration is named in both helps
        assert name in listed and f"explain {name}" in explain_doc, name


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["demo", "--help"],
        ["bench", "--help"],
        ["nope"],
        ["bench", "--threads", "x"],
    ],
)
def test_help_and_bad_input_do_not_import_torch_or_jax(argv, tmp_path):
    # The real entry point in a fresh process: help and refusals come from the parsers (the
    # dispatcher's and each command's), before the harness imports torch or JAX for the work;
    # the path checks' refusals are one line in the in-process tests below.
    run = run_module("minigrad", *argv, cwd=tmp_path)
    assert run.heavy_imports() == [], run.heavy_imports()
    assert "minigrad" in run.imported
    if "--help" in argv:
        assert run.returncode == 0 and run.stderr_lines == [] and "usage:" in run.stdout
    else:
        assert run.returncode == 2, run.stderr_lines
        assert len(run.stderr_lines) == 1 and "Traceback" not in run.stderr_lines[0]
        assert argv[-1] in run.stderr_lines[0], run.stderr_lines  # names what was wrong
    assert not list(tmp_path.iterdir())  # nothing written where it ran


@pytest.mark.parametrize("make_out", [lambda tmp: Path("/proc/nope"), lambda tmp: tmp / "a-file"])
def test_demo_bad_out_is_one_line_and_exit_2(make_out, tmp_path, capsys, monkeypatch):
    (tmp_path / "a-file").write_text("not a folder")
    monkeypatch.setattr(demo, "build_section", lambda *a, **k: pytest.fail("must not run"))
    out = make_out(tmp_path)
    with pytest.raises(SystemExit) as exc:
        minigrad_main(["demo", "--out", str(out)])
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and str(out) in err and "Traceback" not in err


def test_demo_without_out_leaves_no_temporary_folder(tmp_path, monkeypatch, capsys):
    def fake_section(out_dir: Path, quick: bool) -> Section:
        (out_dir / "lab01_mlp_loss.png").write_bytes(b"png")  # what the real one writes
        return Section("fake")

    monkeypatch.setattr(demo, "build_section", fake_section)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert minigrad_main(["demo", "--quick"]) == 0
    assert not list(tmp_path.glob("minigrad-demo-*"))


def test_out_of_range_target_names_the_target():
    logits = minigrad.tensor(np.zeros((3, 4)), requires_grad=True)
    with pytest.raises(IndexError, match="Target 7 is out of bounds") as exc:
        F.cross_entropy(logits, np.array([0, 7, 1]))
    assert "invalid input shapes" not in str(exc.value)
    with pytest.raises(IndexError, match="Target -2 is out of bounds"):
        F.cross_entropy(logits, np.array([0, 1, -2]))
    with pytest.raises(IndexError):  # torch refuses it too
        torch.nn.functional.cross_entropy(torch.zeros(3, 4), torch.tensor([0, 7, 1]))


def test_linear_with_no_inputs_works_like_torch():
    with warnings.catch_warnings():  # torch: "Initializing zero-element tensors is a no-op"
        warnings.simplefilter("ignore", UserWarning)
        theirs = torch.nn.Linear(0, 3)
    ours = minigrad.nn.Linear(0, 3)
    assert ours.weight.shape == tuple(theirs.weight.shape) == (3, 0)
    x = minigrad.tensor(np.zeros((2, 0), np.float32))
    y = ours(x)
    assert y.shape == (2, 3)
    np.testing.assert_array_equal(y.data, np.broadcast_to(ours.bias.data, (2, 3)))
    y.sum().backward()
    np.testing.assert_array_equal(ours.bias.grad.data, [2.0, 2.0, 2.0])
    assert ours.weight.grad.shape == (3, 0)


def test_bench_writes_results_only_where_asked(tmp_path, monkeypatch, capsys):
    from minigrad_harness import bench

    calls = []

    def fake_bench_size(batch, hidden, **kwargs):
        calls.append((batch, hidden))
        ms = {"minigrad": 2.0, "minigrad_jit": 1.5, "jax": 3.0, "jax_jit": 1.0}
        return bench.BenchRow(batch, hidden, {**ms, "torch": 4.0, "numpy": 1.0})

    monkeypatch.setattr(bench, "bench_size", fake_bench_size)
    monkeypatch.delenv("PJRT_NPROC", raising=False)  # main pins XLA's threads: restored after
    from minigrad_harness import bench_func

    monkeypatch.setattr(bench_func, "run_all", lambda quick: {"vmap_over_loop_speedup": 2})
    monkeypatch.chdir(tmp_path)
    assert minigrad_main(["bench", "--quick"]) == 0
    assert calls == [(64, 128), (1024, 1024)]
    assert "2.00x" in capsys.readouterr().out and not list(tmp_path.iterdir())
    out = tmp_path / "r.json"
    assert minigrad_main(["bench", "--quick", "--out", str(out)]) == 0
    assert json.loads(out.read_text())["rows"][0]["minigrad_over_numpy"] == 2.0
    with pytest.raises(SystemExit) as exc:
        minigrad_main(["bench", "--out", str(tmp_path)])  # a folder, not a file
    assert exc.value.code == 2
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:  # an existing folder it cannot write into: said
        minigrad_main(["bench", "--out", "/proc/r.json"])  # before the benchmark, not after
    assert exc.value.code == 2 and calls == [(64, 128), (1024, 1024)] * 2
    err = capsys.readouterr().err
    assert "/proc/r.json: cannot write there" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err  # no usage block above it


def test_explain_runs_the_guides_demos_and_refuses_unknown_names(capsys):
    assert minigrad_main(["explain", "why-topo", "cycle"]) == 0
    out = capsys.readouterr().out
    assert "262,143 backward calls" in out and "the graph has a cycle" in out
    assert minigrad_main(["explain", "nope"]) == 2
    assert "unknown demo" in capsys.readouterr().err
    assert minigrad_main(["explain", "transformations"]) == 0
    out = capsys.readouterr().out
    assert "{ lambda" in out and "(5, 4, 3)" in out and '"stablehlo.dot_general"' in out
