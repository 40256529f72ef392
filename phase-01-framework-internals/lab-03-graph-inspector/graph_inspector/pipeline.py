"""The lab's main job: a BERT classifier carried from Keras through SavedModel to TFLite, checked
at every hand-off.

    fine-tune (Keras, tf.function)  ->  SavedModel (explicit serving signature)  ->  reload, compare
        ->  TFLite float32 + dynamic-range (LiteRT)  ->  validate  ->  dev accuracy, sizes, latency

Data: BBC News (5 topics) from :mod:`phase01_common.bbc_news`; tokenizer: the MiniLM
checkpoint's ``tokenizer.json`` (BERT uncased WordPiece); model: BERT-tiny trained from scratch,
which is what fits a couple of minutes on two CPU cores.
"""

from __future__ import annotations

import os
import shutil
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from phase01_common.report import Check, Image, Table, step

from graph_inspector.tflite import (
    ConversionError,
    TFLiteModel,
    ValidationReport,
    check_is_savedmodel,
    convert_savedmodel_to_tflite,
    validate_tflite,
)

SERVING_KEY = "serving_default"
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


# ---------------------------------------------------------------- SavedModel export


def export_savedmodel(model, export_dir: str | Path, seq_len: int) -> Path:
    """Save ``model`` with an explicit ``serving_default`` signature: three int32 [batch, seq_len]
    inputs named as BERT's, one float32 output ``logits``.

    Uses ``keras.export.ExportArchive`` (which calls ``tf.saved_model.save``): it tracks the
    ``tf.Variable`` inside every Keras 3 variable, so the converter can freeze them. A plain
    ``tf.Module`` holding the model does not; see :func:`export_untracked_module`.
    """
    import keras
    import tensorflow as tf

    export_dir = Path(export_dir)
    if export_dir.exists():
        shutil.rmtree(export_dir)
    specs = [tf.TensorSpec([None, seq_len], tf.int32, name=name) for name in INPUT_NAMES]

    def serve(input_ids, attention_mask, token_type_ids):
        return {"logits": model(input_ids, attention_mask, token_type_ids, training=False)}

    archive = keras.export.ExportArchive()
    archive.track(model)
    archive.add_endpoint(SERVING_KEY, serve, input_signature=specs)
    archive.write_out(str(export_dir), verbose=False)
    return export_dir


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


