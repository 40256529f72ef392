"""Backends behind one interface (LiteRT next to ONNX Runtime) and config.pbtxt handling."""

from __future__ import annotations

import dataclasses
import shutil

import numpy as np
import pytest
import tritonclient.http as triton
from inference_pipeline.__main__ import main
from inference_pipeline.repository import RepositoryError, read_config
from inference_pipeline.serving.backends import OnnxRuntimeBackend, backend_spec
from inference_pipeline.serving.config import BatchingSettings, serving_config
from inference_pipeline.serving.models import TensorModel, load_repository
from inference_pipeline_harness.serving_fixtures import TINY_MODEL, threaded_server, tiny_repository

LITERT_CONFIG = """name: "affine_litert"
backend: "litert"
max_batch_size: 16
input [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]
output [ { name: "Identity" data_type: TYPE_FP32 dims: [ 3 ] } ]
dynamic_batching { max_queue_delay_microseconds: 20000 }
instance_group [ { count: 2 kind: KIND_CPU } ]
"""
WEIGHTS = np.arange(12, dtype=np.float32).reshape(4, 3) / 10


@pytest.fixture(scope="module")
def litert_repository(tmp_path_factory):
    """A LiteRT model (y = x @ W + 1) converted from a tf.function, in its own folder."""
    import tensorflow as tf

    weights = tf.constant(WEIGHTS)

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def affine(x):
        return {"y": tf.matmul(x, weights) + 1.0}

    converter = tf.lite.TFLiteConverter.from_concrete_functions(
        [affine.get_concrete_function()], affine
    )
    root = tmp_path_factory.mktemp("litert_repo")
    folder = root / "affine_litert"
    (folder / "1").mkdir(parents=True)
    (folder / "1" / "model.tflite").write_bytes(converter.convert())
    (folder / "config.pbtxt").write_text(LITERT_CONFIG)
    return root


def test_litert_model_served_with_batching_and_two_instances(litert_repository):
    (model,) = load_repository(litert_repository)
    assert isinstance(model, TensorModel) and len(model.backends) == 2
    rng = np.random.default_rng(0)
    requests = [rng.standard_normal((rows, 4)).astype(np.float32) for rows in (1, 3, 2, 1, 4)]
    with threaded_server([model]) as (url, server):
        client = triton.InferenceServerClient(url.removeprefix("http://"), concurrency=5)
        pending = []
        for x in requests:
            tensor = triton.InferInput("x", list(x.shape), "FP32")
            tensor.set_data_from_numpy(x)
            pending.append(client.async_infer("affine_litert", [tensor]))
        answers = [p.get_result().as_numpy("Identity") for p in pending]
        client.close()
        stats = server.entries["affine_litert"].statistics.snapshot()
    executions = stats["execution_count"]
    assert stats["inference_count"] == sum(len(x) for x in requests)
    for x, y in zip(requests, answers, strict=True):
        np.testing.assert_allclose(y, x @ WEIGHTS + 1.0, rtol=1e-5, atol=1e-5)
    assert executions < len(requests)  # the five requests shared batches


def test_litert_backend_resizes_between_batch_shapes(litert_repository):
    (model,) = load_repository(litert_repository, {"instance_count": 1})
    for rows in (5, 1, 7):
        x = np.ones((rows, 4), dtype=np.float32)
        prepared = model.prepare({"x": x})
        (out,) = model.run_batch(0, [prepared.data])
        np.testing.assert_allclose(out["Identity"], x @ WEIGHTS + 1.0, rtol=1e-5)


def test_config_pbtxt_is_read_with_triton_schema():
    path = tiny_repository() / TINY_MODEL / "config.pbtxt"
    config = serving_config(read_config(path), path)
    assert config.platform == "onnxruntime_onnx"
    assert [spec.name for spec in config.inputs] == ["input_ids", "attention_mask"]
    batching = config.batching
    assert (batching.max_batch_size, batching.preferred_batch_sizes) == (8, (4, 8))
    assert (batching.max_queue_delay_us, batching.max_queue_size) == (2000, 64)
    assert (batching.priority_levels, batching.default_priority_level) == (2, 2)
    assert config.parameters["max_sequence_length"] == "128"


