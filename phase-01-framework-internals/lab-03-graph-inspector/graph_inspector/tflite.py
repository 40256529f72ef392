"""SavedModel -> TFLite (float32 and dynamic-range), run in LiteRT, and never trust a conversion
that was not checked.

The converter can succeed and still produce a model that computes garbage. The case this lab
hits: a ``tf.Module`` whose ``tf.function`` calls a Keras 3 model. Keras 3 wraps every weight in
a ``keras.Variable`` that holds the real ``tf.Variable`` inside; ``tf.Module`` does not see
through the wrapper, so the converter cannot freeze the weights into constants. It keeps them as
TFLite resource variables (``VAR_HANDLE`` / ``READ_VARIABLE``) with no initializer, and the model
reads uninitialised memory: NaN, zeros or huge numbers, with no error anywhere. So every
converted model goes through :func:`validate_tflite`: finite outputs, a file size that can hold
the weights, and agreement with TensorFlow on probe inputs; any failure raises
:class:`ConversionError` naming what failed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np

Quantization = Literal["float32", "dynamic_range"]

# Agreement with TensorFlow, as relative L2 error of the outputs on the probe inputs.
# float32 TFLite differs only by kernel summation order (~1e-6 relative). Dynamic-range keeps
# int8 weights and quantizes activations on the fly: a few percent is normal, garbage is ~1.
FLOAT32_MAX_REL_ERROR = 1e-4
DYNAMIC_RANGE_MAX_REL_ERROR = 0.15
# The file must be able to hold the weights: float32 keeps 4 bytes per parameter, dynamic-range
# 1 (int8) for most of them. Constant folding may drop weights the signature never reads (rows
# of the position table beyond its sequence length: ~4% for BERT-tiny at 16 tokens), hence the
# margin. A model whose weights were not frozen in is far smaller (0.3% in the trap).
MIN_SIZE_FRACTION = {"float32": 0.5, "dynamic_range": 0.15}


class ConversionError(RuntimeError):
    """A SavedModel could not be converted, or the converted model failed validation."""


@dataclass
class ValidationReport:
    """What :func:`validate_tflite` measured on one converted model."""

    quantization: Quantization
    model_bytes: int
    param_bytes: int
    num_probes: int
    all_finite: bool
    max_abs_diff: float
    rel_error: float
    argmax_agreement: float
    resource_variable_ops: int
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _require_litert():
    try:
        from ai_edge_litert.interpreter import Interpreter
    except ImportError as exc:  # pragma: no cover - the venv pins ai-edge-litert
        raise ConversionError(
            "running TFLite models needs the PyPI package 'ai-edge-litert' (see requirements.txt)"
        ) from exc
    return Interpreter


class TFLiteModel:
    """A converted model loaded in the LiteRT interpreter, called by signature input names.

    Inputs may have any batch size: the signature runner resizes the dynamic batch dimension.
    """

    def __init__(
        self,
        model: bytes | str | Path,
        signature_key: str = "serving_default",
        num_threads: int | None = None,
    ) -> None:
        interpreter_cls = _require_litert()
        content = model if isinstance(model, bytes) else Path(model).read_bytes()
        self.num_bytes = len(content)
        threads = num_threads if num_threads is not None else min(4, os.cpu_count() or 1)
        self.interpreter = interpreter_cls(model_content=content, num_threads=threads)
        signatures = self.interpreter.get_signature_list()
        if signature_key not in signatures:
            raise ConversionError(
                f"TFLite model has no signature {signature_key!r} (it has {sorted(signatures)})"
            )
        self.input_names: list[str] = list(signatures[signature_key]["inputs"])
        self.output_names: list[str] = list(signatures[signature_key]["outputs"])
        self._runner = self.interpreter.get_signature_runner(signature_key)

    def op_names(self) -> list[str]:
        # _get_ops_details is the interpreter's only op listing (used by its own analyzer).
        return [op["op_name"] for op in self.interpreter._get_ops_details()]

    def __call__(self, **inputs: np.ndarray) -> dict[str, np.ndarray]:
        missing = set(self.input_names) - set(inputs)
        if missing:
            raise ValueError(f"missing TFLite inputs {sorted(missing)}")
        return {k: np.array(v) for k, v in self._runner(**inputs).items()}

    def predict(self, inputs: Mapping[str, np.ndarray], batch_size: int = 64) -> np.ndarray:
        """The first output for all rows of ``inputs``, computed ``batch_size`` rows at a time."""
        n = len(next(iter(inputs.values())))
        outputs = []
        for start in range(0, n, batch_size):
            chunk = {
                k: np.ascontiguousarray(v[start : start + batch_size]) for k, v in inputs.items()
            }
            outputs.append(self(**chunk)[self.output_names[0]])
        return np.concatenate(outputs)


def convert_savedmodel_to_tflite(
    savedmodel_dir: str | Path,
    quantization: Quantization = "float32",
    signature_key: str = "serving_default",
) -> bytes:
    """Convert one signature of a SavedModel; converter failures become :class:`ConversionError`."""
    import tensorflow as tf

    savedmodel_dir = Path(savedmodel_dir)
    check_is_savedmodel(savedmodel_dir)
    if quantization not in ("float32", "dynamic_range"):
        raise ValueError(f"quantization must be 'float32' or 'dynamic_range', got {quantization!r}")
    try:
        converter = tf.lite.TFLiteConverter.from_saved_model(
            str(savedmodel_dir), signature_keys=[signature_key]
        )
        if quantization == "dynamic_range":
            # Optimize.DEFAULT with no representative dataset = dynamic-range quantization:
            # weights stored int8, activations quantized per inference, outputs stay float.
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        return converter.convert()
    except Exception as exc:  # the converter raises many types; one clear error for callers
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConversionError(
            f"TFLite {quantization} conversion of {savedmodel_dir} "
            f"(signature {signature_key!r}) failed: {first_line}"
        ) from exc


def check_is_savedmodel(path: str | Path) -> Path:
    path = Path(path)
    if not path.exists():
        raise ConversionError(f"{path} does not exist")
    if not path.is_dir() or not (
        (path / "saved_model.pb").is_file() or (path / "saved_model.pbtxt").is_file()
    ):
        raise ConversionError(f"{path} is not a SavedModel folder (no saved_model.pb)")
    return path


def validate_tflite(
    model: bytes | TFLiteModel,
    reference: Callable[[dict[str, np.ndarray]], np.ndarray],
    probe_inputs: Mapping[str, np.ndarray],
    *,
    quantization: Quantization,
    param_bytes: int,
    max_rel_error: float | None = None,
) -> ValidationReport:
    """Run ``model`` and the TensorFlow ``reference`` on the probes; raise if the model is broken.

    Checks: every output finite; file size at least ``MIN_SIZE_FRACTION`` of the float32 weight
    bytes (``param_bytes``); relative L2 error against TensorFlow at most ``max_rel_error``
    (defaults per quantization above). Raises :class:`ConversionError` listing every failed check.
    """
    tfl = model if isinstance(model, TFLiteModel) else TFLiteModel(model)
    probes = {k: np.asarray(v) for k, v in probe_inputs.items()}
    expected = np.asarray(reference(probes), dtype=np.float64)
    got = tfl.predict(probes).astype(np.float64)
    if max_rel_error is None:
        max_rel_error = (
            FLOAT32_MAX_REL_ERROR if quantization == "float32" else DYNAMIC_RANGE_MAX_REL_ERROR
        )

    problems: list[str] = []
    all_finite = bool(np.isfinite(got).all())
    if not all_finite:
        bad = int((~np.isfinite(got)).sum())
        problems.append(f"{bad} of {got.size} outputs are NaN or infinite")
    if got.shape != expected.shape:
        problems.append(f"output shape {got.shape}, TensorFlow gives {expected.shape}")
        max_abs = rel = float("inf")
        agreement = 0.0
    else:
        diff = np.where(np.isfinite(got), got - expected, np.inf)
        max_abs = float(np.abs(diff).max())
        rel = float(np.linalg.norm(diff) / max(np.linalg.norm(expected), 1e-12))
        agreement = float((got.argmax(-1) == expected.argmax(-1)).mean()) if got.ndim > 1 else 1.0
        if not rel <= max_rel_error:
            problems.append(
                f"disagrees with TensorFlow: relative error {rel:.3g} > {max_rel_error:g} "
                f"(max |diff| {max_abs:.3g}, argmax agreement {agreement:.0%})"
            )
    min_bytes = int(MIN_SIZE_FRACTION[quantization] * param_bytes)
    if tfl.num_bytes < min_bytes:
        problems.append(
            f"file is {tfl.num_bytes:,} bytes, too small to hold {param_bytes:,} bytes of "
            f"float32 weights (expected at least {min_bytes:,})"
        )
    resource_ops = sum(name in ("VAR_HANDLE", "READ_VARIABLE") for name in tfl.op_names())
    report = ValidationReport(
        quantization=quantization,
        model_bytes=tfl.num_bytes,
        param_bytes=param_bytes,
        num_probes=len(expected),
        all_finite=all_finite,
        max_abs_diff=max_abs,
        rel_error=rel,
        argmax_agreement=agreement,
        resource_variable_ops=resource_ops,
        problems=problems,
    )
    if problems:
        hint = ""
        if resource_ops:
            hint = (
                f"; the model reads {resource_ops} resource-variable ops (VAR_HANDLE/"
                "READ_VARIABLE): weights were not frozen, typically Keras 3 variables read "
                "inside a plain tf.Module's tf.function; export with keras.export.ExportArchive"
            )
        raise ConversionError(
            f"TFLite {quantization} model failed validation: {'; '.join(problems)}{hint}"
        )
    return report
