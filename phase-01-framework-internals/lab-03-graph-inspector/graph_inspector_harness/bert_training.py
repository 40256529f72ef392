"""The pipeline's data and its BERT-tiny, trained once and cached.

Data: BBC News (5 topics) from :mod:`phase01_common.bbc_news`, tokenized with the MiniLM
checkpoint's ``tokenizer.json`` (the token arrays are cached too, keyed by the texts, that file
and the tokenizing code: :func:`tokenized`). Model: BERT-tiny trained from scratch by
:func:`graph_inspector.pipeline.fine_tune` (seeded, a fixed number of steps).

The trained weights and the epoch losses are kept under
``<cache root>/graph_inspector/bert-tiny-<key>/`` (:func:`phase01_common.cache.cache_root`;
``INFERENCE_PIPELINE_CACHE`` moves it). The key hashes what determines the weights: the
:class:`TrainConfig`, the model's config, the tokenized training articles and labels, the
source of the model (``bert.py``), of the training loop (``pipeline.py``) and of this module,
and the TensorFlow and Keras versions. A hit rebuilds the model and loads the weights; the
demo's checks (export, conversion, validation, accuracy, latency) still run on it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from graph_inspector.pipeline import INPUT_NAMES, TrainConfig, fine_tune
from phase01_common.cache import artifact_key, cache_root, fill_once, provenance

WEIGHTS = "model.weights.h5"
LOSSES = "losses.json"  # written last: the folder's "complete" marker


@dataclass
class Data:
    train_inputs: dict[str, np.ndarray]
    train_labels: np.ndarray
    dev_inputs: dict[str, np.ndarray]
    dev_labels: np.ndarray
    label_names: tuple[str, ...]
    tokenizer: object  # graph_inspector.bert.BertTokenizer


def load_data(cfg: TrainConfig) -> Data:
    from graph_inspector.bert import BertTokenizer
    from phase01_common.bbc_news import load_bbc_news
    from phase01_common.checkpoints import minilm_checkpoint_dir

    data = load_bbc_news()
    tokenizer_json = minilm_checkpoint_dir() / "tokenizer.json"
    tokenizer = BertTokenizer(tokenizer_json, max_length=cfg.seq_len)
    return Data(
        tokenized(tokenizer, tokenizer_json, data.train_texts),
        data.train_labels,
        tokenized(tokenizer, tokenizer_json, data.dev_texts),
        data.dev_labels,
        data.label_names,
        tokenizer,
    )


TOKENS = "tokens.npz"


def tokenized(
    tokenizer, tokenizer_json: Path, texts: list[str], cache_dir: Path | None = None
) -> dict[str, np.ndarray]:
    """``tokenizer(texts)``, kept in the cache under a key of the texts, the tokenizer file,
    its length, the tokenizing code and the ``tokenizers`` version (read back on a hit)."""
    import graph_inspector.bert
    import tokenizers

    key = artifact_key(
        {"max_length": tokenizer.max_length, "texts": len(texts)},
        [Path(graph_inspector.bert.__file__), Path(tokenizer_json), Path(__file__)],
        versions=(tokenizers.__version__,),
        data=["\0".join(texts).encode()],
    )
    folder = (cache_dir or cache_root()) / "graph_inspector" / f"tokens-{key}"
    fill_once(folder, TOKENS, lambda partial: np.savez(partial / TOKENS, **tokenizer(texts)))
    with np.load(folder / TOKENS) as arrays:
        return {name: arrays[name] for name in INPUT_NAMES}


@dataclass
class TrainedBert:
    model: object  # graph_inspector.bert.BertForSequenceClassification
    losses: list[float]  # mean training loss of each epoch (read back on a cache hit)
    from_cache: bool
    folder: Path

    def provenance(self) -> str:
        """One line for the report: where the weights came from."""
        return provenance(self.from_cache, self.folder)


def new_model(data: Data, cfg: TrainConfig):
    """A freshly initialised BERT-tiny for ``data`` (seeded by ``cfg.seed``)."""
    import keras
    from graph_inspector.bert import BertConfig, BertForSequenceClassification

    keras.utils.set_random_seed(cfg.seed)
    config = BertConfig.from_tokenizer(data.tokenizer)
    return BertForSequenceClassification(config, num_labels=len(data.label_names))


def training_key(data: Data, cfg: TrainConfig) -> str:
    """Hash of everything that determines the trained weights (see the module docstring)."""
    import graph_inspector.bert
    import graph_inspector.pipeline
    import keras
    import tensorflow as tf
    from graph_inspector.bert import BertConfig

    settings = {
        "train": asdict(cfg),
        "model": asdict(BertConfig.from_tokenizer(data.tokenizer)),
        "num_labels": len(data.label_names),
    }
    sources = [Path(m.__file__) for m in (graph_inspector.bert, graph_inspector.pipeline)]
    arrays = [data.train_inputs[name] for name in INPUT_NAMES] + [data.train_labels]
    return artifact_key(
        settings,
        [*sources, Path(__file__)],
        versions=(tf.__version__, keras.__version__),
        data=[np.ascontiguousarray(a).tobytes() + str(a.dtype).encode() for a in arrays],
    )


def cache_folder(data: Data, cfg: TrainConfig, cache_dir: Path | None = None) -> Path:
    return (cache_dir or cache_root()) / "graph_inspector" / f"bert-tiny-{training_key(data, cfg)}"


def load_or_train(
    data: Data,
    cfg: TrainConfig,
    cache_dir: Path | None = None,
    echo: Callable[[str], None] | None = print,
) -> TrainedBert:
    """The trained BERT-tiny for (``data``, ``cfg``): from the cache, or trained and cached.

    Two processes asking at once train once (the second waits, then loads).
    """
    folder = cache_folder(data, cfg, cache_dir)
    trained: dict[str, object] = {}

    def train_into(partial: Path) -> None:
        model = new_model(data, cfg)
        losses = fine_tune(model, data.train_inputs, data.train_labels, cfg, echo=echo)
        model.save_weights(partial / WEIGHTS)
        (partial / LOSSES).write_text(json.dumps(losses))
        trained.update(model=model, losses=losses)

    hit = fill_once(folder, LOSSES, train_into)
    if not hit:
        return TrainedBert(trained["model"], trained["losses"], False, folder)
    model = new_model(data, cfg)
    model.load_weights(folder / WEIGHTS)
    losses = [float(x) for x in json.loads((folder / LOSSES).read_text())]
    if echo is not None:
        echo(f"    loaded from cache {folder} (trained by this commit's code)")
    return TrainedBert(model, losses, True, folder)
