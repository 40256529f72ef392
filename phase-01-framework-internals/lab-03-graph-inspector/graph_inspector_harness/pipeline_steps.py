"""The lab's main job as small steps: a BERT classifier carried from Keras through SavedModel to
TFLite, checked at every hand-off.

    load + tokenize -> train -> export SavedModel, reload, compare -> convert to TFLite (float32,
    dynamic-range), validate -> evaluate in LiteRT -> the Keras 3 variable trap -> latency

Every pass/fail limit of the demo is declared once, in :data:`THRESHOLDS`. Data: BBC News (5
topics) from :mod:`phase01_common.bbc_news`; tokenizer: the MiniLM checkpoint's
``tokenizer.json``; model: BERT-tiny trained from scratch (what fits a couple of minutes on two
CPU cores), once per setting and code: :mod:`graph_inspector_harness.bert_training` caches it,
and every later step runs on the model, trained or loaded, in every run. The converter's output
for those weights is cached too (:mod:`graph_inspector_harness.tflite_cache`); validating,
evaluating and timing the converted models run in every run.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from graph_inspector.errors import ConversionError
from graph_inspector.pipeline import (
    INPUT_NAMES,
    TrainConfig,
    export_savedmodel,
    keras_predict,
)
from graph_inspector.savedmodel import SERVING_KEY, load_serving_fn
from graph_inspector.tflite import ConversionResult, Converter, TFLiteModel, convert_savedmodel
from phase01_common.report import Check, Image, Table, step
from phase01_common.timing import time_interleaved
from phase01_common.units import format_bytes

from graph_inspector_harness.bert_training import WEIGHTS, TrainedBert, load_data, load_or_train
from graph_inspector_harness.tflite_cache import cached_converter, conversion_key


@dataclass(frozen=True)
class Thresholds:
    """Every limit the demo's checks apply (TFLite validation's own are in tflite.py)."""

    savedmodel_max_abs_diff: float = 1e-5  # reload vs Keras, logits
    tflite_float32_max_abs_diff: float = 1e-4  # TFLite float32 vs TF, logits
    tflite_compare_samples: int = 100  # dev articles for that comparison
    dynamic_range_max_delta_pp: float = 0.5  # accuracy, dynamic-range vs float32
    # A from-scratch BERT-tiny that learned nothing sits near 1/5; topic is easy to learn.
    min_tf_accuracy: float = 0.8
    validation_probes: int = 32  # dev articles the converter's validation runs
    latency_repeats: tuple[int, int] = (30, 100)  # (quick, full) batch-1 timings


THRESHOLDS = Thresholds()


@dataclass
class PipelineResult:
    checks: list[Check]
    tables: list[Table]
    images: list[Image]
    texts: list[tuple[str, str]]
    savedmodel_dir: Path
    conversion: ConversionResult
    model: object  # the trained BertForSequenceClassification
    trained: TrainedBert  # the model, its epoch losses and where it came from
    label_names: tuple[str, ...]
    dev_inputs: dict[str, np.ndarray]
    dev_labels: np.ndarray
    # "tf", "savedmodel", "tflite_float32", "tflite_dynamic_range"
    dev_logits: dict[str, np.ndarray]
    accuracy: dict[str, float]
    latency_ms: dict[str, float]
    sizes: dict[str, int] = field(default_factory=dict)
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


# --- the steps --------------------------------------------------------------------------------


def export_and_reload(model, out_dir: Path, seq_len: int, dev_inputs: dict[str, np.ndarray]):
    """SavedModel with an explicit signature, reloaded; returns (folder, serving fn, logits)."""
    savedmodel_dir = export_savedmodel(model, out_dir / "savedmodel", seq_len)
    serving = load_serving_fn(savedmodel_dir)
    n = len(dev_inputs["input_ids"])
    logits = np.concatenate(
        [
            serving({k: v[s : s + 128] for k, v in dev_inputs.items()})["logits"]
            for s in range(0, n, 128)
        ]
    )
    return savedmodel_dir, serving, logits


def export_untracked_module(model, export_dir: str | Path, seq_len: int) -> Path:
    """The trap, kept on purpose: a ``tf.Module`` whose ``tf.function`` reads Keras 3 variables.

    The SavedModel itself is fine (TensorFlow reloads and runs it correctly), but the TFLite
    converter sees the weights as resource variables without initializers and converts, without
    an error, into a model that reads uninitialised memory. :func:`validate_tflite` catches it.
    """
    import tensorflow as tf

    export_dir = Path(export_dir)
    if export_dir.exists():
        shutil.rmtree(export_dir)
    specs = [tf.TensorSpec([None, seq_len], tf.int32, name=name) for name in INPUT_NAMES]

    class Serving(tf.Module):
        def __init__(self, keras_variables):
            super().__init__()
            # Tracks the Keras wrappers, not the tf.Variables inside them: enough for
            # tf.saved_model.save and reload, not for the TFLite converter to freeze them.
            self.keras_variables = keras_variables

        @tf.function(input_signature=specs)
        def serve(self, input_ids, attention_mask, token_type_ids):
            return {"logits": model(input_ids, attention_mask, token_type_ids)}

    module = Serving(list(model.variables))
    tf.saved_model.save(module, str(export_dir), signatures={SERVING_KEY: module.serve})
    return export_dir


def trap_is_caught(
    model,
    out_dir: Path,
    seq_len: int,
    probes: dict[str, np.ndarray],
    convert: Converter | None = None,
):
    """Export the trap and convert it (``convert``: as :func:`convert_savedmodel` takes it):
    (validation refused it, the message)."""
    trap_dir = export_untracked_module(model, out_dir / "savedmodel_untracked", seq_len)
    try:
        convert_savedmodel(
            trap_dir, out_dir / "tflite_untracked", probe_inputs=probes, convert=convert
        )
        return False, "converted and passed validation (trap not reproduced)"
    except ConversionError as exc:
        return True, str(exc)
    finally:
        shutil.rmtree(trap_dir, ignore_errors=True)
        shutil.rmtree(out_dir / "tflite_untracked", ignore_errors=True)


def batch1_latency(serving, tflite: dict[str, TFLiteModel], dev_inputs, repeats: int):
    """Median ms of a batch-1 call of TensorFlow and of each TFLite model, interleaved."""
    import tensorflow as tf

    one = {k: np.ascontiguousarray(v[:1]) for k, v in dev_inputs.items()}
    one_tf = {k: tf.constant(v) for k, v in one.items()}
    signature = serving.signature
    calls: dict[str, Callable[[], object]] = {"tf": lambda: signature(**one_tf)}
    for name, model in tflite.items():
        calls[name] = lambda m=model: m(**one)
    timings = time_interleaved(calls, rounds=repeats, warmup=3)
    return {name: seconds * 1e3 for name, seconds in timings.medians().items()}


def accuracy_of(logits: dict[str, np.ndarray], labels: np.ndarray) -> dict[str, float]:
    return {name: float((x.argmax(-1) == labels).mean()) for name, x in logits.items()}


def pipeline_checks(r: PipelineResult, trained: TrainedBert, t: Thresholds = THRESHOLDS):
    """The demo's checks, each against its limit in :data:`THRESHOLDS`."""
    losses = trained.losses
    logits, acc, n = r.dev_logits, r.accuracy, t.tflite_compare_samples
    roundtrip = float(np.abs(logits["savedmodel"] - logits["tf"]).max())
    fp32 = float(np.abs(logits["tflite_float32"][:n] - logits["savedmodel"][:n]).max())
    delta_pp = 100 * (acc["tflite_dynamic_range"] - acc["tflite_float32"])
    changed = int(
        (logits["tflite_dynamic_range"].argmax(-1) != logits["tflite_float32"].argmax(-1)).sum()
    )
    validations = r.conversion.validations
    return [
        Check(
            "SavedModel reload matches the Keras model",
            roundtrip <= t.savedmodel_max_abs_diff,
            f"max |diff| {roundtrip:.2e} on {len(logits['tf'])} dev articles "
            f"(tol {t.savedmodel_max_abs_diff:g})",
        ),
        Check(
            "both TFLite models pass validation (finite, size, agreement)",
            all(v.ok for v in validations.values()),
            ", ".join(
                f"{q}: rel err {v.rel_error:.1e}, {format_bytes(v.model_bytes, binary=True)}"
                for q, v in validations.items()
            ),
        ),
        Check(
            f"TFLite float32 matches TensorFlow on {n} samples",
            fp32 <= t.tflite_float32_max_abs_diff,
            f"max |diff| {fp32:.2e} (tol {t.tflite_float32_max_abs_diff:g})",
        ),
        Check(
            f"dynamic-range accuracy within {t.dynamic_range_max_delta_pp} pp of float32",
            abs(delta_pp) <= t.dynamic_range_max_delta_pp,
            f"{100 * acc['tflite_dynamic_range']:.2f}% vs {100 * acc['tflite_float32']:.2f}%: "
            f"{delta_pp:+.2f} pp on {len(r.dev_labels)} articles; {changed} predictions change",
        ),
        Check(
            f"fine-tuned classifier learned the task (TF dev accuracy >= "
            f"{100 * t.min_tf_accuracy:.0f}%)",
            acc["tf"] >= t.min_tf_accuracy,
            f"{100 * acc['tf']:.2f}% (chance {100 / len(r.label_names):.0f}%), train loss "
            + " -> ".join(f"{x:.3f}" for x in losses),
            detail=f"model {trained.provenance()}",
        ),
    ]


