"""The library side of the lab's BERT pipeline: fine-tune, export a SavedModel with an explicit
serving signature, predict. Conversion and validation are in :mod:`graph_inspector.tflite`; the
demo that runs everything end to end is ``graph_inspector_harness.pipeline_steps``.

    fine-tune (Keras, tf.function)  ->  SavedModel (explicit serving signature)  ->  reload, compare
        ->  TFLite float32 + dynamic-range (LiteRT)  ->  validate  ->  dev accuracy, sizes, latency
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from graph_inspector.savedmodel import SERVING_KEY

INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


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
