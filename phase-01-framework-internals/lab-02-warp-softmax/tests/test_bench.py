"""The benchmark and the command line: what the benchmark relies on (its allocator setting),
where it writes, and `python -m warp_softmax`'s commands and bad-input answers."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from warp_softmax_harness.scenarios import run_in_fresh_python

# ------------------------------------------------------------------------------------------
# The benchmark's allocator setting (a benchmark is not a test, but what it relies on is).
# ------------------------------------------------------------------------------------------


def test_steady_allocator_reuses_pages_and_bench_backward_op_runs():
    # Freeing and reallocating 4 MiB tensors (what every benchmark call does) must not fault
    # in fresh pages under steady_allocator; fresh pages would be ~1,024 faults per tensor.
    code = """
        import json, resource, sys, torch
        from warp_softmax_harness.timing import bench_backward_op, steady_allocator

        def faults():
            return resource.getrusage(resource.RUSAGE_SELF).ru_minflt

        with steady_allocator() as description:
            for _ in range(20):  # warm up: the heap grows, torch's first calls settle
                a = torch.ones(1 << 20); b = torch.ones(1 << 20); del a, b
            before = faults()
            for _ in range(20):
                a = torch.ones(1 << 20); b = torch.ones(1 << 20); del a, b
            per_iteration = (faults() - before) / 20
            r = bench_backward_op(torch.float32, 4096, pairs=2, reps=3)
        print(json.dumps({"description": description, "faults": per_iteration,
                          "ratio": r.speedup, "ours_ms": r.ours_ms}))
    """
    result = run_in_fresh_python(code)
    if "not glibc" not in result["description"]:
        assert result["faults"] < 50, result
    assert result["ours_ms"] > 0 and result["ratio"] > 0


def test_bench_writes_to_a_temp_folder_unless_out_is_given(tmp_path):
    from warp_softmax_harness import bench

    lab = Path(__file__).resolve().parent.parent
    default = bench.parse_args(["--quick"]).out
    try:  # never inside the lab (its results/ files are the README's figures)
        assert default.is_dir() and not default.resolve().is_relative_to(lab)
        assert default.name.startswith("warp-softmax-bench-")
    finally:
        default.rmdir()
    committed = {p: p.stat().st_mtime_ns for p in (lab / "results").iterdir()}
    assert bench.main(["--backward-op", "--quick", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "bench-backward-op.json").read_text())
    assert report["command"].startswith("python -m warp_softmax bench --backward-op")
    assert len(report["results"]) == 8 and all(r["ours_ms"] > 0 for r in report["results"])
    assert {p: p.stat().st_mtime_ns for p in (lab / "results").iterdir()} == committed


def test_bad_out_is_one_line_and_exit_code_2(tmp_path):
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    for out, why in ((a_file, "exists and is not a folder"), ("/proc/nope", "cannot write there")):
        proc = subprocess.run(
            [sys.executable, "-m", "warp_softmax", "bench", "--out", str(out)],
            capture_output=True,
            text=True,
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().count("\n") == 0 and why in proc.stderr, proc.stderr


def test_help_lists_every_command():
    proc = subprocess.run(
        [sys.executable, "-m", "warp_softmax", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0
    for command in ("info", "demo", "bench", "check"):
        assert f"    {command} " in proc.stdout, proc.stdout
    proc = subprocess.run(
        [sys.executable, "-m", "warp_softmax", "info"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "CPU kernel" in proc.stdout, proc.stderr


def test_check_command_opcheck_part_passes():
    # `python -m warp_softmax check` = the kernel-path sweeps (tested in test_values.py and
    # test_cpu.py) + this: opcheck on every op and overload, FP8 and dtype= included.
    from warp_softmax_harness.check import opcheck_all

    assert opcheck_all("cpu") == 20