# --- the demo ---------------------------------------------------------------------------------


def run_demo(out_dir: Path, quick: bool = False) -> PipelineResult:
    """Fine-tune BERT-tiny on BBC News, save, reload, convert twice, evaluate, report.

    ``quick`` trains on shorter sequences (64 tokens instead of 128); every figure is still
    measured in this call.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    from graph_inspector.retrace import explain_retracing

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cfg = TrainConfig(seq_len=64 if quick else 128, epochs=3)
    seconds: dict[str, float] = {}
    with step("load BBC News and tokenize (MiniLM tokenizer.json; or this code's cached tokens)"):
        start = time.perf_counter()
        data = load_data(cfg)
        seconds["tokenize"] = time.perf_counter() - start
    # The lab's own retrace explainer watches every tf.function the pipeline calls (training
    # step, the model's call, the export's serving function): each trace gets its reason.
    # On a cache hit there is no training: the monitor then covers loading, export and reload.
    with explain_retracing() as traces:
        with step(
            f"train BERT-tiny from scratch (or load this code's cached run): "
            f"{len(data.train_labels)} articles, {cfg.epochs} epochs, {cfg.seq_len} tokens"
        ):
            start = time.perf_counter()
            trained = load_or_train(data, cfg)
            model = trained.model
            seconds["train"] = time.perf_counter() - start
        tf_logits = keras_predict(model, data.dev_inputs)
        with step("save SavedModel (explicit serving signature), reload, compare"):
            savedmodel_dir, serving, sm_logits = export_and_reload(
                model, out_dir, cfg.seq_len, data.dev_inputs
            )
    probes = {k: v[: THRESHOLDS.validation_probes] for k, v in data.dev_inputs.items()}
    converters = {
        route: cached_converter(
            conversion_key(trained.folder / WEIGHTS, route, cfg.seq_len, probes, Path(__file__))
        )
        for route in ("keras export", "untracked tf.Module")
    }
    with step("convert to TFLite float32 and dynamic-range (or read this code's cached "
              "conversion of these weights), validate both"):  # fmt: skip
        conversion = convert_savedmodel(
            savedmodel_dir,
            out_dir / "tflite",
            probe_inputs=probes,
            convert=converters["keras export"],
        )
    with step("evaluate TFLite models in LiteRT on the dev split"):
        tflite = {f"tflite_{q}": TFLiteModel(p) for q, p in conversion.paths.items()}
        logits = {"tf": tf_logits, "savedmodel": sm_logits}
        logits |= {name: m.predict(data.dev_inputs) for name, m in tflite.items()}
    with step("show the Keras 3 variable trap is caught by the validator"):
        trap_caught, trap_message = trap_is_caught(
            model, out_dir, cfg.seq_len, probes, converters["untracked tf.Module"]
        )
    with step("batch-1 latency: TF SavedModel, TFLite float32, TFLite dynamic-range"):
        repeats = THRESHOLDS.latency_repeats[0 if quick else 1]
        latency = batch1_latency(serving, tflite, data.dev_inputs, repeats)
    result = PipelineResult(
        checks=[],
        tables=[],
        images=[],
        texts=[
            (f"Every trace in {_traced_stages(trained)}, explained", traces.report()),
            ("TFLite validation of the broken export", trap_message),
        ],
        savedmodel_dir=savedmodel_dir,
        conversion=conversion,
        model=model,
        trained=trained,
        label_names=data.label_names,
        dev_inputs=data.dev_inputs,
        dev_labels=data.dev_labels,
        dev_logits=logits,
        accuracy=accuracy_of(
            {k: v for k, v in logits.items() if k != "savedmodel"}, data.dev_labels
        ),
        latency_ms=latency,
        sizes={"tf": _folder_bytes(savedmodel_dir)}
        | {f"tflite_{q}": p.stat().st_size for q, p in conversion.paths.items()},
        seconds=seconds,
    )
    _finish(result, cfg, traces, (trap_caught, trap_message), out_dir)
    return result


def _traced_stages(trained: TrainedBert) -> str:
    if trained.from_cache:
        return "loading (training came from the cache), export and reload"
    return "training, export and reload"


def _finish(result: PipelineResult, cfg: TrainConfig, traces, trap, out_dir: Path) -> None:
    """The checks, the table and the plot of a finished run."""
    trap_caught, trap_message = trap
    result.checks = [
        Check(
            "retrace monitor's count equals TensorFlow's over the pipeline's tf.functions",
            traces.traces == traces.tracing_count() and traces.traces > 0,
            f"{traces.traces} traces (TF: {traces.tracing_count()}) over "
            f"{len(traces.monitors)} tf.function objects in {_traced_stages(result.trained)}",
        ),
        *pipeline_checks(result, result.trained),
        Check(
            "validator rejects the broken export (Keras vars in a plain tf.Module)",
            trap_caught,
            trap_message[:200],
        ),
    ]
    result.tables = [_table(result, cfg)]
    result.images = [
        _plot(out_dir / "pipeline.png", _NAMES, result.accuracy, result.sizes, result.latency_ms)
    ]


_NAMES = {
    "tf": "TF FP32 (SavedModel)",
    "tflite_float32": "TFLite FP32",
    "tflite_dynamic_range": "TFLite dynamic-range (int8 weights)",
}


def _table(r: PipelineResult, cfg: TrainConfig) -> Table:
    rows = [
        [
            name,
            100 * r.accuracy[key],
            100 * (r.accuracy[key] - r.accuracy["tf"]),
            format_bytes(r.sizes[key], binary=True),
            r.latency_ms[key],
        ]
        for key, name in _NAMES.items()
    ]
    return Table(
        title=(
            f"BERT-tiny on BBC News dev ({len(r.dev_labels)} articles, {cfg.seq_len} tokens): "
            "accuracy, size, batch-1 latency (median)"
        ),
        columns=["model", "dev accuracy %", "delta vs TF (pp)", "size", "batch-1 ms"],
        rows=rows,
    )


def _folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def _plot(
    path: Path,
    names: dict[str, str],
    accuracy: dict[str, float],
    sizes: dict[str, int],
    latency: dict[str, float],
) -> Image:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(names)
    short = ["TF FP32", "TFLite FP32", "TFLite dyn-range"]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.2))
    panels = (
        ("dev accuracy (%)", [100 * accuracy[k] for k in keys]),
        ("size (MB)", [sizes[k] / 1e6 for k in keys]),
        ("batch-1 latency, median (ms)", [latency[k] for k in keys]),
    )
    for ax, (title, values) in zip(axes, panels, strict=True):
        bars = ax.bar(short, values, color=["#4c72b0", "#55a868", "#c44e52"])
        ax.bar_label(bars, fmt="%.2f")
        ax.set_title(title)
        ax.tick_params(axis="x", labelsize=8)
    axes[0].set_ylim(max(0.0, min(100 * accuracy[k] for k in keys) - 10), 100)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return Image(path=path, caption="BERT-tiny: TF vs TFLite float32 vs dynamic-range")
