"""Reduced precision: INT8 dynamic, INT8 static (QDQ, calibrated on training texts), FP16,
and the recipe table of every variant (ONNX Runtime and OpenVINO, BF16 included).

- Dynamic INT8 (``quantize_dynamic``): weights to INT8 offline (per output channel or per
  tensor), activations quantized at run time with a scale measured on each batch. No
  calibration data; MatMul becomes MatMulInteger / DynamicQuantizeMatMul.
- Static INT8 (``quantize_static``, QDQ format): activation ranges fixed by a calibration
  run over training texts, QuantizeLinear/DequantizeLinear pairs around each quantized op,
  which ONNX Runtime folds into integer kernels at load.
- NNCF INT8 (``nncf.quantize`` on the ONNX graph, ``ModelType.TRANSFORMER``, symmetric
  activations): the placement OpenVINO's CPU plugin fuses into INT8 kernels, and SmoothQuant,
  which divides each input channel of a MatMul by a factor measured on the calibration texts
  and multiplies the weight's rows by it, so a channel with rare large values no longer
  stretches the per-tensor INT8 range of the others. That is what lets the feed-forward
  output MatMuls go INT8 too (our own QDQ recipes keep them float, see ``KEEP_FP32``).
- FP16 (``convert_float_to_float16`` with FP32 I/O kept): a numerical check on CPU only;
  its speed only means something on a GPU (CPU kernels mostly upcast).

:data:`RECIPES` is the declared table of every variant ``build`` makes (FP32 exports and
fused graphs included): precision, method, source, per-channel, calibration, nodes kept
FP32, the gates that apply, a fallback, the runtime that runs it and the CPU capability it
needs. ``build``, ``gate``, the bench and the report read it; adding a variant is one row
(and, for a new kind of conversion, one function in :data:`METHODS`).
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

from inference_pipeline.gates import BF16_GATES, FP16_GATES, FP32_GATES, INT8_GATES, GateCheck
from inference_pipeline.openvino_runtime import PRECISION_HINTS, STATIC_SHAPES_PARAMETER
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
        self.batches = [
            tokenizer.encode(texts[i : i + batch_size]) for i in range(0, len(texts), batch_size)
        ]
        self._next = iter(self.batches)

    def get_next(self) -> dict[str, np.ndarray] | None:
        return next(self._next, None)

    def rewind(self) -> None:
        self._next = iter(self.batches)


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


def weight_matmuls(path: Path) -> list[str]:
    """Names of the MatMuls whose second input is an initializer (a weight)."""
    model = onnx.load(str(path), load_external_data=False)
    weights = {i.name for i in model.graph.initializer}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] in weights]


def attention_matmuls(path: Path) -> list[str]:
    """Names of the MatMuls of two activations: attention's Q x K^T and probabilities x V."""
    model = onnx.load(str(path), load_external_data=False)
    weights = {i.name for i in model.graph.initializer}
    return [n.name for n in model.graph.node if n.op_type == "MatMul" and n.input[1] not in weights]


def quantize_int8_static(
    src: Path,
    dst: Path,
    tokenizer: TextTokenizer,
    calibration_texts: Sequence[str],
    per_channel: bool = True,
    batch_size: int = 8,
    exclude: Sequence[str] = (),
    symmetric_activations: bool = False,
    weight_matmuls_only: bool = False,
    calibration: str = "minmax",
) -> Path:
    """QDQ INT8 with activation ranges from ``calibration_texts`` (``calibration``: a key of
    ``CALIBRATIONS``); ``exclude``: node names kept FP32 (see ``KEEP_FP32``).

    ``symmetric_activations``: INT8 activations with zero point 0 instead of UINT8 with a
    zero point; ``weight_matmuls_only``: only MatMuls with a weight initializer (the
    attention's activation x activation MatMuls stay unquantized). Both together are the
    layout OpenVINO's CPU plugin runs as plain INT8 GEMMs (measured there: 1.5x faster than
    the UINT8 graph with the attention MatMuls quantized, 1.2x of it from the symmetric
    activations); ONNX Runtime's CPU kernels prefer the UINT8 layout (the symmetric graph ran
    2.1-2.2x slower on ORT).
    """
    if not calibration_texts:
        raise ValueError("static quantization needs at least one calibration text")
    nodes = None
    if weight_matmuls_only:
        nodes = [name for name in weight_matmuls(src) if name not in set(exclude)]
    reader = TextCalibrationReader(tokenizer, calibration_texts, batch_size)
    with quiet(None):
        quantize_static(
            str(src),
            str(dst),
            reader,
            quant_format=QuantFormat.QDQ,
            per_channel=per_channel,
            activation_type=QuantType.QInt8 if symmetric_activations else QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            op_types_to_quantize=list(QUANTIZED_OPS),
            nodes_to_quantize=nodes,
            calibrate_method=CALIBRATIONS[calibration],
            nodes_to_exclude=list(exclude),
            extra_options={**_QUANT_OPTIONS, "ActivationSymmetric": symmetric_activations},
        )
    return dst


