"""SavedModel folders: the one folder check, loading, signatures, and what a signature needs.

:func:`check_savedmodel_dir` is the only place that decides whether a path is a SavedModel
folder (no TensorFlow import, so the CLI answers bad paths and a ``saved_model.pb`` that is no
protocol buffer at once); everything that opens a SavedModel (inspection, conversion, the
``signatures`` command) goes through :func:`load_savedmodel`, which runs it once.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graph_inspector.errors import ConversionError, NotASavedModelError, UnknownSignatureError

SERVING_KEY = "serving_default"


def check_savedmodel_dir(path: str | Path) -> Path:
    """The folder as a Path, or :class:`NotASavedModelError` saying what is wrong with it."""
    p = Path(path)
    if not p.exists():
        raise NotASavedModelError(f"no such file or directory: {p}")
    if not p.is_dir():
        raise NotASavedModelError(f"{p} is a file, not a SavedModel directory")
    if not ((p / "saved_model.pb").is_file() or (p / "saved_model.pbtxt").is_file()):
        raise NotASavedModelError(f"{p} is not a SavedModel (no saved_model.pb inside)")
    if (p / "saved_model.pb").is_file():
        _check_protocol_buffer(p / "saved_model.pb")
    return p


def _check_protocol_buffer(pb: Path) -> None:
    """Refuse a ``saved_model.pb`` whose bytes are no protocol buffer at all, without TensorFlow.

    protobuf's ``Empty`` message reads any well-formed message (every field kept as an unknown
    one) and raises on bytes that break the wire format, as TensorFlow's own parse would; a
    well-formed file that is still no loadable SavedModel is left to :func:`load_savedmodel`.
    """
    from google.protobuf import empty_pb2
    from google.protobuf.message import DecodeError

    try:
        empty_pb2.Empty().ParseFromString(pb.read_bytes())
    except DecodeError:
        raise NotASavedModelError(
            f"{pb.parent} could not be loaded as a SavedModel: {pb.name} is not a protocol "
            "buffer (its wire format is corrupt)"
        ) from None


def load_savedmodel(path: str | Path) -> Any:
    """``tf.saved_model.load`` after the folder check; a corrupt folder is one clear error."""
    import tensorflow as tf

    folder = check_savedmodel_dir(path)
    try:
        return tf.saved_model.load(str(folder))
    except Exception as exc:  # noqa: BLE001 - corrupt protobufs raise many types (OSError…)
        text = " ".join(str(exc).split())[:300]
        raise NotASavedModelError(f"{folder} could not be loaded as a SavedModel: {text}") from exc


def signature_of(loaded: Any, folder: Path | str, signature_key: str = SERVING_KEY) -> Any:
    """One signature of a loaded SavedModel, or an error naming the keys it has."""
    if signature_key not in loaded.signatures:
        raise UnknownSignatureError(
            f"{folder} has no signature {signature_key!r} (it has {sorted(loaded.signatures)})"
        )
    return loaded.signatures[signature_key]


def load_serving_fn(savedmodel_dir: str | Path, signature_key: str = SERVING_KEY):
    """The reloaded signature as ``fn(inputs: dict) -> dict[str, np.ndarray]``: every output,
    by name (what :func:`graph_inspector.tflite.validate_tflite` compares, output by output)."""
    import tensorflow as tf

    loaded = load_savedmodel(savedmodel_dir)
    signature = signature_of(loaded, savedmodel_dir, signature_key)

    def run(inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        tensors = {k: tf.constant(v) for k, v in inputs.items()}
        return {name: value.numpy() for name, value in signature(**tensors).items()}

    run.signature = signature  # type: ignore[attr-defined]
    run.loaded = loaded  # type: ignore[attr-defined]  # keeps the variables alive
    return run


def signature_param_bytes(signature: Any) -> int:
    """Bytes of the float variables a signature reads: what a float32 TFLite file must hold."""
    total = 0
    for variable in signature.variables:
        if variable.dtype.is_floating:
            total += variable.dtype.size * int(np.prod(variable.shape))
    return total


def probe_inputs_from_signature(
    signature: Any, batch: int = 8, seed: int = 0, unknown_dim: int = 16
) -> dict[str, np.ndarray]:
    """Random inputs matching a signature's specs, for models we know nothing else about.

    Integer inputs get 0/1: valid token ids, mask values and segment ids for any BERT-like model.
    Unknown dimensions become ``batch`` (first) or ``unknown_dim``.
    """
    rng = np.random.default_rng(seed)
    probes = {}
    _, kwarg_specs = signature.structured_input_signature
    for name, spec in kwarg_specs.items():
        shape = [
            (batch if i == 0 else unknown_dim) if d is None else d
            for i, d in enumerate(spec.shape.as_list())
        ]
        dtype = spec.dtype.as_numpy_dtype
        if spec.dtype.is_integer:
            probes[name] = rng.integers(0, 2, size=shape).astype(dtype)
        elif spec.dtype.is_floating:
            probes[name] = rng.standard_normal(shape).astype(dtype)
        else:
            raise ConversionError(f"cannot make probe inputs for {name}: dtype {spec.dtype.name}")
    return probes


# --- what a SavedModel carries (like `saved_model_cli show --all`) ---------------------------


@dataclass(frozen=True)
class TensorDesc:
    name: str
    dtype: str
    shape: tuple[int | None, ...] | None

    def __str__(self) -> str:
        dims = (
            "?"
            if self.shape is None
            else ",".join("None" if d is None else str(d) for d in self.shape)
        )
        return f"{self.name}: {self.dtype}[{dims}]"


@dataclass(frozen=True)
class SignatureDesc:
    key: str
    inputs: tuple[TensorDesc, ...]
    outputs: tuple[TensorDesc, ...]


@dataclass(frozen=True)
class SavedModelDesc:
    folder: Path
    signatures: tuple[SignatureDesc, ...]
    assets: tuple[str, ...]  # files under assets/, relative to it
    variables: int

    def text(self) -> str:
        lines = [f"SavedModel {self.folder}: {len(self.signatures)} signature(s)"]
        for sig in self.signatures:
            lines.append(f"  signature {sig.key!r}")
            lines += [f"    input   {t}" for t in sig.inputs]
            lines += [f"    output  {t}" for t in sig.outputs]
        lines.append(f"  variables: {self.variables}")
        if self.assets:
            lines.append(f"  assets ({len(self.assets)}): " + ", ".join(self.assets))
        else:
            lines.append("  assets: none")
        return "\n".join(lines)


def _tensor_desc(name: str, spec: Any) -> TensorDesc:
    rank_known = spec.shape.rank is not None
    return TensorDesc(name, spec.dtype.name, tuple(spec.shape.as_list()) if rank_known else None)


def describe_savedmodel(path: str | Path) -> SavedModelDesc:
    """Every signature's inputs and outputs and the asset files a SavedModel carries."""
    folder = check_savedmodel_dir(path)
    loaded = load_savedmodel(folder)
    signatures = []
    for key in sorted(loaded.signatures):
        fn = loaded.signatures[key]
        _, kwargs = fn.structured_input_signature
        inputs = tuple(_tensor_desc(k, kwargs[k]) for k in sorted(kwargs))
        outputs = tuple(_tensor_desc(k, v) for k, v in sorted(fn.structured_outputs.items()))
        signatures.append(SignatureDesc(key, inputs, outputs))
    asset_dir = folder / "assets"
    assets = tuple(
        sorted(str(p.relative_to(asset_dir)) for p in asset_dir.rglob("*") if p.is_file())
    )
    variables = len(getattr(loaded, "variables", ()) or ())
    return SavedModelDesc(folder, tuple(signatures), assets, variables)
