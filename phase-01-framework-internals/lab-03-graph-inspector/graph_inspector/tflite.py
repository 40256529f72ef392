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
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from graph_inspector.errors import ConversionError, NotASavedModelError
from graph_inspector.quant_modes import DEFAULT_QUANTIZATIONS, MODES, Quantization
from graph_inspector.savedmodel import (
    SERVING_KEY,
    check_savedmodel_dir,
    load_serving_fn,
    probe_inputs_from_signature,
    signature_param_bytes,
)

__all__ = [
    "ConversionError",
    "ConversionResult",
    "Converter",
    "NotASavedModelError",
    "TFLiteModel",
    "ValidationReport",
    "convert_savedmodel",
    "convert_savedmodel_to_tflite",
    "validate_tflite",
]

# Classifier outputs (by name) must also pick the same class on most probes (the share is the
# mode's ``min_argmax_agreement``).
DEFAULT_ARGMAX_OUTPUTS = ("logits",)


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
    signature_key: str = SERVING_KEY,
    representative: Callable[[], Any] | None = None,
) -> bytes:
    """Convert one signature of a SavedModel; converter failures become :class:`ConversionError`.

    ``representative`` (the modes that calibrate: ``int8``, ``int16x8``): a callable yielding
    lists of input arrays, one sample each, for calibration (see :func:`representative_from`)."""
    folder = check_savedmodel_dir(savedmodel_dir)
    return _convert(folder, quantization, signature_key, representative)


def _convert(
    folder: Path,
    quantization: str,
    signature_key: str,
    representative: Callable[[], Any] | None = None,
) -> bytes:
    """The conversion itself, for a folder already checked."""
    import tensorflow as tf

    if quantization not in MODES:
        raise ValueError(f"quantization must be one of {tuple(MODES)}, got {quantization!r}")
    try:
        converter = tf.lite.TFLiteConverter.from_saved_model(
            str(folder), signature_keys=[signature_key]
        )
        MODES[quantization].configure(converter, representative)
        return converter.convert()
    except ValueError as exc:
        if "representative" in str(exc) and representative is None:
            raise
        raise _conversion_error(folder, quantization, signature_key, exc) from exc
    except Exception as exc:  # the converter raises many types; one clear error for callers
        raise _conversion_error(folder, quantization, signature_key, exc) from exc


def _conversion_error(
    folder: Path, quantization: str, signature_key: str, exc: BaseException
) -> ConversionError:
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return ConversionError(
        f"TFLite {quantization} conversion of {folder} (signature {signature_key!r}) failed: "
        f"{first_line}"
    )