def quantize_int8_nncf(
    src: Path,
    dst: Path,
    tokenizer: TextTokenizer,
    calibration_texts: Sequence[str],
    batch_size: int = 8,
    exclude: Sequence[str] = (),
) -> Path:
    """NNCF's INT8 for OpenVINO (see the module docstring): the transformer preset with
    symmetric activations and SmoothQuant, ranges from ``calibration_texts``; ``exclude``:
    node names NNCF leaves float."""
    import logging

    import nncf

    if not calibration_texts:
        raise ValueError("static quantization needs at least one calibration text")
    batches = TextCalibrationReader(tokenizer, calibration_texts, batch_size).batches
    ignored = {"ignored_scope": nncf.IgnoredScope(names=list(exclude))} if exclude else {}
    nncf.set_log_level(logging.ERROR)
    with quiet("nncf"):
        quantized = nncf.quantize(
            onnx.load(str(src)),
            nncf.Dataset(batches),
            preset=nncf.QuantizationPreset.PERFORMANCE,
            model_type=nncf.ModelType.TRANSFORMER,
            subset_size=len(batches),
            **ignored,
        )
    onnx.save(quantized, str(dst))
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
# Attention's two activation x activation MatMuls: NNCF's transformer preset quantizes Q x K^T.
# Whether that passes the gates depends on the CPU's kernels: on an Intel CPU with AMX,
# OpenVINO's BF16 kernel for that INT8 attention gave a text of 32 tokens alone another
# embedding than in its batch (cosine 0.82, refused); on the AMD EPYC (VNNI, no AMX) it passes.
# So ov_int8_nncf keeps them in float and ov_int8_nncf_attention is the preset's placement.
KEEP_FP32: dict[str, Callable[[Path], list[str]]] = {
    "ffn_output_matmuls": ffn_output_matmuls,
    "attention_matmuls": attention_matmuls,
}


@dataclass(frozen=True)
class Recipe:
    """One variant of the model: how it is made and which gates it must pass."""

    name: str  # the variant's folder is f"{MODEL_PREFIX}_{folder or name}"
    precision: str  # fp32 / int8 / fp16 / bf16: the bench's colour, the report's grouping
    route: str  # the export route the variant descends from (export.ROUTES)
    # "export", "fuse" (pipeline stages), "reuse" (the source's graph unchanged, on another
    # runtime or at another compute precision) or a key of METHODS
    method: str
    source: str | None  # the recipe whose output this one converts (None for an export)
    gates: tuple[GateCheck, ...]
    made_by: str  # for the manifest; "{calibration}" is the number of calibration texts
    per_channel: bool = False  # INT8 weight scales per output channel (else per tensor)
    calibration: str | None = None  # a key of CALIBRATIONS: static ranges from training texts
    keep_fp32: str | None = None  # a key of KEEP_FP32
    fallback: str | None = None  # the recipe built instead when this one fails a gate
    folder: str | None = None  # a fallback shares the folder of the recipe it replaces
    timed_on_cpu: bool = True  # False: a GPU speed path, gated but not timed on a CPU
    runtime: str = "onnxruntime"  # the backend that runs it (serving.backends.BACKENDS)
    # OpenVINO's compute precision for the ops a graph leaves in float (None: ``precision``)
    compute: str | None = None
    symmetric_activations: bool = False  # static INT8: INT8 activations, zero point 0
    weight_matmuls_only: bool = False  # static INT8: attention's MatMuls left in float
    needs: str | None = None  # "bf16": made only on a CPU with BF16 arithmetic
    static_shapes: bool = False  # OpenVINO: compiled per padded input shape

    @property
    def variant_suffix(self) -> str:
        return self.folder or self.name

    @property
    def runtime_parameters(self) -> dict[str, str]:
        """The config.pbtxt parameters its backend reads (OpenVINO: the precision hint)."""
        if self.runtime != "openvino":
            return {}
        parameters = {"INFERENCE_PRECISION_HINT": PRECISION_HINTS[self.compute or self.precision]}
        if self.static_shapes:
            parameters[STATIC_SHAPES_PARAMETER] = "true"
        return parameters


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
    # OpenVINO reads the same .onnx files. Its own fusions make the plain export as fast as
    # ORT's fused graph there (measured), so its rows start from the plain export.
    Recipe("ov_fp32", "fp32", "torchscript", "reuse", "fp32", FP32_GATES,
           "torchscript export on OpenVINO, f32 inference precision", runtime="openvino"),
    # BF16: ONNX Runtime's CPU provider has no BF16 MatMul kernel, so BF16 is OpenVINO's.
    Recipe("ov_bf16", "bf16", "torchscript", "reuse", "fp32", BF16_GATES,
           "torchscript export on OpenVINO, bf16 inference precision", runtime="openvino",
           needs="bf16"),
    Recipe("ov_int8_static", "int8", "torchscript", "reuse", "int8_static", INT8_GATES,
           "the int8_static QDQ graph on OpenVINO, float ops in bf16", runtime="openvino",
           compute="bf16", needs="bf16"),
    Recipe("ov_int8_static_sym", "int8", "torchscript", "int8_static", "fp32", INT8_GATES,
           "static QDQ for OpenVINO: weight MatMuls only, symmetric INT8 activations, MinMax "
           "on {calibration} training texts, FFN output and float ops in bf16",
           per_channel=True, calibration="minmax", keep_fp32="ffn_output_matmuls",
           symmetric_activations=True, weight_matmuls_only=True, runtime="openvino",
           compute="bf16", needs="bf16"),
    # NNCF's placement and SmoothQuant: all 38 weight MatMuls INT8 (FFN outputs included).
    Recipe("ov_int8_nncf", "int8", "torchscript", "int8_nncf", "fp32", INT8_GATES,
           "NNCF INT8 (transformer preset, SmoothQuant) on {calibration} training texts: every "
           "weight MatMul, attention and float ops in bf16", keep_fp32="attention_matmuls",
           runtime="openvino", compute="bf16", needs="bf16"),
    Recipe("ov_int8_nncf_attention", "int8", "torchscript", "int8_nncf", "fp32", INT8_GATES,
           "NNCF INT8 as ov_int8_nncf plus attention's Q x K^T in INT8 (the preset's own "
           "placement), float ops in bf16", runtime="openvino", compute="bf16", needs="bf16"),
    # Static shapes: the same graphs compiled per padded input shape. ov_bf16_static shows what
    # static shapes alone give; ov_int8_nncf_static is INT8 and static shapes together.
    Recipe("ov_bf16_static", "bf16", "torchscript", "reuse", "fp32", BF16_GATES,
           "torchscript export on OpenVINO, bf16, compiled per padded input shape",
           runtime="openvino", needs="bf16", static_shapes=True),
    Recipe("ov_int8_nncf_static", "int8", "torchscript", "reuse", "ov_int8_nncf", INT8_GATES,
           "the ov_int8_nncf graph, float ops in bf16, compiled per padded input shape",
           runtime="openvino", compute="bf16", needs="bf16", static_shapes=True),
)  # fmt: skip


