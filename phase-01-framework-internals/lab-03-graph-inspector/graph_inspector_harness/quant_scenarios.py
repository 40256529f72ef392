"""The interview question, reproduced: "a quantized model produces garbage; how do you debug it?"

A small classifier (16 -> 64 -> 64 -> 64 -> 4, ReLU) whose second layer has one *outlier
unit*: its weights are multiplied by 1000 and the next layer's weights for that unit divided
by 1000. ReLU is positively homogeneous, so the float model computes exactly the same function
(a graph transformation that is an identity in float, like folding a scale into a weight), but
int8 quantizes each activation tensor with one scale: the outlier stretches the scale of that
tensor a thousandfold and every other unit rounds to zero. The full-integer model then picks the
float model's class on about a third of the inputs (4 classes). Steps, each a test:

1. the TFLite gate (:func:`graph_inspector.tflite.validate_tflite`) rejects the int8 model;
2. :func:`graph_inspector.quant_debug.layer_errors` ranks the planted layer first;
3. one change, keeping that layer and the one reading its output in float
   (:func:`graph_inspector.quant_debug.selective_int8`), passes the gate;
4. int16 activations (16x8) also pass, without a deny list.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

NUM_CLASSES = 4
OUTLIER_UNIT, OUTLIER_GAIN = 3, 1000.0


@dataclass
class OutlierModel:
    folder: Path  # the SavedModel
    inputs: np.ndarray  # [n, 16] float32
    labels: np.ndarray  # the float model's classes (what quantization must keep)
    planted: str  # the layer with the outlier unit (TFLite tensor-name prefix)


def make_outlier_model(
    folder: Path, n: int = 1000, seed: int = 0, gain: float = OUTLIER_GAIN
) -> OutlierModel:
    """The classifier, saved; ``gain=1`` gives the same model without the outlier."""
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    x = rng.standard_normal([n, 16]).astype(np.float32)
    sizes = [16, 64, 64, 64, NUM_CLASSES]
    weights = [
        (rng.standard_normal([a, b]) * np.sqrt(2.0 / a)).astype(np.float32)
        for a, b in zip(sizes, sizes[1:], strict=False)
    ]
    weights[1][:, OUTLIER_UNIT] *= gain  # the outlier unit of layer "planted"...
    weights[2][OUTLIER_UNIT, :] /= gain  # ...undone by the next layer: same function

    class Classifier(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = [tf.Variable(w) for w in weights]

        @tf.function(input_signature=[tf.TensorSpec([None, 16], tf.float32, name="x")])
        def serve(self, t: Any) -> Any:
            h = tf.nn.relu(tf.matmul(t, self.w[0], name="first"))
            h = tf.nn.relu(tf.matmul(h, self.w[1], name="planted"))
            h = tf.nn.relu(tf.matmul(h, self.w[2], name="reader"))
            return {"logits": tf.matmul(h, self.w[3], name="last")}

    model = Classifier()
    tf.saved_model.save(model, str(folder), signatures={"serving_default": model.serve})
    labels = model.serve(tf.constant(x))["logits"].numpy().argmax(-1)
    return OutlierModel(Path(folder), x, labels, "planted")


@dataclass
class ModeResult:
    mode: str
    size_bytes: int
    latency_ms: float  # batch 1, median
    agreement: float  # same class as the float model
    max_logit_error: float
    rel_error: float
    gate: str  # "pass" or the first problem validate_tflite found


@dataclass
class ModeConversions:
    """Every mode's TFLite bytes for one model, and what the debugger found on the way."""

    contents: dict[str, bytes]  # mode (or "int8, <kept> float (debugger)") -> flatbuffer
    layers: list[Any]  # quant_debug.layer_errors, worst first
    deny: list[str]  # the debugger's deny list (kept in float)
    fixed_mode: str  # the key of the selective-int8 model in ``contents``


def convert_modes(model: OutlierModel) -> ModeConversions:
    """Each TFLite mode converted once, plus int8 with the debugger's deny list in float."""
    from graph_inspector.quant_debug import deny_list, layer_errors, selective_int8
    from graph_inspector.quant_modes import MODES
    from graph_inspector.quiet import native_stderr_captured
    from graph_inspector.tflite import convert_savedmodel_to_tflite, representative_from

    calibration = representative_from({"x": model.inputs[:100]})
    with native_stderr_captured():  # the converter's C++ diagnostics: not for the console
        contents = {
            mode: convert_savedmodel_to_tflite(model.folder, mode, representative=calibration)
            for mode in MODES
        }
        layers = layer_errors(model.folder, calibration)
        deny = deny_list(contents["int8"], layers)
        kept = "+".join(name.split(";")[0] for name in deny)
        fixed_mode = f"int8, {kept} float (debugger)"
        contents[fixed_mode] = selective_int8(model.folder, calibration, deny)
    return ModeConversions(contents, layers, deny, fixed_mode)


def compare_modes(
    model: OutlierModel, repeats: int = 50, conversions: ModeConversions | None = None
) -> list[ModeResult]:
    """Every TFLite mode (and int8 with the debugger's fix) on the outlier model
    (``conversions``: reuse models already converted by :func:`convert_modes`). Batch-1
    latency: every mode timed in the same interleaved rounds."""
    from graph_inspector.errors import ConversionError
    from graph_inspector.quant_modes import MODES
    from graph_inspector.savedmodel import load_serving_fn, signature_param_bytes
    from graph_inspector.tflite import TFLiteModel, validate_tflite
    from phase01_common.timing import time_interleaved

    inputs = {"x": model.inputs}
    reference = load_serving_fn(model.folder)
    expected = reference(inputs)["logits"]
    contents = (conversions or convert_modes(model)).contents
    one = {"x": model.inputs[:1]}
    models = {mode: TFLiteModel(content) for mode, content in contents.items()}
    timings = time_interleaved(
        {mode: (lambda m=tfl: m(**one)) for mode, tfl in models.items()}, rounds=repeats
    )
    results = []
    for mode, content in contents.items():
        tfl = models[mode]
        got = tfl.predict(inputs)
        try:
            validate_tflite(
                tfl,
                reference,
                {"x": model.inputs[:200]},
                quantization=mode if mode in MODES else "int8",
                param_bytes=signature_param_bytes(reference.signature),
            )
            gate = "pass"
        except ConversionError as exc:
            gate = str(exc).split(": ", 1)[-1][:90]
        results.append(
            ModeResult(
                mode,
                len(content),
                timings.median(mode) * 1e3,
                float((got.argmax(-1) == model.labels).mean()),
                float(np.abs(got - expected).max()),
                float(np.linalg.norm(got - expected) / np.linalg.norm(expected)),
                gate,
            )
        )
    return results


def plot_modes(results: list[ModeResult], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.mode.replace(", ", "\n") for r in results]
    colours = ["#55a868" if r.gate == "pass" else "#c44e52" for r in results]
    fig, axes = plt.subplots(1, 3, figsize=(12, 3.4))
    panels = (
        ("agreement with float32 (%)", [100 * r.agreement for r in results], "%.1f"),
        ("size (KiB)", [r.size_bytes / 1024 for r in results], "%.1f"),
        ("batch-1 latency, median (µs)", [1e3 * r.latency_ms for r in results], "%.0f"),
    )
    for ax, (title, values, fmt) in zip(axes, panels, strict=True):
        bars = ax.bar(names, values, color=colours)
        ax.bar_label(bars, fmt=fmt, fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.tick_params(axis="x", labelsize=7, rotation=30)
    fig.suptitle("TFLite modes on a classifier with one outlier unit (red: refused by the gate)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