def validate_tflite(
    model: bytes | TFLiteModel,
    reference: Callable[[dict[str, np.ndarray]], np.ndarray | Mapping[str, np.ndarray]],
    probe_inputs: Mapping[str, np.ndarray],
    *,
    quantization: Quantization,
    param_bytes: int,
    max_rel_error: float | None = None,
    argmax_outputs: tuple[str, ...] = DEFAULT_ARGMAX_OUTPUTS,
    signature_key: str = SERVING_KEY,
) -> ValidationReport:
    """Run ``model`` and the TensorFlow ``reference`` on the probes; raise if the model is broken.

    ``reference`` returns every output by name (a dict, as a SavedModel signature does), or one
    array for a single-output model. Checks, for *every* output, matched by name: finite values;
    the same shape; relative L2 error against TensorFlow at most ``max_rel_error`` (defaults per
    quantization: the mode's ``max_rel_error`` in :data:`~graph_inspector.quant_modes.MODES`); for
    outputs named in ``argmax_outputs`` (class scores), the same argmax on at least the mode's
    ``min_argmax_agreement`` of the probes. And the file size must be at least the mode's
    ``min_size_fraction`` of the float32 weight bytes (``param_bytes``). Raises
    :class:`ConversionError` listing every failed check.
    """
    tfl = model if isinstance(model, TFLiteModel) else TFLiteModel(model, signature_key)
    probes = {k: np.asarray(v) for k, v in probe_inputs.items()}
    expected_all = _reference_outputs(reference(probes), tfl.output_names)
    got_all = {k: v.astype(np.float64) for k, v in tfl.predict_outputs(probes).items()}
    mode = MODES[quantization]
    limit = mode.max_rel_error if max_rel_error is None else max_rel_error
    problems: list[str] = []
    if set(got_all) != set(expected_all):
        problems.append(
            f"outputs differ: TFLite has {sorted(got_all)}, TensorFlow {sorted(expected_all)}"
        )
    per_output: dict[str, dict[str, float | bool]] = {}
    for name in sorted(set(got_all) & set(expected_all)):
        per_output[name], found = _compare_output(
            name,
            got_all[name],
            expected_all[name],
            limit,
            mode.min_argmax_agreement if name in argmax_outputs else None,
        )
        problems += found
    min_bytes = int(mode.min_size_fraction * param_bytes)
    if tfl.num_bytes < min_bytes:
        problems.append(
            f"file is {tfl.num_bytes:,} bytes, too small to hold {param_bytes:,} bytes of "
            f"float32 weights (expected at least {min_bytes:,})"
        )
    worst = list(per_output.values())
    report = ValidationReport(
        quantization=quantization,
        model_bytes=tfl.num_bytes,
        param_bytes=param_bytes,
        num_probes=len(next(iter(probes.values()))),
        all_finite=all(o["all_finite"] for o in worst) and bool(worst),
        max_abs_diff=max((float(o["max_abs_diff"]) for o in worst), default=float("inf")),
        rel_error=max((float(o["rel_error"]) for o in worst), default=float("inf")),
        argmax_agreement=min((float(o["argmax_agreement"]) for o in worst), default=0.0),
        resource_variable_ops=sum(
            name in ("VAR_HANDLE", "READ_VARIABLE") for name in tfl.op_names()
        ),
        problems=problems,
        outputs=per_output,
    )
    if problems:
        raise ConversionError(
            f"TFLite {quantization} model failed validation: {'; '.join(problems)}"
            + _resource_variable_hint(report.resource_variable_ops)
        )
    return report


def _reference_outputs(
    reference_out: np.ndarray | Mapping[str, np.ndarray], output_names: list[str]
) -> dict[str, np.ndarray]:
    if isinstance(reference_out, Mapping):
        return {k: np.asarray(v, dtype=np.float64) for k, v in reference_out.items()}
    if len(output_names) == 1:
        return {output_names[0]: np.asarray(reference_out, dtype=np.float64)}
    raise ValueError(
        f"reference returned one array but the TFLite model has outputs {output_names}; "
        "return a dict of every output by name"
    )


def _compare_output(
    name: str,
    got: np.ndarray,
    expected: np.ndarray,
    max_rel_error: float,
    min_agreement: float | None,
) -> tuple[dict[str, float | bool], list[str]]:
    """One output against TensorFlow: its figures and the checks it failed.

    ``min_agreement`` is set for class-score outputs (argmax must match on that share)."""
    problems: list[str] = []
    finite = bool(np.isfinite(got).all())
    if not finite:
        bad = int((~np.isfinite(got)).sum())
        problems.append(f"{name}: {bad} of {got.size} outputs are NaN or infinite")
    if got.shape != expected.shape:
        problems.append(f"{name}: output shape {got.shape}, TensorFlow gives {expected.shape}")
        figures = {"max_abs_diff": float("inf"), "rel_error": float("inf")}
        return {"all_finite": finite, **figures, "argmax_agreement": 0.0}, problems
    diff = np.where(np.isfinite(got), got - expected, np.inf)
    max_abs = float(np.abs(diff).max()) if diff.size else 0.0
    rel = float(np.linalg.norm(diff) / max(np.linalg.norm(expected), 1e-12))
    has_classes = got.ndim > 1 and got.shape[-1] > 1
    agreement = float((got.argmax(-1) == expected.argmax(-1)).mean()) if has_classes else 1.0
    if not rel <= max_rel_error:
        problems.append(
            f"{name}: disagrees with TensorFlow: relative error {rel:.3g} > {max_rel_error:g} "
            f"(max |diff| {max_abs:.3g}, argmax agreement {agreement:.0%})"
        )
    if min_agreement is not None and has_classes and agreement < min_agreement:
        problems.append(
            f"{name}: picks TensorFlow's class on {agreement:.0%} of the probes "
            f"(at least {min_agreement:.0%} required)"
        )
    figures = {"max_abs_diff": max_abs, "rel_error": rel, "argmax_agreement": agreement}
    return {"all_finite": finite, **figures}, problems


