"""A generation model folder in a Triton-layout repository, so ``serve`` mounts the GPT's routes.

```
<repository>/bbc_gpt/
  config.pbtxt     name, backend: "generation", max_batch_size (max_num_seqs: sequences
                   running at once), dynamic_batching { default_queue_policy
                   { max_queue_size } }, parameters: gpt_config (JSON of GPTConfig),
                   block_size, num_blocks (0: room for max_num_seqs full-context sequences),
                   max_num_batched_tokens (the scheduler's per-step token budget),
                   admission_delay_factor (new requests wait until the oldest has waited
                   this many last-prefill latencies; 0: admitted at every iteration),
                   prefix_caching ("true"/"false")
  1/model.onnx     the explicit-KV-cache graph (export-gpt)
```
Triton has no "generation" backend; the field only tells our server which loader to use (a
Triton fleet would serve the same graph with its Python or TensorRT-LLM backend instead).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from inference_pipeline.generation.engine import (
    DEFAULT_ADMISSION_DELAY_FACTOR,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    ContinuousBatchingEngine,
)
from inference_pipeline.generation.model import GPTConfig
from inference_pipeline.generation.service import GenerationService
from inference_pipeline.repository import GENERATION_BACKEND, RepositoryError, read_config

DEFAULT_MAX_BATCH = 16
DEFAULT_MAX_QUEUE = 64


class GenerationFolderError(ValueError):
    """A generation model folder that cannot be served; the message names the file."""


def write_generation_folder(
    repository: Path,
    onnx_path: Path,
    config: GPTConfig,
    name: str = "bbc_gpt",
    max_num_seqs: int = DEFAULT_MAX_BATCH,
    max_queue: int = DEFAULT_MAX_QUEUE,
    block_size: int = 16,
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS,
    num_blocks: int = 0,
    prefix_caching: bool = True,
    admission_delay_factor: float = DEFAULT_ADMISSION_DELAY_FACTOR,
) -> Path:
    """Write ``repository/name`` (config.pbtxt + 1/model.onnx, copied); returns the folder."""
    folder = Path(repository) / name
    (folder / "1").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(onnx_path, folder / "1" / "model.onnx")
    proto = model_config_pb2.ModelConfig(
        name=name, backend=GENERATION_BACKEND, max_batch_size=max_num_seqs
    )
    proto.dynamic_batching.default_queue_policy.max_queue_size = max_queue
    params = {
        "gpt_config": json.dumps(config.to_dict()),
        "block_size": str(block_size),
        "num_blocks": str(num_blocks),
        "max_num_batched_tokens": str(max_num_batched_tokens),
        "admission_delay_factor": repr(float(admission_delay_factor)),
        "prefix_caching": "true" if prefix_caching else "false",
    }
    for key, value in params.items():
        proto.parameters[key].string_value = value
    (folder / "config.pbtxt").write_text(text_format.MessageToString(proto))
    return folder


def load_generation_service(
    folder: Path,
    threads: int = 1,
    max_num_seqs: int | None = None,
    max_queue: int | None = None,
    max_num_batched_tokens: int | None = None,
    admission_delay_factor: float | None = None,
) -> GenerationService:
    """The folder's graph on ONNX Runtime behind a continuous-batching engine (not started);
    the keyword arguments override the folder's config (the command line's flags)."""
    from inference_pipeline.generation.runtime import OrtStep

    folder = Path(folder)
    path = folder / "config.pbtxt"
    try:
        proto = read_config(path)
        params = {key: value.string_value for key, value in proto.parameters.items()}
        config = GPTConfig(**json.loads(params["gpt_config"]))
        block_size = int(params.get("block_size", "16"))
        num_blocks = int(params.get("num_blocks", "0"))
        budget = int(params.get("max_num_batched_tokens", DEFAULT_MAX_NUM_BATCHED_TOKENS))
        delay = float(params.get("admission_delay_factor", DEFAULT_ADMISSION_DELAY_FACTOR))
        caching = params.get("prefix_caching", "true")
        if caching not in ("true", "false"):
            raise ValueError(f"prefix_caching must be true or false, got {caching!r}")
    except (RepositoryError, KeyError, TypeError, ValueError) as exc:
        raise GenerationFolderError(f"{path}: not a generation model config ({exc})") from None
    versions = [p for p in folder.iterdir() if p.name.isdigit() and (p / "model.onnx").is_file()]
    if not versions:
        raise GenerationFolderError(f"{folder}: no version folder holds model.onnx")
    onnx_path = max(versions, key=lambda p: int(p.name)) / "model.onnx"
    queue_size = proto.dynamic_batching.default_queue_policy.max_queue_size or DEFAULT_MAX_QUEUE
    try:
        engine = ContinuousBatchingEngine(
            OrtStep(onnx_path, config, threads=threads),
            max_num_seqs=max_num_seqs or proto.max_batch_size or DEFAULT_MAX_BATCH,
            max_num_batched_tokens=max_num_batched_tokens or budget,
            num_blocks=num_blocks or None,
            block_size=block_size,
            max_queue=max_queue or queue_size,
            prefix_caching=caching == "true",
            admission_delay_factor=delay if admission_delay_factor is None
            else admission_delay_factor,
        )  # fmt: skip
    except Exception as exc:  # a graph ONNX Runtime refuses, a bad batch setting
        raise GenerationFolderError(f"{folder}: cannot load ({exc})") from None
    return GenerationService(engine, proto.name or folder.name)
