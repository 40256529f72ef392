"""The root gpu_check.sh, as a dry run: every step's code at tiny sizes on the CPU, so the
script the GPU machine runs cannot rot between leases. One run per session; the tests read
its JSON, markdown and console output."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STEPS = ["lab02", "classifier", "batching", "generation"]


def run_script(*args: str, out: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    env = os.environ | {"PYTHON": sys.executable, "OUT": str(out)}
    return subprocess.run(
        ["bash", str(ROOT / "gpu_check.sh"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("gpu_check")
    proc = run_script("--dry-run", out=out)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return out, proc, json.loads((out / "gpu_check.json").read_text())


def test_every_step_ran_in_order_and_passed(dry_run):
    _, _, report = dry_run
    assert [entry["step"] for entry in report["steps"]] == STEPS
    for entry in report["steps"]:
        assert entry["status"] == "ok", entry
        assert 0 < entry["limit_s"] <= 300
        for check in entry["record"].get("checks", []):
            assert check["passed"], check
        if entry["step"] != "lab02":  # each Python step found its imports as the GPU will
            assert entry["record"]["packages_not_on_the_scripts_pythonpath"] == []
    assert report["run"]["dry_run"] is True
    assert report["run"]["budget_s"] == 600
    # the budget accounting: no step was allowed more than what was left of the run's budget
    assert sum(entry["limit_s"] for entry in report["steps"]) <= report["run"]["budget_s"]


def test_lab02_parts_ran_or_were_skipped_for_want_of_a_gpu(dry_run):
    _, _, report = dry_run
    parts = report["steps"][0]["record"]["parts"]
    assert len(parts) == 5
    assert [p["status"] for p in parts].count("ok") == 3
    skipped = [p for p in parts if p["status"] != "ok"]
    assert all(p["status"] == "skipped: dry run, no GPU" for p in skipped)


def test_classifier_timed_every_precision_at_both_batches_and_gated_against_fp32(dry_run):
    _, _, report = dry_run
    record = report["steps"][1]["record"]
    rows = [r for r in record["rows"] if r["status"] == "ok"]
    assert {(r["dtype"], r["batch"]) for r in rows} >= {
        (dtype, batch) for dtype in ("fp32", "fp16", "bf16") for batch in (1, 8)
    }
    shapes = len({r["batch"] for r in rows})
    for row in rows:
        assert 0 < row["p50_ms"] <= row["p90_ms"] <= row["p99_ms"]
        assert row["ms_per_row"] == pytest.approx(row["p50_ms"] / row["batch"])
        # one graph per timed shape, compiled for the gates and reused for the timing
        assert row["graphs_compiled"] == (shapes if row["compile_mode"] else 0), row["name"]
    assert any(r["compile_mode"] for r in rows), "no torch.compile row"
    names = {c["name"] for c in record["checks"]}
    for variant in {r["name"] for r in rows} - {"eager_fp32_sdpa"}:
        prefix = f"{variant}: "
        assert prefix + "non_finite_values" in names
        if variant.startswith(("eager_fp16", "compiled_fp16")):
            assert prefix + "max_abs_logit_diff_vs_torch" in names
            assert prefix + "argmax_agreement_vs_fp32" in names


def test_batcher_sweep_has_both_configs_at_each_concurrency(dry_run):
    _, _, report = dry_run
    record = report["steps"][2]["record"]
    levels = {(r["config"], r["concurrency"]): r for r in record["rows"]}
    assert set(levels) == {(c, n) for c in ("batched", "unbatched") for n in (1, 4, 16)}
    for (config, concurrency), level in levels.items():
        assert level["requests"] > 0
        assert 1 <= level["avg_batch"] <= (1 if config == "unbatched" else concurrency)
    assert set(record["throughput_ratio_batched_vs_unbatched"]) == {"1", "4", "16"}
    assert record["distinct_fingerprints"] is True  # so a misrouted answer would be counted
    assert [c["name"] for c in record["checks"]] == [
        "answers_from_another_requests_row",
        "answers_match_the_document_run_alone_max_abs_logit_diff",
        "packages_not_on_the_scripts_pythonpath",
    ]


def test_generation_compares_static_and_continuous(dry_run):
    _, _, report = dry_run
    record = report["steps"][3]["record"]
    rows = {r["engine"]: r for r in record["rows"]}
    assert set(rows) == {"static", "continuous"}
    for row in rows.values():
        assert row["tokens"] > 0 and row["tokens_per_s"] > 0
        assert row["itl_p50_ms"] <= row["itl_p99_ms"]
    assert record["verdict"]["tokens_per_s_speedup"] == pytest.approx(
        rows["continuous"]["tokens_per_s"] / rows["static"]["tokens_per_s"]
    )


def test_outputs_and_the_summary_line(dry_run):
    out, proc, report = dry_run
    assert sorted(p.name for p in out.iterdir()) == [
        "gpu_check.json",
        "gpu_check.log",
        "gpu_check.md",
        "raw.tar.gz",
    ]
    last = proc.stdout.strip().splitlines()[-1]
    assert last == report["summary"]
    assert last.startswith("gpu_check summary: lab02 ok")
    markdown = (out / "gpu_check.md").read_text()
    assert "not yet run on a GPU" in markdown
    assert markdown.count("\n## ") == len(STEPS)


def test_budget_accounting_keeps_the_run_under_ten_minutes():
    # The script's own arithmetic, read from the script: each step's budget as called, as
    # stated in the header, their sum with the report's reserve and ~10 s of start-up lines.
    script = (ROOT / "gpu_check.sh").read_text()
    total = int(re.search(r"BUDGET_S=\$\{BUDGET_S:-(\d+)\}", script).group(1))
    reserve = int(re.search(r"^REPORT_S=(\d+)$", script, re.M).group(1))
    steps = {name: int(s) for name, s in re.findall(r"^step (\w+) (\d+) ", script, re.M)}
    assert list(steps) == STEPS
    assert total == 600
    assert sum(steps.values()) + reserve + 10 <= total
    for name, seconds in steps.items():
        assert re.search(rf"^#   {name} +{seconds} s ", script, re.M), name
    lab02 = (ROOT / "phase-01-framework-internals/lab-02-warp-softmax/gpu_check.sh").read_text()
    lab02_default = int(re.search(r"BUDGET_S=\$\{BUDGET_S:-(\d+)\}", lab02).group(1))
    assert lab02_default == steps["lab02"] - 10  # what the root script passes it


def test_bad_argument_is_one_line_and_exit_code_2(tmp_path):
    proc = run_script("--gpu", out=tmp_path / "out", timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "gpu_check.sh: unknown argument '--gpu' (expected --dry-run, --help or nothing)"
    ]


def test_out_that_is_a_file_is_refused(tmp_path):
    target = tmp_path / "file"
    target.write_text("")
    proc = run_script("--dry-run", out=target, timeout=60)
    assert proc.returncode == 2
    assert "is not a folder" in proc.stderr


def run_module(module: str, *args: str, extra_path: Path | None = None, timeout: float = 120):
    """``python -m gpu_check.<module>`` as gpu_check.sh runs it (tools/ on PYTHONPATH)."""
    paths = [str(p) for p in (extra_path, ROOT / "tools") if p is not None]
    env = os.environ | {"PYTHONPATH": os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [sys.executable, "-m", f"gpu_check.{module}", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


def test_batcher_step_without_tritonclient_is_skipped_and_says_why(tmp_path):
    # The lent GPU machine has no tritonclient (the serving config imports it): the step must
    # record why it did not run, not fail.
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "tritonclient.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'tritonclient'\", name='tritonclient')\n"
    )
    out = tmp_path / "batching.json"
    proc = run_module(
        "batching", "--out", str(out), "--budget-s", "60", "--dry-run", extra_path=shadow
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = json.loads(out.read_text())
    assert (record["status"], record["reason"]) == ("skipped", "tritonclient missing")
    assert record["rows"] == []


def test_report_of_a_run_cut_short_keeps_the_rows_and_names_each_step(tmp_path):
    work, out = tmp_path / "work", tmp_path / "out"
    (work / "lab02").mkdir(parents=True)
    (work / "lab02" / "summary.tsv").write_text("build\tok\t80\ntests\tfailed rc=1\t30\n")
    (work / "steps.tsv").write_text(
        "lab02\tfailed rc=1\t120\t300\nclassifier\ttimed out\t160\t160\n"
    )
    row = {"name": "eager_fp16_sdpa", "status": "ok", "batch": 1, "p50_ms": 1.0}
    (work / "classifier.json").write_text(
        json.dumps({"step": "classifier", "status": "running", "rows": [row], "checks": []})
    )
    proc = run_module(
        "report", "--work", str(work), "--out", str(out), "--budget-s", "600", "--seconds", "290"
    )
    assert proc.returncode == 4  # written, and a step is not ok
    report = json.loads((out / "gpu_check.json").read_text())
    statuses = [(e["step"], e["status"]) for e in report["steps"]]
    assert statuses == [
        ("lab02", "failed rc=1: tests (failed rc=1)"),
        ("classifier", "timed out (rows so far kept)"),
        ("batching", "not reached"),
        ("generation", "not reached"),
    ]
    assert report["steps"][1]["record"]["rows"] == [row]
    assert proc.stdout.strip().splitlines()[-1] == report["summary"]
    assert "## Lab 02" in (out / "gpu_check.md").read_text()


def test_a_package_missing_from_the_scripts_pythonpath_fails_the_step(tmp_path):
    # On the lent machine nothing of ours is installed: a step that imports a package the
    # script does not put on PYTHONPATH works here (the venv has it) and fails there. The step
    # says so here, as a failed check naming the package.
    out = tmp_path / "generation.json"
    folders = os.pathsep.join(str(ROOT / p) for p in ("tools", "inference-pipeline"))
    env = os.environ | {"GPU_CHECK_PYTHONPATH": folders, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "gpu_check.generation", "--out", str(out), "--budget-s", "60"]
        + ["--dry-run"],
        capture_output=True,
        text=True,
        env=env | {"PYTHONPATH": os.pathsep.join([folders, os.environ.get("PYTHONPATH", "")])},
        timeout=120,
    )
    assert proc.returncode == 1
    record = json.loads(out.read_text())
    assert record["packages_not_on_the_scripts_pythonpath"] == ["phase01_common"]
    assert record["reason"] == "checks failed: packages_not_on_the_scripts_pythonpath"


def test_lab02_modules_need_only_the_folders_its_script_puts_on_pythonpath():
    lab = ROOT / "phase-01-framework-internals" / "lab-02-warp-softmax"
    script = (lab / "gpu_check.sh").read_text()
    assert 'export PYTHONPATH="$PWD:$(cd ../common && pwd)${PYTHONPATH:+:$PYTHONPATH}"' in script
    folders = [ROOT / "tools", lab, lab.parent / "common"]  # tools/: the checker itself
    code = (
        "import warp_softmax_harness.bench, warp_softmax_harness.check, "
        "warp_softmax_harness.compare\n"
        "from gpu_check.common import unreachable_packages\n"
        "print(unreachable_packages())"
    )
    joined = os.pathsep.join(map(str, folders))
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        cwd=lab,
        env=os.environ
        | {
            "GPU_CHECK_PYTHONPATH": joined,
            "PYTHONPATH": os.pathsep.join([joined, os.environ.get("PYTHONPATH", "")]),
        },
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"