def _resource_variable_hint(resource_ops: int) -> str:
    if not resource_ops:
        return ""
    return (
        f"; the model reads {resource_ops} resource-variable ops (VAR_HANDLE/"
        "READ_VARIABLE): weights were not frozen, typically Keras 3 variables read "
        "inside a plain tf.Module's tf.function; export with keras.export.ExportArchive"
    )


def representative_from(
    inputs: Mapping[str, np.ndarray], samples: int | None = None
) -> Callable[[], Any]:
    """Inputs as a representative dataset (calibration, the quantization debugger): one sample
    per step, arrays in the signature's (sorted) input order."""
    names = sorted(inputs)
    count = len(inputs[names[0]]) if samples is None else min(samples, len(inputs[names[0]]))

    def rows() -> Any:
        for i in range(count):
            yield [np.asarray(inputs[name][i : i + 1]) for name in names]

    return rows


# --- SavedModel -> validated TFLite files ---------------------------------------------------

# (SavedModel folder, quantization, signature key, representative dataset) -> TFLite bytes:
# what :func:`convert_savedmodel_to_tflite` takes and returns.
Converter = Callable[[Path, str, str, Callable[[], Any] | None], bytes]


@dataclass
class ConversionResult:
    """Every TFLite file of one SavedModel, each validated against TensorFlow."""

    savedmodel_dir: Path
    paths: dict[str, Path]  # quantization -> file
    param_bytes: int
    validations: dict[str, ValidationReport]
    convert_seconds: dict[str, float]
    signature_key: str = SERVING_KEY

    @property
    def float32_path(self) -> Path:
        return self.paths["float32"]

    @property
    def dynamic_range_path(self) -> Path:
        return self.paths["dynamic_range"]

    @property
    def float32_bytes(self) -> int:
        return self.float32_path.stat().st_size

    @property
    def dynamic_range_bytes(self) -> int:
        return self.dynamic_range_path.stat().st_size


def convert_savedmodel(
    savedmodel_dir: str | Path,
    out_dir: str | Path,
    probe_inputs: Mapping[str, np.ndarray] | None = None,
    signature_key: str = SERVING_KEY,
    quantizations: tuple[Quantization, ...] = DEFAULT_QUANTIZATIONS,
    convert: Converter | None = None,
) -> ConversionResult:
    """Convert a SavedModel signature to TFLite (by default float32 and dynamic-range, the
    modes ``written_by_default`` in :data:`~graph_inspector.quant_modes.MODES`) and validate each.

    Writes ``model_<quantization>.tflite`` into ``out_dir`` only after it passes
    :func:`validate_tflite`; raises :class:`ConversionError` otherwise (a bad folder:
    :class:`NotASavedModelError`). ``probe_inputs`` (real samples are best) default to random
    0/1 inputs shaped like the signature. ``convert`` makes each model's bytes (default
    :func:`convert_savedmodel_to_tflite`; a caller may read them from a cache of it); every
    model is validated here either way.
    """
    reference = load_serving_fn(savedmodel_dir, signature_key)  # the one folder check
    folder = Path(savedmodel_dir)
    signature = reference.signature  # type: ignore[attr-defined]
    if probe_inputs is None:
        probe_inputs = probe_inputs_from_signature(signature)
    param_bytes = signature_param_bytes(signature)
    out_dir = Path(out_dir)
    paths: dict[str, Path] = {}
    validations: dict[str, ValidationReport] = {}
    seconds: dict[str, float] = {}
    for quantization in quantizations:
        start = time.perf_counter()
        representative = representative_from(probe_inputs)
        if convert is None:
            content = _convert(folder, quantization, signature_key, representative)
        else:
            content = convert(folder, quantization, signature_key, representative)
        seconds[quantization] = time.perf_counter() - start
        validations[quantization] = validate_tflite(
            TFLiteModel(content, signature_key),
            reference,
            probe_inputs,
            quantization=quantization,
            param_bytes=param_bytes,
        )
        out_dir.mkdir(parents=True, exist_ok=True)
        paths[quantization] = out_dir / f"model_{quantization}.tflite"
        paths[quantization].write_bytes(content)
    return ConversionResult(folder, paths, param_bytes, validations, seconds, signature_key)
