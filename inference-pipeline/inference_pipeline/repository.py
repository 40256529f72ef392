"""The model repository in Triton's layout: write it, read it back, validate it.

```
model_repository/
  manifest.json              every variant: route, precision, gates, latency, sha256, promoted
  gate_set.json              the held-out texts the gates ran on
  gate_reference.npz         PyTorch FP32 outputs on them (what `gate` compares against)
  <model>/config.pbtxt       Triton ModelConfig (text format), parsed with tritonclient's schema
  <model>/tokenizer.json     tokenization stays outside the graph
  <model>/labels.txt         class names in logit order
  <model>/1/model.onnx
```
Only promoted variants get a model folder. ``config.pbtxt`` is built as a
``tritonclient.grpc.model_config_pb2.ModelConfig`` message and written with protobuf's
``text_format``, so a field Triton does not know cannot be written, and reading it back with
the same schema is the validation. :func:`read_config` is the one reader of config.pbtxt
(build, gate and serve all go through it); every problem is a :class:`RepositoryError`.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2 as mc

from inference_pipeline.serving.backends import BackendError, backend_spec
from inference_pipeline.tokenization import MAX_SEQUENCE_LENGTH, TextTokenizer

PLATFORM = "onnxruntime_onnx"
MODEL_FILE = "model.onnx"
CONFIG_FILE = "config.pbtxt"
# A folder whose config says ``backend: "generation"`` holds a GPT: generation routes, not v2.
GENERATION_BACKEND = "generation"
VERSION = "1"
MAX_BATCH_SIZE = 32
PREFERRED_BATCH_SIZES = (4, 8, 16)
MAX_QUEUE_DELAY_MICROSECONDS = 2000
INSTANCE_COUNT = 1
MANIFEST = "manifest.json"
GATE_SET = "gate_set.json"
GATE_REFERENCE = "gate_reference.npz"
TOKENIZER_FILE = "tokenizer.json"
LABELS_FILE = "labels.txt"

_ONNX_TO_TRITON = {
    onnx.TensorProto.INT64: mc.TYPE_INT64,
    onnx.TensorProto.INT32: mc.TYPE_INT32,
    onnx.TensorProto.FLOAT: mc.TYPE_FP32,
    onnx.TensorProto.FLOAT16: mc.TYPE_FP16,
}
# (name, ONNX element type, dims without the batch dimension) of the classifier graph.
GRAPH_INPUTS = (("input_ids", mc.TYPE_INT64, (-1,)), ("attention_mask", mc.TYPE_INT64, (-1,)))
GRAPH_OUTPUTS = (("logits", mc.TYPE_FP32, (5,)), ("embedding", mc.TYPE_FP32, (384,)))


class RepositoryError(ValueError):
    """A repository, model folder or file that cannot be used; the message names it."""


def file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def make_config(name: str, max_sequence_length: int = MAX_SEQUENCE_LENGTH) -> mc.ModelConfig:
    config = mc.ModelConfig(name=name, platform=PLATFORM, max_batch_size=MAX_BATCH_SIZE)
    for tensor_name, data_type, dims in GRAPH_INPUTS:
        config.input.add(name=tensor_name, data_type=data_type, dims=list(dims))
    for tensor_name, data_type, dims in GRAPH_OUTPUTS:
        label_file = LABELS_FILE if tensor_name == "logits" else ""
        config.output.add(
            name=tensor_name, data_type=data_type, dims=list(dims), label_filename=label_file
        )
    config.dynamic_batching.preferred_batch_size.extend(PREFERRED_BATCH_SIZES)
    config.dynamic_batching.max_queue_delay_microseconds = MAX_QUEUE_DELAY_MICROSECONDS
    config.instance_group.add(count=INSTANCE_COUNT, kind=mc.ModelInstanceGroup.KIND_CPU)
    for key, value in (
        ("max_sequence_length", str(max_sequence_length)),
        ("tokenizer", TOKENIZER_FILE),
        ("labels", LABELS_FILE),
    ):
        config.parameters[key].string_value = value
    return config


def write_model_folder(
    repository: Path,
    name: str,
    onnx_file: Path,
    tokenizer: TextTokenizer,
    labels: tuple[str, ...],
) -> Path:
    """``repository/name/{config.pbtxt, tokenizer.json, labels.txt, 1/model.onnx}``."""
    folder = repository / name
    (folder / VERSION).mkdir(parents=True, exist_ok=True)
    shutil.copyfile(onnx_file, folder / VERSION / MODEL_FILE)
    tokenizer.save(folder / TOKENIZER_FILE)
    (folder / LABELS_FILE).write_text("\n".join(labels) + "\n")
    config = make_config(name, tokenizer.max_length)
    (folder / "config.pbtxt").write_text(text_format.MessageToString(config))
    return folder


def read_config(path: Path) -> mc.ModelConfig:
    """Parse ``path`` (a config.pbtxt) with Triton's schema; RepositoryError names the file."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise RepositoryError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise RepositoryError(f"{path}: cannot read ({exc})") from None
    try:
        return text_format.Parse(text, mc.ModelConfig())
    except text_format.ParseError as exc:
        raise RepositoryError(f"{path}: not a valid Triton model config ({exc})") from None


@dataclass
class ModelFolder:
    """One model folder, validated: what serving and the gates need to run it."""

    name: str
    path: Path
    config: mc.ModelConfig
    tokenizer: TextTokenizer
    labels: tuple[str, ...]
    onnx_path: Path
    max_sequence_length: int


