"""The TFLite quantization modes, one row each: how the converter is set up, whether it needs
representative (calibration) data, and the gate a converted model of that mode must pass.

Every reader takes its figures from :data:`MODES`: conversion (:func:`QuantizationMode.configure`,
used by :mod:`graph_inspector.tflite` and :mod:`graph_inspector.quant_debug`), the validation gate
(:func:`graph_inspector.tflite.validate_tflite`), the report and the tests. A new mode is one row.

The gate's figures. Agreement with TensorFlow is the relative L2 error of the outputs on the
probe inputs. float32 TFLite differs only by kernel summation order (~1e-6 relative).
Dynamic-range keeps int8 weights and quantizes activations on the fly: a few percent is normal,
garbage is ~1; measured 1.6e-3 to 2.3e-3 on the BERT classifier (PIPELINE-NOTES.md) and 6.6e-3 on
a small model, so 0.05 leaves an order of magnitude and still catches a conversion that moves the
outputs by ~10%. float16 weights: 8e-5 on the BERT classifier. Full integer (int8 activations):
1.6e-2 on BERT, 8.9e-2 with int16 activations on a model with an outlier unit
(graph_inspector_harness/quant_scenarios.py); garbage is ~1 (int8 activations on that model: 0.94).
Class-score outputs must also pick TensorFlow's class on a share of the probes. And the file must
be able to hold the weights: float32 keeps 4 bytes per parameter, float16 2, the int8 modes 1 for
most of them. Constant folding may drop weights the signature never reads (rows of the position
table beyond its sequence length: ~4% for BERT-tiny at 16 tokens), hence the margin; a model
whose weights were not frozen in is far smaller (0.3% in the Keras-3 trap).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

Quantization = Literal["float32", "dynamic_range", "float16", "int8", "int16x8"]

__all__ = ["DEFAULT_QUANTIZATIONS", "MODES", "Quantization", "QuantizationMode"]


@dataclass(frozen=True)
class QuantizationMode:
    """One TFLite mode: converter settings, calibration data, the validation gate."""

    name: Quantization
    stores: str  # what the file keeps in which precision, for people
    written_by_default: bool  # `convert` writes it without being asked
    optimize: bool  # tf.lite.Optimize.DEFAULT (alone: dynamic range)
    weight_type: str | None  # target_spec.supported_types, a tf dtype name ("float16")
    # The tf.lite.OpsSet of quantized kernels; a mode with kernels calibrates its activation
    # ranges on representative data.
    kernels: str | None
    max_rel_error: float  # relative L2 error against TensorFlow, worst output
    min_argmax_agreement: float  # share of probes where class outputs pick TF's class
    min_size_fraction: float  # file bytes / float32 weight bytes, at least

    @property
    def needs_representative(self) -> bool:
        return self.kernels is not None

    def configure(self, converter: Any, representative: Callable[[], Any] | None) -> None:
        """Set ``converter`` (a ``tf.lite.TFLiteConverter``) up for this mode."""
        import tensorflow as tf

        if self.optimize:
            converter.optimizations = [tf.lite.Optimize.DEFAULT]
        if self.weight_type is not None:
            converter.target_spec.supported_types = [tf.as_dtype(self.weight_type)]
        if self.kernels is not None:
            if representative is None:
                raise ValueError(f"{self.name} needs a representative dataset")
            converter.representative_dataset = representative
            # Quantized kernels where they exist; an op without one stays float, not an error.
            converter.target_spec.supported_ops = [
                getattr(tf.lite.OpsSet, self.kernels),
                tf.lite.OpsSet.TFLITE_BUILTINS,
            ]


_INT8 = "TFLITE_BUILTINS_INT8"
_INT16X8 = "EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8"

# fmt: off
MODES: dict[str, QuantizationMode] = {row[0]: QuantizationMode(*row) for row in (
    # name, stores, written_by_default, optimize, weight_type, kernels,
    #   max_rel_error, min_argmax_agreement, min_size_fraction
    ("float32", "float32 weights and activations", True, False, None, None, 1e-4, 0.99, 0.5),
    ("dynamic_range", "int8 weights, float activations", True, True, None, None, 0.05, 0.9, 0.15),
    ("float16", "float16 weights", False, True, "float16", None, 0.01, 0.99, 0.3),
    ("int8", "int8 weights and activations", False, True, None, _INT8, 0.1, 0.9, 0.15),
    ("int16x8", "int8 weights, int16 activations", False, True, None, _INT16X8, 0.1, 0.9, 0.15),
)}
# fmt: on

DEFAULT_QUANTIZATIONS: tuple[Quantization, ...] = tuple(
    m.name for m in MODES.values() if m.written_by_default
)
