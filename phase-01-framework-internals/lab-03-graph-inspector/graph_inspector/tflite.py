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
# Measured: 1.6e-3 to 2.3e-3 on the BERT classifier (PIPELINE-NOTES.md), 6.6e-3 on a small model;
# 0.05 leaves an order of magnitude and still catches a conversion that moves outputs by ~10%.
DYNAMIC_RANGE_MAX_REL_ERROR = 0.05
# Classifier outputs (by name) must also pick the same class on most probes.
DEFAULT_ARGMAX_OUTPUTS = ("logits",)
MIN_ARGMAX_AGREEMENT = {"float32": 0.99, "dynamic_range": 0.9}
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
    max_abs_diff: float  # worst over the outputs
    rel_error: float  # worst over the outputs
    argmax_agreement: float  # lowest over the outputs with a class axis (1.0 if none)
    resource_variable_ops: int
    problems: list[str] = field(default_factory=list)
    # Per output name: {"rel_error", "max_abs_diff", "argmax_agreement", "all_finite"}.
    outputs: dict[str, dict[str, float | bool]] = field(default_factory=dict)

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

    def predict_outputs(
        self, inputs: Mapping[str, np.ndarray], batch_size: int = 64
    ) -> dict[str, np.ndarray]:
        """Every output, by name, for all rows of ``inputs``, ``batch_size`` rows at a time."""
        n = len(next(iter(inputs.values())))
        chunks: dict[str, list[np.ndarray]] = {name: [] for name in self.output_names}
        for start in range(0, n, batch_size):
            chunk = {
                k: np.ascontiguousarray(v[start : start + batch_size]) for k, v in inputs.items()
            }
            for name, value in self(**chunk).items():
                chunks[name].append(value)
        return {name: np.concatenate(parts) for name, parts in chunks.items()}

    def predict(
        self, inputs: Mapping[str, np.ndarray], batch_size: int = 64, output: str | None = None
    ) -> np.ndarray:
        """One output (``output``, or the only one) for all rows of ``inputs``."""
        if output is None:
            if len(self.output_names) != 1:
                raise ValueError(
                    f"the model has {len(self.output_names)} outputs {self.output_names}: "
                    "name one with output=..., or use predict_outputs"
                )
            output = self.output_names[0]
        elif output not in self.output_names:
            raise ValueError(f"no output {output!r}; the model has {self.output_names}")
        return self.predict_outputs(inputs, batch_size)[output]


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
    reference: Callable[[dict[str, np.ndarray]], np.ndarray | Mapping[str, np.ndarray]],
    probe_inputs: Mapping[str, np.ndarray],
    *,
    quantization: Quantization,
    param_bytes: int,
    max_rel_error: float | None = None,
    argmax_outputs: tuple[str, ...] = DEFAULT_ARGMAX_OUTPUTS,
) -> ValidationReport:
    """Run ``model`` and the TensorFlow ``reference`` on the probes; raise if the model is broken.

    ``reference`` returns every output by name (a dict, as a SavedModel signature does), or one
    array for a single-output model. Checks, for *every* output, matched by name: finite values;
    the same shape; relative L2 error against TensorFlow at most ``max_rel_error`` (defaults per
    quantization above); for outputs named in ``argmax_outputs`` (class scores), the same
    argmax on at least ``MIN_ARGMAX_AGREEMENT`` of the probes. And the file size must be at
    least ``MIN_SIZE_FRACTION`` of the float32 weight bytes (``param_bytes``). Raises
    :class:`ConversionError` listing every failed check.
    """
    tfl = model if isinstance(model, TFLiteModel) else TFLiteModel(model)
    probes = {k: np.asarray(v) for k, v in probe_inputs.items()}
    reference_out = reference(probes)
    if isinstance(reference_out, Mapping):
        expected_all = {k: np.asarray(v, dtype=np.float64) for k, v in reference_out.items()}
    elif len(tfl.output_names) == 1:
        expected_all = {tfl.output_names[0]: np.asarray(reference_out, dtype=np.float64)}
    else:
        raise ValueError(
            f"reference returned one array but the TFLite model has outputs {tfl.output_names}; "
            "return a dict of every output by name"
        )
    got_all = {k: v.astype(np.float64) for k, v in tfl.predict_outputs(probes).items()}
    if max_rel_error is None:
        max_rel_error = (
            FLOAT32_MAX_REL_ERROR if quantization == "float32" else DYNAMIC_RANGE_MAX_REL_ERROR
        )
    min_agreement = MIN_ARGMAX_AGREEMENT[quantization]

    problems: list[str] = []
    if set(got_all) != set(expected_all):
        problems.append(
            f"outputs differ: TFLite has {sorted(got_all)}, TensorFlow {sorted(expected_all)}"
        )
    per_output: dict[str, dict[str, float | bool]] = {}
    for name in sorted(set(got_all) & set(expected_all)):
        got, expected = got_all[name], expected_all[name]
        finite = bool(np.isfinite(got).all())
        if not finite:
            bad = int((~np.isfinite(got)).sum())
            problems.append(f"{name}: {bad} of {got.size} outputs are NaN or infinite")
        if got.shape != expected.shape:
            problems.append(f"{name}: output shape {got.shape}, TensorFlow gives {expected.shape}")
            per_output[name] = {
                "all_finite": finite,
                "max_abs_diff": float("inf"),
                "rel_error": float("inf"),
                "argmax_agreement": 0.0,
            }
            continue
        diff = np.where(np.isfinite(got), got - expected, np.inf)
        max_abs = float(np.abs(diff).max()) if diff.size else 0.0
        rel = float(np.linalg.norm(diff) / max(np.linalg.norm(expected), 1e-12))
        has_classes = got.ndim > 1 and got.shape[-1] > 1
        agreement = float((got.argmax(-1) == expected.argmax(-1)).mean()) if has_classes else 1.0
        per_output[name] = {
            "all_finite": finite,
            "max_abs_diff": max_abs,
            "rel_error": rel,
            "argmax_agreement": agreement,
        }
        if not rel <= max_rel_error:
            problems.append(
                f"{name}: disagrees with TensorFlow: relative error {rel:.3g} > {max_rel_error:g} "
                f"(max |diff| {max_abs:.3g}, argmax agreement {agreement:.0%})"
            )
        if name in argmax_outputs and has_classes and agreement < min_agreement:
            problems.append(
                f"{name}: picks TensorFlow's class on {agreement:.0%} of the probes "
                f"(at least {min_agreement:.0%} required)"
            )
    worst = list(per_output.values())
    all_finite = all(o["all_finite"] for o in worst) and bool(worst)
    max_abs = max((float(o["max_abs_diff"]) for o in worst), default=float("inf"))
    rel = max((float(o["rel_error"]) for o in worst), default=float("inf"))
    agreement = min((float(o["argmax_agreement"]) for o in worst), default=0.0)
    num_probes = len(next(iter(probes.values())))
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
        num_probes=num_probes,
        all_finite=all_finite,
        max_abs_diff=max_abs,
        rel_error=rel,
        argmax_agreement=agreement,
        resource_variable_ops=resource_ops,
        problems=problems,
        outputs=per_output,
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
