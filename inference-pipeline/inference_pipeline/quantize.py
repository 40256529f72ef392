"""Reduced precision: INT8 dynamic, INT8 static (QDQ, calibrated on training texts), FP16.

- Dynamic INT8 (``quantize_dynamic``): weights to INT8 offline (per output channel or per
  tensor), activations quantized at run time with a scale measured on each batch. No
  calibration data; MatMul becomes MatMulInteger / DynamicQuantizeMatMul.
- Static INT8 (``quantize_static``, QDQ format): activation ranges fixed by a calibration
  run over training texts, QuantizeLinear/DequantizeLinear pairs around each quantized op,
  which ONNX Runtime folds into integer kernels at load.
- FP16 (``convert_float_to_float16`` with FP32 I/O kept): a numerical check on CPU only;
  its speed only means something on a GPU (CPU kernels mostly upcast).

:data:`RECIPES` is the declared table of every variant ``build`` makes (FP32 exports and
fused graphs included): precision, method, source, per-channel, calibration, nodes kept
FP32, the gates that apply, a fallback. ``build``, ``gate``, the bench and the report read
it; adding a variant is one row (and, for a new kind of conversion, one function in
:data:`METHODS`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnxruntime.quantization import (
    CalibrationDataReader,
    CalibrationMethod,
    QuantFormat,
    QuantType,
    quantize_dynamic,
    quantize_static,
)

from inference_pipeline.gates import FP16_GATES, FP32_GATES, INT8_GATES, GateCheck
from inference_pipeline.quiet import quiet
from inference_pipeline.tokenization import TextTokenizer

# Quantizing only the MatMuls (the weights and nearly all the FLOPs) keeps LayerNorm, Softmax
# and the residual Adds in FP32, where INT8 would cost accuracy for little speed.
QUANTIZED_OPS = ("MatMul",)
# Static INT8's activation-range estimators (``Recipe.calibration``).
CALIBRATIONS = {
    "minmax": CalibrationMethod.MinMax,
    "percentile": CalibrationMethod.Percentile,
    "entropy": CalibrationMethod.Entropy,
}
_QUANT_OPTIONS = {"DefaultTensorType": onnx.TensorProto.FLOAT}  # fused ops lack type info


def quantize_int8_dynamic(
    src: Path,
    dst: Path,
    per_channel: bool = True,
    op_types: Sequence[str] | None = QUANTIZED_OPS,
    exclude: Sequence[str] = (),
) -> Path:
    """INT8 weights, activations quantized per call (the classifier's and the GPT's INT8).
    ``op_types=None``: every op type ONNX Runtime can; ``exclude``: node names kept FP32."""
    with quiet(None):
        quantize_dynamic(
            str(src),
            str(dst),
            weight_type=QuantType.QInt8,
            per_channel=per_channel,
            op_types_to_quantize=list(op_types) if op_types is not None else None,
            nodes_to_exclude=list(exclude),
            extra_options=_QUANT_OPTIONS,
        )
    return dst


class TextCalibrationReader(CalibrationDataReader):
    """Feeds tokenized, padded batches of calibration texts to the static quantizer."""

    def __init__(self, tokenizer: TextTokenizer, texts: Sequence[str], batch_size: int) -> None:
        self._batches = [
            tokenizer.encode(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)
        ]
        self._next = iter(self._batches)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._next, None)

    def rewind(self) -> None:
        self._next = iter(self._batches)


def ffn_output_matmuls(path: Path, intermediate: int = 1536, hidden: int = 384) -> list[str]:
    """Names of the feed-forward output projections (weight [intermediate, hidden]): their
    input is the GELU output, whose rare large values a MinMax range stretches until the
    common small ones round to a few INT8 steps."""
    model = onnx.load(str(path), load_external_data=False)
    shapes = {i.name: tuple(i.dims) for i in model.graph.initializer}
    return [
        node.name
        for node in model.graph.node
        if node.op_type == "MatMul"
        and any(shapes.get(name) == (intermediate, hidden) for name in node.input)
    ]


def quantize_int8_static(
    src: Path,
    dst: Path,
    tokenizer: TextTokenizer,
    calibration_texts: Sequence[str],
    per_channel: bool = True,
    batch_size: int = 8,
    exclude: Sequence[str] = (),
    calibration: str = "minmax",
) -> Path:
    """QDQ INT8 with activation ranges from ``calibration_texts`` (``calibration``: a key of
    ``CALIBRATIONS``); ``exclude``: node names kept FP32 (see ``KEEP_FP32``)."""
    if not calibration_texts:
        raise ValueError("static quantization needs at least one calibration text")
    reader = TextCalibrationReader(tokenizer, calibration_texts, batch_size)
    with quiet(None):
        quantize_static(
            str(src),
            str(dst),
            reader,
            quant_format=QuantFormat.QDQ,
            per_channel=per_channel,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=list(QUANTIZED_OPS),
            calibrate_method=CALIBRATIONS[calibration],
            nodes_to_exclude=list(exclude),
            extra_options=_QUANT_OPTIONS,
        )
    return dst


def convert_fp16(src: Path, dst: Path) -> Path:
    """FP16 weights and compute, FP32 inputs/outputs (so callers and gates see no change)."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    with quiet(None):
        model = convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    onnx.save(model, str(dst))
    return dst