def recipe(name: str) -> Recipe:
    """The row of :data:`RECIPES` called ``name`` (KeyError names the known ones)."""
    for row in RECIPES:
        if row.name == name:
            return row
    raise KeyError(f"no recipe {name!r}; recipes: {[r.name for r in RECIPES]}")


def primary_recipes(only: Sequence[str] | None = None) -> list[Recipe]:
    """The recipes ``build`` makes up front (a fallback is made only when needed): every one,
    or with ``only`` those rows and the rows they are made from, in table order (KeyError for
    a name not in the table)."""
    fallbacks = {row.fallback for row in RECIPES if row.fallback}
    rows = [row for row in RECIPES if row.name not in fallbacks]
    if only is None:
        return rows
    wanted: set[str] = set()
    pending = [recipe(name).name for name in only]
    while pending:
        name = pending.pop()
        if name not in wanted:
            wanted.add(name)
            source = recipe(name).source
            if source:
                pending.append(source)
    return [row for row in rows if row.name in wanted]


def precision_order() -> list[str]:
    """Every precision of the table, in table order (the bench's colours follow it)."""
    return list(dict.fromkeys(row.precision for row in RECIPES))


def _dynamic(row: Recipe, src: Path, dst: Path, tokenizer: TextTokenizer, texts: Sequence[str]):
    exclude = KEEP_FP32[row.keep_fp32](src) if row.keep_fp32 else ()
    return quantize_int8_dynamic(src, dst, per_channel=row.per_channel, exclude=exclude)


def _static(row: Recipe, src: Path, dst: Path, tokenizer: TextTokenizer, texts: Sequence[str]):
    exclude = KEEP_FP32[row.keep_fp32](src) if row.keep_fp32 else ()
    return quantize_int8_static(
        src,
        dst,
        tokenizer,
        texts,
        per_channel=row.per_channel,
        exclude=exclude,
        symmetric_activations=row.symmetric_activations,
        weight_matmuls_only=row.weight_matmuls_only,
        calibration=row.calibration or "minmax",
    )


def _nncf(row: Recipe, src: Path, dst: Path, tokenizer: TextTokenizer, texts: Sequence[str]):
    exclude = KEEP_FP32[row.keep_fp32](src) if row.keep_fp32 else ()
    return quantize_int8_nncf(src, dst, tokenizer, texts, exclude=exclude)


def _fp16(row: Recipe, src: Path, dst: Path, tokenizer: TextTokenizer, texts: Sequence[str]):
    return convert_fp16(src, dst)


# The conversions a recipe's ``method`` names: (recipe, source graph, destination, tokenizer,
# calibration texts) -> destination.
METHODS: dict[str, Callable[[Recipe, Path, Path, TextTokenizer, Sequence[str]], Path]] = {
    "int8_dynamic": _dynamic,
    "int8_static": _static,
    "int8_nncf": _nncf,
    "fp16": _fp16,
}
