"""The repository: Triton layout, config.pbtxt parsed by Triton's own schema, validation."""

from __future__ import annotations

import dataclasses
import json
import shutil

import pytest
from google.protobuf import text_format
from inference_pipeline import repository
from inference_pipeline_harness.scenarios import quick_artifacts, shared_repository
from tritonclient.grpc import model_config_pb2 as mc


@pytest.fixture(scope="session")
def repo():
    return shared_repository()


def test_layout_is_tritons(repo):
    names = sorted(p.name for p in repo.iterdir())
    assert names == [
        "bbc_minilm_fp32_dynamo",
        "bbc_minilm_fp32_torchscript",
        "gate_reference.npz",
        "gate_set.json",
        "manifest.json",
    ]
    folder = repo / "bbc_minilm_fp32_torchscript"
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    assert files == ["1/model.onnx", "config.pbtxt", "labels.txt", "tokenizer.json"]


def test_config_parses_with_tritons_schema(repo):
    text = (repo / "bbc_minilm_fp32_torchscript" / "config.pbtxt").read_text()
    config = text_format.Parse(text, mc.ModelConfig())
    assert config.name == "bbc_minilm_fp32_torchscript"
    assert config.platform == "onnxruntime_onnx" and config.max_batch_size == 32
    assert [(t.name, t.data_type, list(t.dims)) for t in config.input] == [
        ("input_ids", mc.TYPE_INT64, [-1]),
        ("attention_mask", mc.TYPE_INT64, [-1]),
    ]
    assert [(t.name, list(t.dims)) for t in config.output] == [
        ("logits", [5]),
        ("embedding", [384]),
    ]
    assert list(config.dynamic_batching.preferred_batch_size) == [4, 8, 16]
    assert config.dynamic_batching.max_queue_delay_microseconds > 0
    assert config.instance_group[0].kind == mc.ModelInstanceGroup.KIND_CPU
    assert config.parameters["max_sequence_length"].string_value == "256"
    assert config.parameters["tokenizer"].string_value == "tokenizer.json"


def test_model_folder_tokenizes_exactly_like_the_gates(repo):
    art = quick_artifacts()
    folder = repository.load_model_folder(repo / "bbc_minilm_fp32_dynamo")
    assert folder.labels == art.trained.label_names
    texts = art.gate_set.texts[:8]
    ours, theirs = folder.tokenizer.encode(texts), art.tokenizer.encode(texts)
    for key in ("input_ids", "attention_mask"):
        assert (ours[key] == theirs[key]).all()


def test_manifest_records_gates_and_hashes(repo):
    manifest = json.loads((repo / "manifest.json").read_text())
    entry = manifest["variants"][0]
    assert entry["promoted"] and entry["gates"] and all(g["passed"] for g in entry["gates"])
    assert {"name", "value", "limit", "passed"} <= set(entry["gates"][0])
    model_file = f"{entry['name']}/1/model.onnx"
    assert entry["files"][model_file] == repository.file_sha256(repo / model_file)
    assert manifest["thresholds"]["fp32_max_abs_logit_diff"] == 1e-4


@pytest.fixture
def copy(repo, tmp_path):
    target = tmp_path / "model_repository"
    shutil.copytree(repo, target)
    return target


def test_corrupt_onnx_is_named(copy):
    (copy / "bbc_minilm_fp32_torchscript" / "1" / "model.onnx").write_bytes(b"\x08\x07garbage")
    with pytest.raises(repository.RepositoryError, match="not a valid ONNX model"):
        repository.load_model_folder(copy / "bbc_minilm_fp32_torchscript")


def test_config_inputs_not_matching_the_model_are_named(copy):
    config_file = copy / "bbc_minilm_fp32_torchscript" / "config.pbtxt"
    config = repository.read_config(config_file)
    config.input[1].name = "token_type_ids"
    config_file.write_text(text_format.MessageToString(config))
    with pytest.raises(repository.RepositoryError, match="config inputs .* do not match"):
        repository.load_model_folder(copy / "bbc_minilm_fp32_torchscript")


def test_config_that_is_not_a_model_config_is_named(copy):
    (copy / "bbc_minilm_fp32_dynamo" / "config.pbtxt").write_text("platform: 3 {")
    with pytest.raises(repository.RepositoryError, match="not a valid Triton model config"):
        repository.load_model_folder(copy / "bbc_minilm_fp32_dynamo")


def test_changed_file_fails_the_hash_check(copy):
    manifest = repository.read_manifest(copy)
    (copy / "bbc_minilm_fp32_dynamo" / "labels.txt").write_text("a\nb\nc\nd\ne\n")
    with pytest.raises(repository.RepositoryError, match="sha256 differs"):
        repository.verify_hashes(
            copy, manifest["variants"][0]["files"] | manifest["variants"][1]["files"]
        )


def test_manifest_reads_back_as_the_build_result(repo):
    from inference_pipeline.pipeline import result_from_repository

    manifest = repository.read_manifest(repo)
    result = result_from_repository(repo)
    assert [v.name for v in result.variants] == [e["name"] for e in manifest["variants"]]
    for variant, entry in zip(result.variants, manifest["variants"], strict=True):
        assert variant.promoted == entry["promoted"]
        assert [dataclasses.asdict(r) for r in variant.gates.results] == entry["gates"]
    assert result.reference_accuracy == manifest["reference_accuracy"]


def test_build_key_follows_the_settings(monkeypatch):
    from inference_pipeline import pipeline

    assert pipeline.build_key(pipeline.BuildSettings()) == pipeline.build_key(
        pipeline.BuildSettings()
    )
    changed = dataclasses.replace(pipeline.BuildSettings(), calibration_texts=33)
    assert pipeline.build_key(changed) != pipeline.build_key(pipeline.BuildSettings())


def test_cached_build_is_reused_without_building(repo, tmp_path, monkeypatch):
    from inference_pipeline import pipeline

    settings = pipeline.QUICK_BUILD
    cached = tmp_path / "builds" / pipeline.build_key(settings) / "model_repository"
    shutil.copytree(repo, cached)

    def no_build(*_args, **_kwargs):
        raise AssertionError("build ran although its cached repository exists")

    monkeypatch.setattr(pipeline, "build", no_build)
    result = pipeline.build_cached(settings, tmp_path, progress=lambda _: None)
    assert result.repository == cached
    with pytest.raises(AssertionError, match="build ran"):  # another key is not reused
        pipeline.build_cached(pipeline.BuildSettings(), tmp_path, progress=lambda _: None)