# Node selectors for ``Recipe.keep_fp32``: names of nodes a recipe leaves unquantized.
# The 6 feed-forward output MatMuls: measured on the BBC model, quantizing them (static QDQ)
# drops the worst embedding cosine from 0.99 to 0.90-0.95 (below the 0.98 gate), and
# Percentile calibration instead of MinMax made it worse (0.76).
KEEP_FP32: dict[str, Callable[[Path], list[str]]] = {"ffn_output_matmuls": ffn_output_matmuls}


@dataclass(frozen=True)
class Recipe:
    """One variant of the model: how it is made and which gates it must pass."""

    name: str  # the variant's folder is f"{MODEL_PREFIX}_{folder or name}"
    precision: str  # fp32 / int8 / fp16: the bench's colour, the report's grouping
    route: str  # the export route the variant descends from (export.ROUTES)
    method: str  # "export", "fuse" (pipeline stages) or a key of METHODS
    source: str | None  # the recipe whose output this one converts (None for an export)
    gates: tuple[GateCheck, ...]
    made_by: str  # for the manifest; "{calibration}" is the number of calibration texts
    per_channel: bool = False  # INT8 weight scales per output channel (else per tensor)
    calibration: str | None = None  # a key of CALIBRATIONS: static ranges from training texts
    keep_fp32: str | None = None  # a key of KEEP_FP32
    fallback: str | None = None  # the recipe built instead when this one fails a gate
    folder: str | None = None  # a fallback shares the folder of the recipe it replaces
    timed_on_cpu: bool = True  # False: a GPU speed path, gated but not timed on a CPU

    @property
    def variant_suffix(self) -> str:
        return self.folder or self.name


RECIPES: tuple[Recipe, ...] = (
    Recipe("fp32_dynamo", "fp32", "dynamo", "export", None, FP32_GATES, "dynamo export"),
    Recipe("fp32", "fp32", "torchscript", "export", None, FP32_GATES, "torchscript export"),
    Recipe("fp32_dynamo_fused", "fp32", "dynamo", "fuse", "fp32_dynamo", FP32_GATES, "{tool}"),
    Recipe("fp32_fused", "fp32", "torchscript", "fuse", "fp32", FP32_GATES, "{tool}"),
    # INT8 from the plain TorchScript export (measured faster than from its fused graph).
    Recipe("int8_dynamic", "int8", "torchscript", "int8_dynamic", "fp32", INT8_GATES,
           "dynamic, per-channel", per_channel=True, fallback="int8_dynamic_per_tensor"),
    Recipe("int8_dynamic_per_tensor", "int8", "torchscript", "int8_dynamic", "fp32", INT8_GATES,
           "dynamic, per-tensor", folder="int8_dynamic"),
    Recipe("int8_static", "int8", "torchscript", "int8_static", "fp32", INT8_GATES,
           "static QDQ, MinMax on {calibration} training texts, FFN output FP32",
           per_channel=True, calibration="minmax", keep_fp32="ffn_output_matmuls"),
    Recipe("fp16", "fp16", "torchscript", "fp16", "fp32_fused", FP16_GATES,
           "fused graph to FP16", timed_on_cpu=False),
)  # fmt: skip


def recipe(name: str) -> Recipe:
    """The row of :data:`RECIPES` called ``name`` (KeyError names the known ones)."""
    for row in RECIPES:
        if row.name == name:
            return row
    raise KeyError(f"no recipe {name!r}; recipes: {[r.name for r in RECIPES]}")


def primary_recipes() -> list[Recipe]:
    """The recipes ``build`` makes up front (a fallback is made only when needed)."""
    fallbacks = {row.fallback for row in RECIPES if row.fallback}
    return [row for row in RECIPES if row.name not in fallbacks]


def precision_order() -> list[str]:
    """Every precision of the table, in table order (the bench's colours follow it)."""
    return list(dict.fromkeys(row.precision for row in RECIPES))


def _dynamic(row: Recipe, src: Path, dst: Path, tokenizer: TextTokenizer, texts: Sequence[str]):
    exclude = KEEP_FP32[row.keep_fp32](src) if row.keep_fp32 else ()
    return quantize_int8_dynamic(src, dst, per_channel=row.per_channel, exclude=exclude)


def _static(row: Recipe, src: Path, dst: Path, tokenizer: TextTokenizer, texts: Sequence[str]):
    exclude = KEEP_FP32[row.keep_fp32](src) if row.keep_fp32 else ()
    return quantize_int8_static(
        src, dst, tokenizer, texts, per_channel=row.per_channel, exclude=exclude,
        calibration=row.calibration or "minmax",
    )  # fmt: skip


def _fp16(row: Recipe, src: Path, dst: Path, tokenizer: TextTokenizer, texts: Sequence[str]):
    return convert_fp16(src, dst)


# The conversions a recipe's ``method`` names: (recipe, source graph, destination, tokenizer,
# calibration texts) -> destination.
METHODS: dict[str, Callable[[Recipe, Path, Path, TextTokenizer, Sequence[str]], Path]] = {
    "int8_dynamic": _dynamic,
    "int8_static": _static,
    "fp16": _fp16,
}