def test_command_line_overrides_and_their_checks():
    base = BatchingSettings(max_batch_size=8, preferred_batch_sizes=(4, 8))
    unbatched = base.with_overrides(max_batch_size=1, max_queue_delay_us=None)
    assert (unbatched.max_batch_size, unbatched.preferred_batch_sizes) == (1, ())
    assert base.with_overrides(preferred_batch_sizes=[8, 2, 2]).preferred_batch_sizes == (2, 8)
    bad_overrides = [
        {"max_batch_size": 0},
        {"preferred_batch_sizes": [9]},
        {"instance_count": 0},
        {"length_bucket_ratio": 0.5},
        {"priority_levels": 1, "default_priority_level": 2},
    ]
    for bad in bad_overrides:
        with pytest.raises(RepositoryError):
            base.with_overrides(**bad)
    assert dataclasses.asdict(base) == dataclasses.asdict(base.with_overrides())


def test_bad_config_is_named(tmp_path):
    folder = tmp_path / "broken"
    folder.mkdir()
    (folder / "config.pbtxt").write_text(
        'name: "broken"\nplatform: "onnxruntime_onnx"\nmax_batch: 3\n'
    )
    with pytest.raises(RepositoryError, match="broken/config.pbtxt: not a valid Triton model conf"):
        read_config(folder / "config.pbtxt")


def test_backend_registry_names_every_platform_and_refuses_an_unknown_one(tmp_path):
    assert backend_spec("onnxruntime").platform == "onnxruntime_onnx"
    assert backend_spec("tflite").platform == "litert"
    assert backend_spec("onnxruntime_onnx").model_file == "model.onnx"
    path = tmp_path / "config.pbtxt"
    path.write_text('name: "x"\nbackend: "tensorrt_llm"\nmax_batch_size: 4\n')
    with pytest.raises(RepositoryError, match="'tensorrt_llm' is not served here"):
        serving_config(read_config(path), path)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["serve", "/no/such/repo"], "/no/such/repo: no such model repository"),
        (["serve", "{repo}", "--max-batch-size", "0"], "max_batch_size must be >= 1"),
        (["serve", "{repo}", "--preferred-batch-size", "64"], "outside 1..max_batch_size"),
    ],
)
def test_serve_command_errors_are_one_line_exit_2(argv, message, capsys):
    argv = [part.format(repo=tiny_repository()) for part in argv]
    assert main(argv) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0]


def test_mismatched_config_and_model_are_refused(tmp_path):
    source = tiny_repository() / TINY_MODEL
    folder = tmp_path / TINY_MODEL
    (folder / "1").mkdir(parents=True)
    for name in ("tokenizer.json", "labels.txt", "1/model.onnx"):
        (folder / name).write_bytes((source / name).read_bytes())
    text = (source / "config.pbtxt").read_text().replace('"attention_mask"', '"token_type_ids"')
    (folder / "config.pbtxt").write_text(text)
    with pytest.raises(RepositoryError, match="do not match"):
        load_repository(tmp_path)


class ScaledLogitsBackend(OnnxRuntimeBackend):
    """A stand-in for another runtime: ONNX Runtime with the logits scaled by ``scale``."""

    def __init__(self, path, threads: int = 1, scale: float = 1.0) -> None:
        super().__init__(path, threads)
        self.scale = scale

    def run(self, feeds):
        outputs = super().run(feeds)
        outputs["logits"] = outputs["logits"] * self.scale
        return outputs


def test_a_new_backend_is_one_class_and_one_registry_line(tmp_path, monkeypatch):
    from inference_pipeline.serving import backends

    line = backends.BackendSpec(("scaled_onnx",), ScaledLogitsBackend, "model.onnx", {"scale": 2.0})
    monkeypatch.setattr(backends, "BACKENDS", (*backends.BACKENDS, line))
    folder = tmp_path / TINY_MODEL
    shutil.copytree(tiny_repository() / TINY_MODEL, folder)
    config = folder / "config.pbtxt"
    config.write_text(config.read_text().replace('"onnxruntime_onnx"', '"scaled_onnx"'))
    # the config reader, the loader and the repository checks all take it from the table
    (scaled,) = load_repository(folder)
    (plain,) = load_repository(tiny_repository() / TINY_MODEL)
    assert scaled.config.platform == "scaled_onnx"
    assert isinstance(scaled.backends[0], ScaledLogitsBackend)
    texts = np.array(["market news", "film star award"], dtype=object)
    ours = scaled.run_batch(0, [scaled.prepare({"TEXT": texts}).data])[0]
    reference = plain.run_batch(0, [plain.prepare({"TEXT": texts}).data])[0]
    np.testing.assert_allclose(ours["logits"], 2.0 * reference["logits"], rtol=1e-6)
    np.testing.assert_array_equal(ours["label"], reference["label"])
