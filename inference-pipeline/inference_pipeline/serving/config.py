"""Serving settings: taken from a model's Triton ``config.pbtxt``, overridable on the command line.

The file is read by the one reader, ``repository.read_config`` (Triton's own schema, so a
config that Triton would refuse is refused here too); this module turns the parsed message
into what the server needs, and every problem is a ``RepositoryError`` naming the file.
Length-aware batching has no field in Triton's schema; it is read from ``parameters``
(``length_aware_batching``: "true"/"false", ``length_bucket_ratio``: e.g. "2.0").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from tritonclient.grpc import model_config_pb2

from inference_pipeline.repository import RepositoryError
from inference_pipeline.serving.backends import BackendError, backend_spec

# Triton's data types as the v2 protocol spells them.
TRITON_TO_V2_DATATYPE = {
    "TYPE_BOOL": "BOOL",
    "TYPE_UINT8": "UINT8",
    "TYPE_UINT16": "UINT16",
    "TYPE_UINT32": "UINT32",
    "TYPE_UINT64": "UINT64",
    "TYPE_INT8": "INT8",
    "TYPE_INT16": "INT16",
    "TYPE_INT32": "INT32",
    "TYPE_INT64": "INT64",
    "TYPE_FP16": "FP16",
    "TYPE_FP32": "FP32",
    "TYPE_FP64": "FP64",
    "TYPE_STRING": "BYTES",
}


@dataclass(frozen=True)
class TensorSpec:
    """One declared tensor; ``dims`` exclude the batch dimension, as in config.pbtxt."""

    name: str
    datatype: str  # v2 spelling: FP32, INT64, BYTES, ...
    dims: tuple[int, ...]


@dataclass(frozen=True)
class BatchingSettings:
    """The dynamic batcher's knobs (Triton's names where Triton has them)."""

    max_batch_size: int = 8
    preferred_batch_sizes: tuple[int, ...] = ()
    max_queue_delay_us: int = 0
    max_queue_size: int = 64  # rows waiting; 0 means unbounded (not recommended)
    default_timeout_us: int = 0  # 0: no per-request timeout unless the request sets one
    allow_timeout_override: bool = True
    priority_levels: int = 1
    default_priority_level: int = 1
    length_aware: bool = True
    length_bucket_ratio: float = 2.0  # a batch never mixes lengths more than this ratio apart
    instance_count: int = 1

    def validate(self) -> None:
        if self.max_batch_size < 1:
            raise RepositoryError(f"max_batch_size must be >= 1, got {self.max_batch_size}")
        bad = [p for p in self.preferred_batch_sizes if not 1 <= p <= self.max_batch_size]
        if bad:
            raise RepositoryError(
                f"preferred_batch_size {bad} outside 1..max_batch_size ({self.max_batch_size})"
            )
        if self.max_queue_delay_us < 0 or self.max_queue_size < 0 or self.default_timeout_us < 0:
            raise RepositoryError("queue delay, queue size and timeout must be >= 0")
        if self.priority_levels < 1 or not 1 <= self.default_priority_level <= max(
            self.priority_levels, 1
        ):
            raise RepositoryError(
                f"default_priority_level {self.default_priority_level} outside "
                f"1..priority_levels ({self.priority_levels})"
            )
        if self.length_bucket_ratio < 1.0:
            raise RepositoryError(
                f"length_bucket_ratio must be >= 1, got {self.length_bucket_ratio}"
            )
        if self.instance_count < 1:
            raise RepositoryError(f"instance_group count must be >= 1, got {self.instance_count}")

    def with_overrides(self, **overrides: object) -> BatchingSettings:
        """Return a copy with every non-None override applied (command-line flags)."""
        changes = {key: value for key, value in overrides.items() if value is not None}
        if "preferred_batch_sizes" in changes:
            changes["preferred_batch_sizes"] = tuple(sorted(set(changes["preferred_batch_sizes"])))
        elif "max_batch_size" in changes:  # a smaller max drops the preferred sizes above it
            limit = changes["max_batch_size"]
            changes["preferred_batch_sizes"] = tuple(
                size for size in self.preferred_batch_sizes if size <= limit
            )
        updated = dataclasses.replace(self, **changes)
        updated.validate()
        return updated


@dataclass(frozen=True)
class ModelConfig:
    """What the server needs from one model folder's config.pbtxt."""

    name: str
    platform: str  # a canonical name of serving.backends.BACKENDS
    inputs: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    batching: BatchingSettings
    parameters: dict[str, str] = field(default_factory=dict)


def _tensor_specs(entries: object, path: Path, kind: str) -> tuple[TensorSpec, ...]:
    specs = []
    for entry in entries:
        type_name = model_config_pb2.DataType.Name(entry.data_type)
        if type_name not in TRITON_TO_V2_DATATYPE:
            raise RepositoryError(f"{path}: {kind} {entry.name!r} has unsupported type {type_name}")
        specs.append(TensorSpec(entry.name, TRITON_TO_V2_DATATYPE[type_name], tuple(entry.dims)))
    return tuple(specs)


def _batching_from_proto(
    proto: model_config_pb2.ModelConfig, params: dict[str, str]
) -> BatchingSettings:
    dynamic = proto.dynamic_batching
    policy = dynamic.default_queue_policy
    has_dynamic = proto.HasField("dynamic_batching")
    instances = sum(group.count or 1 for group in proto.instance_group) or 1
    settings = BatchingSettings(
        max_batch_size=max(proto.max_batch_size, 1),
        preferred_batch_sizes=tuple(sorted(set(dynamic.preferred_batch_size))),
        max_queue_delay_us=dynamic.max_queue_delay_microseconds,
        max_queue_size=policy.max_queue_size if has_dynamic and policy.max_queue_size else 64,
        default_timeout_us=policy.default_timeout_microseconds,
        allow_timeout_override=policy.allow_timeout_override or not has_dynamic,
        priority_levels=max(dynamic.priority_levels, 1),
        default_priority_level=dynamic.default_priority_level or 1,
        length_aware=params.get("length_aware_batching", "true").lower() != "false",
        length_bucket_ratio=float(params.get("length_bucket_ratio", "2.0")),
        instance_count=instances,
    )
    # Triton without dynamic_batching runs each request alone.
    if not has_dynamic:
        settings = dataclasses.replace(settings, max_batch_size=1, preferred_batch_sizes=())
    return settings


def serving_config(proto: model_config_pb2.ModelConfig, path: Path) -> ModelConfig:
    """The server's view of a parsed config.pbtxt (``path`` names it in errors)."""
    params = {key: value.string_value for key, value in proto.parameters.items()}
    try:
        platform = backend_spec(proto.platform or proto.backend).platform
    except BackendError as exc:
        raise RepositoryError(f"{path}: {exc}") from None
    try:
        batching = _batching_from_proto(proto, params)
        batching.validate()
    except (RepositoryError, ValueError) as exc:
        raise RepositoryError(f"{path}: {exc}") from None
    return ModelConfig(
        name=proto.name or path.parent.name,
        platform=platform,
        inputs=_tensor_specs(proto.input, path, "input"),
        outputs=_tensor_specs(proto.output, path, "output"),
        batching=batching,
        parameters=params,
    )
