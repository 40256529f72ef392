"""The happy path of every command, run once on real artifacts, its output asserted: `build
--quick` (compared with the session's cached quick build), `gate` and `bench --quick` on the
repository that `build` wrote, `train-gpt` at a tiny step budget, `export-gpt`, `gate-gpt`,
`generate` (bad input for each is tested beside its module)."""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest
from inference_pipeline import repository
from inference_pipeline.__main__ import main
from inference_pipeline.generation.model import greedy_no_cache
from inference_pipeline.pipeline import result_from_repository
from inference_pipeline_harness.serving_fixtures import one_torch_thread


@pytest.fixture(autouse=True)
def one_thread():
    with one_torch_thread():
        yield


# Two rows of the recipe table, one per runtime, with what they are made from (the FP32
# export): the command runs every stage (export, quantize, gates, timing, repository) on them.
COMMAND_RECIPES = ("int8_dynamic", "ov_int8_nncf")


@pytest.fixture(scope="module")
def command_build(tmp_path_factory) -> tuple[int, str, Path]:
    """`build --quick` of :data:`COMMAND_RECIPES`, run once: (exit status, stdout, its
    model repository). `gate` and `bench` then run on what it wrote, as a user chains them."""
    out = tmp_path_factory.mktemp("command_build")
    argv = ["build", "--quick", "--out", str(out), "--threads", "2"]
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        status = main([*argv, "--recipes", ",".join(COMMAND_RECIPES)])
    return status, stdout.getvalue(), out / "model_repository"


def test_build_quick_writes_the_same_variants_as_the_cached_quick_build(
    quick_build, command_build
) -> None:
    status, out, repo = command_build
    assert status == 0
    assert f"model repository: {repo}" in out
    fresh, cached = repository.read_manifest(repo), repository.read_manifest(quick_build.repository)
    made = [e["name"] for e in fresh["variants"]]
    assert len(made) >= len(COMMAND_RECIPES) + 1  # the rows and the export they are made from
    promoted = [e["name"] for e in fresh["variants"] if e["promoted"]]
    assert f"promoted ({len(promoted)}/{len(made)}): " in out
    # the build is deterministic given its settings and code: the same variants pass the same
    # gates, on the same gate data, with the same values (to float round-off), as in the full
    # quick build
    by_name = {e["name"]: e for e in cached["variants"]}
    for entry in fresh["variants"]:
        before = by_name[entry["name"]]
        assert entry["promoted"] == before["promoted"], entry["name"]
        now = {g["name"]: (g["passed"], g["value"]) for g in entry["gates"]}
        then = {g["name"]: (g["passed"], g["value"]) for g in before["gates"]}
        assert now.keys() == then.keys(), entry["name"]
        for gate, (passed, value) in now.items():
            assert passed == then[gate][0], (entry["name"], gate)
            assert value == pytest.approx(then[gate][1], rel=1e-4, abs=1e-6), (entry["name"], gate)
    assert fresh["gate_data"] == cached["gate_data"]
    for name in promoted:
        assert (repo / name / "1" / "model.onnx").is_file()


def test_build_refuses_an_unknown_recipe_in_one_line(tmp_path, capsys) -> None:
    argv = ["build", "--quick", "--out", str(tmp_path / "out"), "--recipes", "int8_dynamic,int3"]
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--recipes: no recipe 'int3'; recipes: fp32_dynamo" in err[0]
    assert not (tmp_path / "out").exists()  # refused before any work


def test_gate_re_runs_every_gate_of_the_built_repository(command_build, capsys) -> None:
    _, _, repo = command_build
    assert main(["gate", str(repo), "--threads", "1"]) == 0
    promoted = sum(e["promoted"] for e in repository.read_manifest(repo)["variants"])
    out = capsys.readouterr().out
    assert promoted >= len(COMMAND_RECIPES) + 1
    assert f"{promoted}/{promoted} promoted variants pass every gate" in out


def test_bench_quick_times_every_promoted_variant(command_build, tmp_path, capsys) -> None:
    _, _, repo = command_build
    png = tmp_path / "bench.png"
    argv = ["bench", str(repo), "--quick", "--threads", "1", "--plot", str(png)]
    assert main(argv) == 0
    out = capsys.readouterr().out
    for variant in result_from_repository(repo).variants:
        if variant.promoted and variant.recipe.timed_on_cpu:
            assert variant.name in out, variant.name
    assert png.stat().st_size > 10_000
    table = json.loads(png.with_suffix(".json").read_text())
    assert table  # the same rows, machine-readable


def test_train_gpt_at_a_tiny_step_budget(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("INFERENCE_PIPELINE_CACHE", str(tmp_path))
    assert main(["train-gpt", "--steps", "3", "--retrain"]) == 0
    out = capsys.readouterr().out
    summary = json.loads(out[out.index("{") : out.index("}") + 1])
    assert summary["steps"] == 3 and summary["bytes_seen"] == 3 * 8 * 256
    checkpoint = next(line for line in out.splitlines() if line.startswith("checkpoint: "))
    assert checkpoint.removeprefix("checkpoint: ").startswith(str(tmp_path))
    assert "sample (greedy): The government said" in out


def test_export_gpt_writes_the_graphs_and_a_generation_folder(quick_gpt, tmp_path, capsys):
    steps = ["--steps", str(quick_gpt.summary["steps"])]
    assert main(["export-gpt", *steps, "--repository", str(tmp_path), "--int8"]) == 0
    out = capsys.readouterr().out
    for path in (quick_gpt.files.onnx_fp32, quick_gpt.files.onnx_int8, quick_gpt.files.program):
        assert str(path) in out
    assert "tokens           ['batch', 'new_tokens']" in out
    assert (tmp_path / "bbc_gpt").is_dir() and "generation model folder:" in out


def test_gate_gpt_passes_on_the_quick_gpt(quick_gpt, tmp_path, capsys) -> None:
    report = tmp_path / "gates.json"
    steps = ["--steps", str(quick_gpt.summary["steps"])]
    argv = ["gate-gpt", *steps, "--prompts", "4", "--new-tokens", "8"]
    assert main([*argv, "--json", str(report)]) == 0
    out = capsys.readouterr().out
    assert out.count("[PASS]") == 3 and "[FAIL]" not in out
    *gates, figures = json.loads(report.read_text())
    assert [g["passed"] for g in gates] == [True, True, True]
    assert figures["ppl_increase"] != 0.0  # the real INT8 graph against FP32


def test_generate_streams_the_greedy_continuation(quick_gpt, capsys) -> None:
    prompt = "The government said"
    steps = ["--steps", str(quick_gpt.summary["steps"])]
    argv = ["generate", prompt, *steps, "--max-new-tokens", "10"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    expected = bytes(greedy_no_cache(quick_gpt.model, prompt.encode(), 10))
    assert out.startswith(prompt + expected.decode("utf-8", "replace"))
    assert "[finish: length, 10 tokens]" in out