def load_serving_fn(savedmodel_dir: str | Path, signature_key: str = SERVING_KEY):
    """The reloaded signature as ``fn(inputs: dict) -> dict[str, np.ndarray]``: every output,
    by name (what :func:`validate_tflite` compares, output by output)."""
    import tensorflow as tf

    from graph_inspector.inspect_graph import NotASavedModelError

    check_is_savedmodel(savedmodel_dir)
    try:
        loaded = tf.saved_model.load(str(savedmodel_dir))
    except Exception as exc:  # noqa: BLE001 - corrupt protobufs raise many types (OSError…)
        raise NotASavedModelError(
            f"{savedmodel_dir} could not be loaded as a SavedModel: {exc}"
        ) from exc
    if signature_key not in loaded.signatures:
        raise ConversionError(
            f"{savedmodel_dir} has no signature {signature_key!r} "
            f"(it has {sorted(loaded.signatures)})"
        )
    signature = loaded.signatures[signature_key]

    def run(inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        tensors = {k: tf.constant(v) for k, v in inputs.items()}
        return {name: value.numpy() for name, value in signature(**tensors).items()}

    run.signature = signature  # type: ignore[attr-defined]
    run.loaded = loaded  # type: ignore[attr-defined]  # keeps the variables alive
    return run


def signature_param_bytes(signature) -> int:
    """Bytes of the float variables a signature reads: what a float32 TFLite file must hold."""
    total = 0
    for variable in signature.variables:
        if variable.dtype.is_floating:
            total += variable.dtype.size * int(np.prod(variable.shape))
    return total


def probe_inputs_from_signature(signature, batch: int = 8, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs matching a signature's specs, for models we know nothing else about.

    Integer inputs get 0/1: valid token ids, mask values and segment ids for any BERT-like model.
    Unknown dimensions become ``batch`` (first) or 16.
    """
    rng = np.random.default_rng(seed)
    probes = {}
    _, kwarg_specs = signature.structured_input_signature
    for name, spec in kwarg_specs.items():
        shape = [
            (batch if i == 0 else 16) if d is None else d
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


# ---------------------------------------------------------------- conversion


@dataclass
class ConversionResult:
    """Both TFLite files of one SavedModel, each validated against TensorFlow."""

    savedmodel_dir: Path
    float32_path: Path
    dynamic_range_path: Path
    param_bytes: int
    validations: dict[str, ValidationReport]
    convert_seconds: dict[str, float]

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
) -> ConversionResult:
    """Convert a SavedModel to float32 and dynamic-range TFLite and validate both.

    Writes ``model_float32.tflite`` and ``model_dynamic_range.tflite`` into ``out_dir`` only after
    they pass :func:`validate_tflite`; raises :class:`ConversionError` otherwise. ``probe_inputs``
    (real samples are best) default to random 0/1 inputs shaped like the signature.
    """
    savedmodel_dir = check_is_savedmodel(savedmodel_dir)
    out_dir = Path(out_dir)
    reference = load_serving_fn(savedmodel_dir, signature_key)
    signature = reference.signature  # type: ignore[attr-defined]
    if probe_inputs is None:
        probe_inputs = probe_inputs_from_signature(signature)
    param_bytes = signature_param_bytes(signature)

    paths: dict[str, Path] = {}
    validations: dict[str, ValidationReport] = {}
    seconds: dict[str, float] = {}
    for quantization in ("float32", "dynamic_range"):
        start = time.perf_counter()
        content = convert_savedmodel_to_tflite(savedmodel_dir, quantization, signature_key)
        seconds[quantization] = time.perf_counter() - start
        validations[quantization] = validate_tflite(
            content,
            reference,
            probe_inputs,
            quantization=quantization,
            param_bytes=param_bytes,
        )
        out_dir.mkdir(parents=True, exist_ok=True)
        paths[quantization] = out_dir / f"model_{quantization}.tflite"
        paths[quantization].write_bytes(content)
    return ConversionResult(
        savedmodel_dir=savedmodel_dir,
        float32_path=paths["float32"],
        dynamic_range_path=paths["dynamic_range"],
        param_bytes=param_bytes,
        validations=validations,
        convert_seconds=seconds,
    )


# ---------------------------------------------------------------- training


@dataclass
class TrainConfig:
    seq_len: int = 128
    epochs: int = 3
    batch_size: int = 32
    learning_rate: float = 1e-3
    seed: int = 0


def fine_tune(
    model,
    inputs: Mapping[str, np.ndarray],
    labels: np.ndarray,
    cfg: TrainConfig,
    echo: Callable[[str], None] | None = None,
):
    """Adam with a linear decay to 2% of the peak rate; returns the mean loss of each epoch.

    ``echo`` (e.g. ``print``) receives one progress line per epoch.
    """
    import keras
    import tensorflow as tf

    n = len(labels)
    steps = cfg.epochs * ((n + cfg.batch_size - 1) // cfg.batch_size)
    # A constant 1e-3 diverges late in training for this from-scratch model; decay keeps it stable.
    schedule = keras.optimizers.schedules.PolynomialDecay(
        cfg.learning_rate, steps, cfg.learning_rate * 0.02
    )
    optimizer = keras.optimizers.Adam(schedule)

    @tf.function(reduce_retracing=True)
    def train_step(input_ids, attention_mask, token_type_ids, y):
        with tf.GradientTape() as tape:
            logits = model(input_ids, attention_mask, token_type_ids, training=True)
            loss = tf.reduce_mean(
                tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
            )
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply(grads, model.trainable_variables)
        return loss

    rng = np.random.default_rng(cfg.seed)
    y_all = labels.astype(np.int32)
    epoch_losses = []
    started = time.perf_counter()
    for epoch in range(cfg.epochs):
        order = rng.permutation(n)
        losses = []
        for start in range(0, n, cfg.batch_size):
            idx = order[start : start + cfg.batch_size]
            batch = [inputs[name][idx] for name in INPUT_NAMES]
            losses.append(float(train_step(*batch, y_all[idx])))
        epoch_losses.append(float(np.mean(losses)))
        if echo is not None:
            echo(
                f"    epoch {epoch + 1}/{cfg.epochs}: mean loss {epoch_losses[-1]:.3f} "
                f"({time.perf_counter() - started:.0f} s)"
            )
    return epoch_losses


def keras_predict(model, inputs: Mapping[str, np.ndarray], batch_size: int = 128) -> np.ndarray:
    n = len(inputs["input_ids"])
    return np.concatenate(
        [
            model(*[inputs[k][s : s + batch_size] for k in INPUT_NAMES], training=False).numpy()
            for s in range(0, n, batch_size)
        ]
    )


def median_latency_ms(fn: Callable[[], object], repeats: int, warmup: int = 3) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


# ---------------------------------------------------------------- the demo


@dataclass
class PipelineResult:
    checks: list[Check]
    tables: list[Table]
    images: list[Image]
    texts: list[tuple[str, str]]
    savedmodel_dir: Path
    conversion: ConversionResult
    model: object  # the trained BertForSequenceClassification
    label_names: tuple[str, ...]
    dev_inputs: dict[str, np.ndarray]
    dev_labels: np.ndarray
    dev_logits: dict[
        str, np.ndarray
    ]  # "tf", "savedmodel", "tflite_float32", "tflite_dynamic_range"
    accuracy: dict[str, float]
    latency_ms: dict[str, float]
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)


def run_demo(out_dir: Path, quick: bool = False) -> PipelineResult:
    """Fine-tune BERT-tiny on BBC News, save, reload, convert twice, evaluate, report.

    ``quick`` trains on shorter sequences (64 tokens instead of 128) with fewer epochs; every
    figure is still measured in this call.
    """
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    import keras
    import tensorflow as tf
    from phase01_common.bbc_news import load_bbc_news
    from phase01_common.checkpoints import minilm_checkpoint_dir

    from graph_inspector.bert import BertConfig, BertForSequenceClassification, BertTokenizer
    from graph_inspector.retrace import explain_retracing

    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    train_cfg = TrainConfig(seq_len=64, epochs=3) if quick else TrainConfig(seq_len=128, epochs=3)
    seconds: dict[str, float] = {}
    checks: list[Check] = []

    with step("load BBC News and tokenize (MiniLM tokenizer.json)"):
        start = time.perf_counter()
        data = load_bbc_news()
        tokenizer = BertTokenizer(minilm_checkpoint_dir(), max_length=train_cfg.seq_len)
        train_inputs = tokenizer(data.train_texts)
        dev_inputs = tokenizer(data.dev_texts)
        seconds["tokenize"] = time.perf_counter() - start

    # The lab's own retrace explainer watches every tf.function the pipeline calls (training
    # step, the model's call, the export's serving function): each trace gets its reason.
    with explain_retracing() as pipeline_traces:
        with step(
            f"train BERT-tiny from scratch: {len(data.train_texts)} articles, "
            f"{train_cfg.epochs} epochs, {train_cfg.seq_len} tokens"
        ):
            start = time.perf_counter()
            keras.utils.set_random_seed(train_cfg.seed)
            config = BertConfig.from_tokenizer(tokenizer)
            model = BertForSequenceClassification(config, num_labels=data.num_labels)
            losses = fine_tune(model, train_inputs, data.train_labels, train_cfg, echo=print)
            seconds["train"] = time.perf_counter() - start
        tf_logits = keras_predict(model, dev_inputs)

        with step("save SavedModel (explicit serving signature), reload, compare"):
            savedmodel_dir = export_savedmodel(model, out_dir / "savedmodel", train_cfg.seq_len)
            serving = load_serving_fn(savedmodel_dir)
            savedmodel_logits = np.concatenate(
                [
                    serving({k: v[s : s + 128] for k, v in dev_inputs.items()})["logits"]
                    for s in range(0, len(data.dev_labels), 128)
                ]
            )
    checks.append(
        Check(
            "retrace monitor's count equals TensorFlow's over training, export and reload",
            pipeline_traces.traces == pipeline_traces.tracing_count(),
            f"{pipeline_traces.traces} traces (TF: {pipeline_traces.tracing_count()}) over "
            f"{len(pipeline_traces.monitors)} tf.function objects",
        )
    )
    roundtrip_diff = float(np.abs(savedmodel_logits - tf_logits).max())
    checks.append(
        Check(
            "SavedModel reload matches the Keras model",
            roundtrip_diff <= 1e-5,
            f"max |diff| {roundtrip_diff:.2e} on {len(tf_logits)} dev articles (tol 1e-5)",
        )
    )

    with step("convert to TFLite float32 and dynamic-range, validate both"):
        probes = {k: v[:32] for k, v in dev_inputs.items()}
        conversion = convert_savedmodel(savedmodel_dir, out_dir / "tflite", probe_inputs=probes)
    checks.append(
        Check(
            "both TFLite models pass validation (finite, size, agreement)",
            # validate_tflite raises on failure; ok is re-read here so the check states it.
            all(v.ok for v in conversion.validations.values()),
            ", ".join(
                f"{q}: rel err {v.rel_error:.1e}, {v.model_bytes / 1e6:.1f} MB"
                for q, v in conversion.validations.items()
            ),
        )
    )

    with step("evaluate TFLite models in LiteRT on the dev split"):
        tfl_fp32 = TFLiteModel(conversion.float32_path)
        tfl_dyn = TFLiteModel(conversion.dynamic_range_path)
        fp32_logits = tfl_fp32.predict(dev_inputs)
        dyn_logits = tfl_dyn.predict(dev_inputs)
    n_compare = 100
    fp32_diff = float(np.abs(fp32_logits[:n_compare] - savedmodel_logits[:n_compare]).max())
    checks.append(
        Check(
            "TFLite float32 matches TensorFlow on 100 samples",
            fp32_diff <= 1e-4,
            f"max |diff| {fp32_diff:.2e} (tol 1e-4)",
        )
    )
    labels = data.dev_labels
    accuracy = {
        name: float((logits.argmax(-1) == labels).mean())
        for name, logits in (
            ("tf", tf_logits),
            ("tflite_float32", fp32_logits),
            ("tflite_dynamic_range", dyn_logits),
        )
    }
    delta_pp = 100 * (accuracy["tflite_dynamic_range"] - accuracy["tflite_float32"])
    checks.append(
        Check(
            "dynamic-range accuracy within 0.5 pp of float32",
            abs(delta_pp) <= 0.5,
            f"{100 * accuracy['tflite_dynamic_range']:.2f}% vs "
            f"{100 * accuracy['tflite_float32']:.2f}%: {delta_pp:+.2f} pp "
            f"on {len(labels)} articles; "
            f"{int((dyn_logits.argmax(-1) != fp32_logits.argmax(-1)).sum())} predictions change",
        )
    )
    # A from-scratch BERT-tiny that learned nothing would sit near 1/5; topic is easy to learn.
    checks.append(
        Check(
            "fine-tuned classifier learned the task (TF dev accuracy >= 80%)",
            accuracy["tf"] >= 0.8,
            f"{100 * accuracy['tf']:.2f}% (chance 20%), train loss "
            + " -> ".join(f"{x:.3f}" for x in losses),
        )
    )

    with step("show the Keras 3 variable trap is caught by the validator"):
        trap_dir = export_untracked_module(
            model, out_dir / "savedmodel_untracked", train_cfg.seq_len
        )
        try:
            convert_savedmodel(trap_dir, out_dir / "tflite_untracked", probe_inputs=probes)
            trap_message = "converted and passed validation (trap not reproduced)"
            trap_caught = False
        except ConversionError as exc:
            trap_message = str(exc)
            trap_caught = True
        shutil.rmtree(trap_dir, ignore_errors=True)
    checks.append(
        Check(
            "validator rejects the broken export (Keras vars in a plain tf.Module)",
            trap_caught,
            trap_message[:200],
        )
    )

    with step("batch-1 latency: TF SavedModel, TFLite float32, TFLite dynamic-range"):
        repeats = 30 if quick else 100
        one = {k: np.ascontiguousarray(v[:1]) for k, v in dev_inputs.items()}
        one_tf = {k: tf.constant(v) for k, v in one.items()}
        signature = serving.signature  # type: ignore[attr-defined]
        latency = {
            "tf": median_latency_ms(lambda: signature(**one_tf), repeats),
            "tflite_float32": median_latency_ms(lambda: tfl_fp32(**one), repeats),
            "tflite_dynamic_range": median_latency_ms(lambda: tfl_dyn(**one), repeats),
        }

    sizes = {
        "tf": _folder_bytes(savedmodel_dir),
        "tflite_float32": conversion.float32_bytes,
        "tflite_dynamic_range": conversion.dynamic_range_bytes,
    }
    names = {
        "tf": "TF FP32 (SavedModel)",
        "tflite_float32": "TFLite FP32",
        "tflite_dynamic_range": "TFLite dynamic-range (int8 weights)",
    }
    rows = [
        [
            names[key],
            100 * accuracy[key],
            100 * (accuracy[key] - accuracy["tf"]),
            sizes[key] / 1e6,
            latency[key],
        ]
        for key in names
    ]
    table = Table(
        title=(
            f"BERT-tiny on BBC News dev ({len(labels)} articles, {train_cfg.seq_len} tokens): "
            "accuracy, size, batch-1 latency (median)"
        ),
        columns=["model", "dev accuracy %", "delta vs TF (pp)", "size MB", "batch-1 ms"],
        rows=rows,
    )
    image = _plot(out_dir / "pipeline.png", names, accuracy, sizes, latency)
    texts = [
        ("Every trace in training, export and reload, explained", pipeline_traces.report()),
        ("TFLite validation of the broken export", trap_message),
    ]
    return PipelineResult(
        checks=checks,
        tables=[table],
        images=[image],
        texts=texts,
        savedmodel_dir=savedmodel_dir,
        conversion=conversion,
        model=model,
        label_names=data.label_names,
        dev_inputs=dev_inputs,
        dev_labels=labels,
        dev_logits={
            "tf": tf_logits,
            "savedmodel": savedmodel_logits,
            "tflite_float32": fp32_logits,
            "tflite_dynamic_range": dyn_logits,
        },
        accuracy=accuracy,
        latency_ms=latency,
        seconds=seconds,
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
