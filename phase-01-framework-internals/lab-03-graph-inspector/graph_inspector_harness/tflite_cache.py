"""The demo's TFLite conversions, kept in the project's cache: the BERT pipeline's
(:func:`cached_converter`) and every mode of the outlier classifier with the quantization
debugger's deny list (:func:`cached_mode_conversions`).

A converted model is a function of the SavedModel the run exports and of the converter: the
SavedModel is exported, in every run, from the trained weights (themselves cached by
:mod:`graph_inspector_harness.bert_training`), by this lab's export code. So a conversion's
bytes are keyed by the weights file's bytes, the export route and sequence length, the
calibration samples, the source of the modules that export and convert, and the TensorFlow and
Keras versions (:func:`phase01_common.cache.artifact_key`); a changed one converts again.

Only the converter's (and the debugger's) output is cached:
:func:`graph_inspector.tflite.convert_savedmodel` validates every BERT model against this run's
SavedModel, ``quant_scenarios.compare_modes`` every outlier one against its, and the demo
evaluates and times them all in the run.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
from graph_inspector.tflite import Converter, convert_savedmodel_to_tflite
from phase01_common.cache import artifact_key, cache_root, fill_once

MODEL = "model.tflite"  # the folder's only file: its presence means complete


def conversion_key(
    weights: Path,
    route: str,
    seq_len: int,
    probes: Mapping[str, np.ndarray],
    exporter: Path,
) -> str:
    """Hash of what determines the converted bytes (see the module docstring); ``exporter`` is
    the source file of the caller's export code, hashed with the library's."""
    import graph_inspector.bert
    import graph_inspector.pipeline
    import graph_inspector.quant_modes
    import graph_inspector.savedmodel
    import graph_inspector.tflite
    import keras
    import tensorflow as tf

    modules = (
        graph_inspector.bert,
        graph_inspector.pipeline,
        graph_inspector.quant_modes,
        graph_inspector.savedmodel,
        graph_inspector.tflite,
    )
    arrays = [np.ascontiguousarray(probes[name]) for name in sorted(probes)]
    return artifact_key(
        {"route": route, "seq_len": seq_len, "probes": sorted(probes)},
        [*(Path(m.__file__) for m in modules), Path(exporter), Path(__file__)],
        versions=(tf.__version__, keras.__version__),
        data=[Path(weights).read_bytes(), *(a.tobytes() + str(a.dtype).encode() for a in arrays)],
    )


def cached_converter(key: str, cache_dir: Path | None = None) -> Converter:
    """A converter for :func:`~graph_inspector.tflite.convert_savedmodel` that reads each
    quantization's bytes from ``<cache>/graph_inspector/tflite-<key>-<quantization>/``, or
    converts and stores them there (two processes asking at once convert once)."""
    root = (cache_dir or cache_root()) / "graph_inspector"

    def convert(
        folder: Path,
        quantization: str,
        signature_key: str,
        representative: Callable[[], Any] | None,
    ) -> bytes:
        target = root / f"tflite-{key}-{quantization}-{signature_key}"

        def fill(partial: Path) -> None:
            content = convert_savedmodel_to_tflite(
                folder, quantization, signature_key, representative
            )
            (partial / MODEL).write_bytes(content)

        fill_once(target, MODEL, fill)
        return (target / MODEL).read_bytes()

    return convert


def cached_mode_conversions(model: Any, cache_dir: Path | None = None) -> Any:
    """:func:`~graph_inspector_harness.quant_scenarios.convert_modes` of the outlier model,
    read back or run once and kept: its SavedModel is a function of the seeded weights, so the
    key is those weights, the calibration inputs and the converting and debugging code. The
    caller validates, evaluates and times every model in its run."""
    import pickle

    import graph_inspector.quant_debug
    import graph_inspector.quant_modes
    import graph_inspector.savedmodel
    import graph_inspector.tflite
    import keras
    import tensorflow as tf

    from graph_inspector_harness import quant_scenarios

    modules = (
        graph_inspector.quant_debug,
        graph_inspector.quant_modes,
        graph_inspector.savedmodel,
        graph_inspector.tflite,
        quant_scenarios,
    )
    # The variables' bytes (seeded); the graph is quant_scenarios' code, hashed as a source.
    weights = sorted(p for p in (Path(model.folder) / "variables").iterdir() if p.is_file())
    key = artifact_key(
        {"planted": model.planted, "files": [p.name for p in weights]},
        [*(Path(m.__file__) for m in modules), Path(__file__)],
        versions=(tf.__version__, keras.__version__),
        data=[*(p.read_bytes() for p in weights), np.ascontiguousarray(model.inputs).tobytes()],
    )
    folder = (cache_dir or cache_root()) / "graph_inspector" / f"tflite-modes-{key}"
    record = "conversions.pickle"

    def fill(partial: Path) -> None:
        (partial / record).write_bytes(pickle.dumps(quant_scenarios.convert_modes(model)))

    fill_once(folder, record, fill)
    return pickle.loads((folder / record).read_bytes())