def _tensor_specs(values: list, where: str) -> list[tuple[str, int, tuple[int, ...]]]:
    specs = []
    for value in values:
        tensor = value.type.tensor_type
        if tensor.elem_type not in _ONNX_TO_TRITON:
            raise RepositoryError(f"{where}: tensor {value.name} has unsupported element type")
        dims = tuple(d.dim_value if d.HasField("dim_value") else -1 for d in tensor.shape.dim)
        specs.append((value.name, _ONNX_TO_TRITON[tensor.elem_type], dims[1:]))
    return specs


def check_config_matches_model(config: mc.ModelConfig, model: onnx.ModelProto, where: str) -> None:
    """The config's inputs/outputs must be the graph's: same names, types and dims."""
    initializers = {i.name for i in model.graph.initializer}
    graph_inputs = [v for v in model.graph.input if v.name not in initializers]
    for kind, declared, actual in (
        ("input", config.input, _tensor_specs(graph_inputs, where)),
        ("output", config.output, _tensor_specs(list(model.graph.output), where)),
    ):
        wanted = [(t.name, t.data_type, tuple(t.dims)) for t in declared]
        if sorted(wanted) != sorted(actual):
            show = [f"{n} {mc.DataType.Name(t)} {list(d)}" for n, t, d in actual]
            mine = [f"{n} {mc.DataType.Name(t)} {list(d)}" for n, t, d in wanted]
            raise RepositoryError(f"{where}: config {kind}s {mine} do not match the model's {show}")


def load_model_folder(path: Path, config: mc.ModelConfig | None = None) -> ModelFolder:
    """Read and validate one text-classifier model folder (config, model, tokenizer, labels);
    ``config``: the folder's config.pbtxt when the caller has read it already."""
    path = Path(path)
    if not path.is_dir():
        raise RepositoryError(f"{path}: no such model folder")
    config = config if config is not None else read_config(path / CONFIG_FILE)
    if config.name and config.name != path.name:
        raise RepositoryError(f"{path}/config.pbtxt: name {config.name!r} is not the folder name")
    try:
        spec = backend_spec(config.platform or config.backend)
    except BackendError as exc:
        raise RepositoryError(f"{path}/config.pbtxt: {exc}") from None
    if spec.model_format != "onnx":
        raise RepositoryError(
            f"{path}/config.pbtxt: platform {spec.platform!r} is not an ONNX platform"
        )
    model_file = path / VERSION / (config.default_model_filename or spec.model_file)
    if not model_file.is_file():
        raise RepositoryError(f"{model_file}: no such model file")
    try:
        model = onnx.load(str(model_file))
        onnx.checker.check_model(model)
    except Exception as exc:  # protobuf DecodeError, ValidationError...: all mean "corrupt"
        raise RepositoryError(f"{model_file}: not a valid ONNX model ({exc})") from exc
    check_config_matches_model(config, model, str(path / CONFIG_FILE))
    parameters = {k: v.string_value for k, v in config.parameters.items()}
    try:
        max_length = int(parameters.get("max_sequence_length", MAX_SEQUENCE_LENGTH))
    except ValueError as exc:
        raise RepositoryError(
            f"{path}/config.pbtxt: max_sequence_length is not an integer"
        ) from exc
    tokenizer_file = path / parameters.get("tokenizer", TOKENIZER_FILE)
    if not tokenizer_file.is_file():
        raise RepositoryError(f"{tokenizer_file}: no such tokenizer file")
    try:
        tokenizer = TextTokenizer.from_file(tokenizer_file, max_length)
    except ValueError as exc:
        raise RepositoryError(str(exc)) from exc
    labels_file = path / parameters.get("labels", LABELS_FILE)
    if not labels_file.is_file():
        raise RepositoryError(f"{labels_file}: no such labels file")
    labels = tuple(line for line in labels_file.read_text().splitlines() if line.strip())
    logits = [t for t in config.output if t.name == "logits"]
    if logits and len(labels) != logits[0].dims[-1]:
        raise RepositoryError(
            f"{labels_file}: {len(labels)} labels for {logits[0].dims[-1]} logits"
        )
    return ModelFolder(path.name, path, config, tokenizer, labels, model_file, max_length)


def write_manifest(repository: Path, manifest: dict) -> Path:
    path = repository / MANIFEST
    path.write_text(json.dumps(manifest, indent=2, sort_keys=False) + "\n")
    return path


def read_manifest(repository: Path) -> dict:
    """The manifest of an existing repository (RepositoryError if missing or not JSON)."""
    repository = Path(repository)
    if not repository.is_dir():
        raise RepositoryError(f"{repository}: no such model repository folder")
    path = repository / MANIFEST
    if not path.is_file():
        raise RepositoryError(f"{path}: no manifest (was this folder written by `build`?)")
    try:
        manifest = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise RepositoryError(f"{path}: not valid JSON ({exc})") from exc
    if not isinstance(manifest, dict) or not isinstance(manifest.get("variants"), list):
        raise RepositoryError(f"{path}: has no 'variants' list")
    return manifest


def verify_hashes(repository: Path, files: dict[str, str]) -> None:
    """Every file listed (path relative to the repository -> sha256) exists and matches."""
    for relative, digest in files.items():
        path = repository / relative
        if not path.is_file():
            raise RepositoryError(f"{path}: listed in the manifest but missing")
        if file_sha256(path) != digest:
            raise RepositoryError(f"{path}: sha256 differs from the manifest (file changed)")
