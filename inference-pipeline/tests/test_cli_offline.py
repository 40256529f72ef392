"""CLI: gate on a real repository; bad input is one line and exit status 2."""

from __future__ import annotations

import json
import shutil

import pytest
from inference_pipeline import repository
from inference_pipeline.__main__ import main
from inference_pipeline_harness.scenarios import quick_artifacts, shared_repository, zero_weight


@pytest.fixture(scope="session")
def repo():
    return shared_repository()


@pytest.fixture
def copy(repo, tmp_path):
    target = tmp_path / "model_repository"
    shutil.copytree(repo, target)
    return target


def test_help_lists_the_offline_commands(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    for command in ("build", "gate", "bench", "demo"):
        assert command in out


def test_gate_passes_on_a_built_repository(repo, capsys):
    assert main(["gate", str(repo)]) == 0
    out = capsys.readouterr().out
    assert "2/2 promoted variants pass every gate" in out


def _one_line_error(capsys) -> str:
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in captured.err, captured.err
    return lines[0]


def test_missing_folder(tmp_path, capsys):
    assert main(["gate", str(tmp_path / "nowhere")]) == 2
    assert "no such model repository" in _one_line_error(capsys)
    assert main(["bench", str(tmp_path / "nowhere")]) == 2
    assert "no such model repository" in _one_line_error(capsys)


def test_corrupt_onnx(copy, capsys):
    model_file = copy / "bbc_minilm_fp32_dynamo" / "1" / "model.onnx"
    model_file.write_bytes(b"not a protobuf")
    assert main(["gate", str(copy)]) == 2
    assert "sha256 differs" in _one_line_error(capsys)
    _rehash(copy)  # the same corrupt file with a manifest that agrees: the parser speaks
    assert main(["gate", str(copy)]) == 2
    assert "not a valid ONNX model" in _one_line_error(capsys)


def test_config_inputs_not_matching_the_model(copy, capsys):
    config = copy / "bbc_minilm_fp32_torchscript" / "config.pbtxt"
    config.write_text(config.read_text().replace('"attention_mask"', '"token_type_ids"'))
    _rehash(copy)
    assert main(["gate", str(copy)]) == 2
    assert "do not match the model" in _one_line_error(capsys)


def test_not_a_repository(tmp_path, capsys):
    assert main(["gate", str(tmp_path)]) == 2
    assert "no manifest" in _one_line_error(capsys)
    (tmp_path / "manifest.json").write_text("{")
    assert main(["gate", str(tmp_path)]) == 2
    assert "not valid JSON" in _one_line_error(capsys)


def test_gate_names_the_failing_gate_and_value(copy, capsys):
    # A repository whose promoted model was swapped for a broken one (manifest re-hashed,
    # as a careless redeploy would): the gate command catches it, exit status 1.
    model_file = copy / "bbc_minilm_fp32_torchscript" / "1" / "model.onnx"
    zero_weight(quick_artifacts().exports["torchscript"], model_file)
    _rehash(copy)
    assert main(["gate", str(copy)]) == 1
    out = capsys.readouterr().out
    assert "FAIL bbc_minilm_fp32_torchscript" in out
    assert "gate max_abs_logit_diff_vs_torch = " in out and "(limit <= 0.0001)" in out


def _rehash(repo) -> None:
    manifest = repository.read_manifest(repo)
    for entry in manifest["variants"]:
        entry["files"] = {name: repository.file_sha256(repo / name) for name in entry["files"]}
    (repo / "manifest.json").write_text(json.dumps(manifest))
