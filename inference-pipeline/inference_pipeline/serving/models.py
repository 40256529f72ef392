"""Served models: a model folder of a Triton-layout repository, loaded for serving.

Two kinds behind one interface:
- ``TextClassifierModel``: takes a BYTES input ``TEXT`` (one text per row), tokenizes with
  the folder's ``tokenizer.json`` (truncating at ``max_sequence_length``), pads each batch to
  its longest row, runs the graph and adds a BYTES ``label`` output (``labels.txt``).
- ``TensorModel``: the config's tensors as they are (for example lab 03's TFLite model);
  requests share a batch only when their non-batch shapes match.
Both split a batch into per-request ``prepare`` (on the event loop) and ``run_batch`` (in a
worker thread, on one model instance); ``phases[instance]`` holds the last batch's input
assembly / model run / output split times (the statistics extension's compute_* figures).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from tritonclient.grpc import model_config_pb2 as mc

from inference_pipeline.repository import (
    CONFIG_FILE,
    GENERATION_BACKEND,
    RepositoryError,
    load_model_folder,
    read_config,
)
from inference_pipeline.serving.backends import (
    Backend,
    backend_spec,
    default_threads,
    make_backend,
)
from inference_pipeline.serving.config import (
    BatchingSettings,
    ModelConfig,
    TensorSpec,
    serving_config,
)
from inference_pipeline.serving.statistics import Phases

V2_TO_NUMPY = {
    "BOOL": np.bool_,
    "UINT8": np.uint8,
    "UINT16": np.uint16,
    "UINT32": np.uint32,
    "UINT64": np.uint64,
    "INT8": np.int8,
    "INT16": np.int16,
    "INT32": np.int32,
    "INT64": np.int64,
    "FP16": np.float16,
    "FP32": np.float32,
    "FP64": np.float64,
    "BYTES": np.object_,
}
TEXT_INPUT = "TEXT"
LABEL_OUTPUT = "label"


@dataclass
class Prepared:
    """One request after ``prepare``: what the batcher needs to place it."""

    data: Any
    rows: int
    length: int = 0
    shape_key: tuple = ()


class ServedModel:
    """The interface the server and the Ray deployment use."""

    name: str
    version: str
    config: ModelConfig
    batching: BatchingSettings
    inputs: tuple[TensorSpec, ...]  # as clients see them (batch dim excluded)
    outputs: tuple[TensorSpec, ...]
    phases: list[Phases]  # per instance: the last batch's compute phases

    def prepare(self, inputs: dict[str, np.ndarray]) -> Prepared:
        raise NotImplementedError

    def run_batch(self, instance: int, batch: list[Any]) -> list[dict[str, np.ndarray]]:
        raise NotImplementedError

    def metadata(self) -> dict:
        """The v2 model metadata (shapes include the batch dimension, -1)."""

        def describe(spec: TensorSpec) -> dict:
            return {"name": spec.name, "datatype": spec.datatype, "shape": [-1, *spec.dims]}

        return {
            "name": self.name,
            "versions": [self.version],
            "platform": self.config.platform,
            "inputs": [describe(s) for s in self.inputs],
            "outputs": [describe(s) for s in self.outputs],
        }


def _split(outputs: dict[str, np.ndarray], rows: list[int]) -> list[dict[str, np.ndarray]]:
    bounds = np.cumsum(rows)[:-1]
    parts = {name: np.split(array, bounds) for name, array in outputs.items()}
    return [{name: parts[name][i] for name in parts} for i in range(len(rows))]


class TextClassifierModel(ServedModel):
    """Texts in, logits (+ embedding) and the predicted label out."""

    def __init__(
        self,
        config: ModelConfig,
        folder: Path,
        backends: list[Backend],
        tokenizer: Any,
        labels: list[str],
        max_length: int,
    ) -> None:
        self.config, self.name, self.version = config, config.name, folder.name
        self.batching = config.batching
        self.backends = backends
        self.tokenizer = tokenizer
        self.labels = labels
        self.max_length = max_length
        self._dtypes = {spec.name: V2_TO_NUMPY[spec.datatype] for spec in config.inputs}
        self.inputs = (TensorSpec(TEXT_INPUT, "BYTES", ()),)
        self.outputs = (*config.outputs, TensorSpec(LABEL_OUTPUT, "BYTES", ()))
        self.phases = [Phases() for _ in backends]

    def tokenize(self, texts: list[str]) -> list[list[int]]:
        """Token ids per text, unpadded (the tokenizer may pad a request's texts on the right;
        batches are padded later, to the batch's longest)."""
        encodings = self.tokenizer.encode_batch(texts)
        return [e.ids[: sum(e.attention_mask)] for e in encodings]

    def prepare(self, inputs: dict[str, np.ndarray]) -> Prepared:
        if set(inputs) != {TEXT_INPUT}:
            raise ValueError(f"model {self.name!r} takes one input named {TEXT_INPUT!r}")
        texts = [
            item.decode("utf-8") if isinstance(item, bytes) else str(item)
            for item in inputs[TEXT_INPUT].reshape(-1)
        ]
        ids = self.tokenize(texts)
        return Prepared(data=ids, rows=len(ids), length=max(len(row) for row in ids))

    def encode_batch(self, rows: list[list[int]]) -> dict[str, np.ndarray]:
        """Pad to the batch's longest row: the graph's input feeds."""
        width = max(len(row) for row in rows)
        ids = np.zeros((len(rows), width), dtype=np.int64)
        mask = np.zeros((len(rows), width), dtype=np.int64)
        for i, row in enumerate(rows):
            ids[i, : len(row)] = row
            mask[i, : len(row)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
        return {
            name: feeds[name].astype(self._dtypes.get(name, np.int64), copy=False)
            for name in self.backends[0].input_names
        }

    def run_batch(self, instance: int, batch: list[list[list[int]]]) -> list[dict[str, np.ndarray]]:
        start = time.perf_counter()
        rows = [row for request in batch for row in request]
        feeds = self.encode_batch(rows)
        ran = time.perf_counter()
        outputs = self.backends[instance].run(feeds)
        done = time.perf_counter()
        logits = outputs[self.config.outputs[0].name]
        label_ids = logits.argmax(axis=-1)
        outputs[LABEL_OUTPUT] = np.array([self.labels[i].encode() for i in label_ids], dtype=object)
        results = _split(outputs, [len(request) for request in batch])
        self.phases[instance] = Phases(ran - start, done - ran, time.perf_counter() - done)
        return results


class TensorModel(ServedModel):
    """The config's tensors as they are; batches concatenate along the first axis."""

    def __init__(self, config: ModelConfig, folder: Path, backends: list[Backend]) -> None:
        self.config, self.name, self.version = config, config.name, folder.name
        self.batching = config.batching
        self.backends = backends
        self.inputs, self.outputs = config.inputs, config.outputs
        self.phases = [Phases() for _ in backends]

    def prepare(self, inputs: dict[str, np.ndarray]) -> Prepared:
        expected = {spec.name: spec for spec in self.inputs}
        if set(inputs) != set(expected):
            raise ValueError(f"model {self.name!r} takes inputs {sorted(expected)}")
        rows = {array.shape[0] for array in inputs.values()}
        if len(rows) != 1:
            raise ValueError("every input must have the same batch size")
        shape_key = tuple((name, inputs[name].shape[1:]) for name in sorted(inputs))
        return Prepared(data=inputs, rows=rows.pop(), shape_key=shape_key)

    def run_batch(self, instance: int, batch: list[dict[str, np.ndarray]]) -> list[dict]:
        start = time.perf_counter()
        feeds = {name: np.concatenate([request[name] for request in batch]) for name in batch[0]}
        ran = time.perf_counter()
        outputs = self.backends[instance].run(feeds)
        done = time.perf_counter()
        results = _split(outputs, [len(next(iter(request.values()))) for request in batch])
        self.phases[instance] = Phases(ran - start, done - ran, time.perf_counter() - done)
        return results


def _latest_version(folder: Path, filename: str) -> Path:
    versions = [p for p in folder.iterdir() if p.is_dir() and p.name.isdigit()]
    versions = [p for p in versions if (p / filename).is_file()]
    if not versions:
        raise RepositoryError(f"{folder}: no version folder holds {filename}")
    return max(versions, key=lambda p: int(p.name))


def _check_declared(config: ModelConfig, backend: Backend, folder: Path) -> None:
    declared = {spec.name for spec in config.inputs}
    if declared != set(backend.input_names):
        raise RepositoryError(
            f"{folder}/config.pbtxt declares inputs {sorted(declared)} but the model takes "
            f"{sorted(backend.input_names)}"
        )
    missing = {spec.name for spec in config.outputs} - set(backend.output_names)
    if missing:
        raise RepositoryError(f"{folder}/config.pbtxt declares outputs the model lacks: {missing}")


def load_model(
    folder: Path,
    overrides: dict[str, object] | None = None,
    threads: int | None = None,
    proto: mc.ModelConfig | None = None,
) -> ServedModel:
    """Load one model folder (config.pbtxt, <version>/model.*, tokenizer, labels): the
    config is read once (``proto``: already read by the caller); a text classifier's folder
    is validated by the same loader the gates use (the same checks and tokenizer settings)."""
    folder = Path(folder)
    proto = proto if proto is not None else read_config(folder / CONFIG_FILE)
    config = serving_config(proto, folder / CONFIG_FILE)
    try:
        batching = config.batching.with_overrides(**(overrides or {}))
    except RepositoryError as exc:
        raise RepositoryError(f"{folder}: {exc}") from None
    config = ModelConfig(
        config.name, config.platform, config.inputs, config.outputs, batching, config.parameters
    )
    threads = threads or default_threads(batching.instance_count)
    spec = backend_spec(config.platform)
    is_text = bool(config.parameters.get("tokenizer")) and spec.model_format == "onnx"
    if is_text:
        loaded = load_model_folder(folder, proto)
        model_path = loaded.onnx_path
    else:
        model_path = _latest_version(folder, spec.model_file) / spec.model_file
    backends = [
        make_backend(config.platform, model_path, threads) for _ in range(batching.instance_count)
    ]
    _check_declared(config, backends[0], folder)
    if not is_text:
        return TensorModel(config, model_path.parent, backends)
    return TextClassifierModel(
        config,
        model_path.parent,
        backends,
        loaded.tokenizer.tokenizer,
        list(loaded.labels),
        loaded.max_sequence_length,
    )


def repository_folders(path: Path) -> tuple[list[tuple[Path, mc.ModelConfig]], list[Path]]:
    """(v2 model folders with their parsed config, generation folders) of a repository, or
    of ``path`` itself when it is one model folder; every config.pbtxt is read once."""
    path = Path(path)
    if not path.is_dir():
        raise RepositoryError(f"{path}: no such model repository")
    if (path / CONFIG_FILE).is_file():
        folders = [path]
    else:
        folders = sorted(p for p in path.iterdir() if (p / CONFIG_FILE).is_file())
        if not folders:
            raise RepositoryError(f"{path}: no model folder (with a config.pbtxt) inside")
    v2, generation = [], []
    for folder in folders:
        proto = read_config(folder / CONFIG_FILE)
        if proto.backend == GENERATION_BACKEND:
            generation.append(folder)
        else:
            v2.append((folder, proto))
    return v2, generation


def generation_folders(path: Path) -> list[Path]:
    """The repository's generation model folders (``backend: "generation"``), or ``path``
    itself when it is one; ``serve`` mounts their routes beside the v2 models."""
    return repository_folders(path)[1]


def load_repository(
    path: Path, overrides: dict[str, object] | None = None, threads: int | None = None
) -> list[ServedModel]:
    """Every v2 model of a repository (or the one model if ``path`` is a model folder).
    Generation folders are skipped (see ``generation_folders``); a repository holding only
    those yields an empty list."""
    v2, _ = repository_folders(path)
    return [load_model(folder, overrides, threads, proto) for folder, proto in v2]
