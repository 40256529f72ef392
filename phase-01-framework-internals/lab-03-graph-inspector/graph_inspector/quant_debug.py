"""Full-integer quantization, debugged layer by layer.

The converter's ``QuantizationDebugger`` runs the int8 model with every quantized op checked
against its float inputs (``NumericVerify``), so each layer's own error is measured in
isolation. :func:`layer_errors` ranks the layers by that error; :func:`selective_int8` keeps
named layers in float (the debugger's deny list) and quantizes the rest. The interview case
"a quantized model gives garbage; how do you find the layer?" is reproduced on a model with an
outlier activation in ``graph_inspector_harness/quant_scenarios.py``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from graph_inspector.errors import ConversionError
from graph_inspector.quant_modes import MODES
from graph_inspector.savedmodel import SERVING_KEY, check_savedmodel_dir
from graph_inspector.tflite import representative_from

Representative = Callable[[], Iterator[list[np.ndarray]]]

__all__ = [
    "LayerError",
    "deny_list",
    "layer_errors",
    "readers_of",
    "representative_from",
    "selective_int8",
]


@dataclass(frozen=True)
class LayerError:
    """One quantized layer's output error against float, with its inputs kept float."""

    tensor: str  # the layer's output tensor in the TFLite model (what a deny list names)
    op: str
    num_elements: int
    mean_squared_error: float
    max_abs_error: float
    scale: float  # the int8 step of the output tensor

    @property
    def rmse_over_scale(self) -> float:
        """RMSE in units of the quantization step (~0.29 = rounding noise only)."""
        return float(np.sqrt(self.mean_squared_error) / self.scale) if self.scale else 0.0


def _int8_converter(folder: Path, representative: Representative, signature_key: str) -> Any:
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_saved_model(
        str(folder), signature_keys=[signature_key]
    )
    MODES["int8"].configure(converter, representative)
    return converter


@contextmanager
def _quiet_debugger() -> Iterator[None]:
    """The debugger itself runs TF's deprecated tf.lite.Interpreter and warns about it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "(?s).*tf.lite.Interpreter is deprecated")
        yield


def _debugger(
    folder: Path,
    representative: Representative,
    signature_key: str,
    deny: tuple[str, ...] = (),
) -> Any:
    import tensorflow as tf

    options = tf.lite.experimental.QuantizationDebugOptions(denylisted_nodes=list(deny))
    try:
        with _quiet_debugger():
            return tf.lite.experimental.QuantizationDebugger(
                converter=_int8_converter(folder, representative, signature_key),
                debug_dataset=representative,
                debug_options=options,
            )
    except Exception as exc:  # the converter and debugger raise many types
        text = " ".join(str(exc).split())[:300]
        raise ConversionError(f"int8 quantization of {folder} failed: {text}") from exc


def layer_errors(
    savedmodel_dir: str | Path,
    representative: Representative,
    signature_key: str = SERVING_KEY,
) -> list[LayerError]:
    """Every quantized layer's error, worst (largest mean squared error) first."""
    import csv
    import io

    folder = check_savedmodel_dir(savedmodel_dir)
    debugger = _debugger(folder, representative, signature_key)
    with _quiet_debugger():
        debugger.run()
    dump = io.StringIO()
    debugger.layer_statistics_dump(dump)
    rows = list(csv.DictReader(io.StringIO(dump.getvalue())))
    layers = [
        LayerError(
            tensor=row["tensor_name"],
            op=row["op_name"],
            num_elements=int(float(row["num_elements"])),
            mean_squared_error=float(row["mean_squared_error"]),
            max_abs_error=float(row["max_abs_error"]),
            scale=float(row["scale"]),
        )
        for row in rows
    ]
    return sorted(layers, key=lambda layer: -layer.mean_squared_error)


def selective_int8(
    savedmodel_dir: str | Path,
    representative: Representative,
    deny: tuple[str, ...],
    signature_key: str = SERVING_KEY,
) -> bytes:
    """The int8 model with the layers named in ``deny`` (output tensors, as
    :func:`layer_errors` names them) kept in float."""
    folder = check_savedmodel_dir(savedmodel_dir)
    try:
        debugger = _debugger(folder, representative, signature_key, deny)
    except ConversionError as exc:
        # the debugger's words for "no layer left to verify": every quantized layer denied
        if deny and "debug mode" in str(exc):
            raise ConversionError(
                f"int8 quantization of {folder}: the deny list ({', '.join(deny)}) keeps every "
                "quantized layer in float, so nothing is left in int8; deny fewer layers "
                "(or convert in float32)"
            ) from exc
        raise
    with _quiet_debugger():
        return debugger.get_nondebug_quantized_model()


def readers_of(model: bytes, tensor: str) -> list[str]:
    """Output tensors of the ops that read ``tensor`` in a TFLite model: keeping a layer in
    float helps only if its readers do not quantize its output again."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_content=model)
    names = {t["index"]: t["name"] for t in interpreter.get_tensor_details()}
    index = next((i for i, name in names.items() if name == tensor), None)
    if index is None:
        return []
    # _get_ops_details is the interpreter's only op listing (used by its own analyzer).
    ops = interpreter._get_ops_details()  # noqa: SLF001
    return [names[o] for op in ops if index in list(op["inputs"]) for o in op["outputs"]]


def deny_list(model: bytes, layers: list[LayerError], worst: int = 1) -> tuple[str, ...]:
    """The ``worst`` layers by error and the layers reading their outputs."""
    deny: list[str] = []
    for layer in layers[:worst]:
        for name in (layer.tensor, *readers_of(model, layer.tensor)):
            if name not in deny:
                deny.append(name)
    return tuple(deny)
