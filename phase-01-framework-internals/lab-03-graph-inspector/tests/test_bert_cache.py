"""Lab 03's BERT-tiny cache: two callers asking at once train once, the one that waited gets
the trained model back exactly, and a changed setting or training set misses. One tiny run
(32 articles, 16 tokens, one epoch: 2 steps of one batch shape, so the training step is traced
once) in a temporary cache.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from pathlib import Path

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from graph_inspector.pipeline import TrainConfig, keras_predict  # noqa: E402
from graph_inspector_harness.bert_training import (  # noqa: E402
    Data,
    TrainedBert,
    cache_folder,
    load_data,
    load_or_train,
)
from phase01_common.cache import CACHE_ENV  # noqa: E402

TINY = TrainConfig(seq_len=16, epochs=1, batch_size=16)


@pytest.fixture(scope="module")
def tiny_data() -> Data:
    data = load_data(TINY)
    keep = slice(0, 2 * TINY.batch_size)  # whole batches: one shape, one trace
    return dataclasses.replace(
        data,
        train_inputs={k: v[keep] for k, v in data.train_inputs.items()},
        train_labels=data.train_labels[keep],
        dev_inputs={k: v[:24] for k, v in data.dev_inputs.items()},
        dev_labels=data.dev_labels[:24],
    )


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bert_cache")


@pytest.fixture(scope="module")
def two_at_once(tiny_data, cache_dir) -> tuple[TrainedBert, TrainedBert]:
    """Two threads ask for the same model at the same time: (the trained one, the loaded one)."""
    results: list[TrainedBert] = []
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def ask() -> None:
        try:
            start.wait()
            results.append(load_or_train(tiny_data, TINY, cache_dir, echo=None))
        except BaseException as exc:  # noqa: BLE001 - surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert sorted(r.from_cache for r in results) == [False, True]  # trained once
    trained, loaded = sorted(results, key=lambda r: r.from_cache)
    return trained, loaded


def test_two_callers_train_once_into_one_complete_folder(two_at_once, cache_dir):
    trained, loaded = two_at_once
    assert trained.folder == loaded.folder and trained.folder.is_relative_to(cache_dir)
    # One complete folder, no partial one left behind.
    assert [p.name for p in (cache_dir / "graph_inspector").iterdir() if p.is_dir()] == [
        trained.folder.name
    ]
    assert "loaded from cache" in loaded.provenance()
    assert "trained in this run" in trained.provenance()


def test_loaded_model_equals_the_trained_one(two_at_once, tiny_data):
    trained, loaded = two_at_once
    assert loaded.model is not trained.model
    assert loaded.losses == trained.losses and len(loaded.losses) == TINY.epochs
    for a, b in zip(loaded.model.weights, trained.model.weights, strict=True):
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    np.testing.assert_array_equal(
        keras_predict(loaded.model, tiny_data.dev_inputs),
        keras_predict(trained.model, tiny_data.dev_inputs),
    )


def test_changed_config_or_data_misses(two_at_once, tiny_data, cache_dir, monkeypatch):
    trained, _ = two_at_once
    monkeypatch.setenv(CACHE_ENV, str(cache_dir))  # the variable moves the default cache
    assert cache_folder(tiny_data, TINY) == trained.folder
    others = {
        cache_folder(tiny_data, dataclasses.replace(TINY, learning_rate=5e-4), cache_dir),
        cache_folder(tiny_data, dataclasses.replace(TINY, seed=1), cache_dir),
        cache_folder(tiny_data, dataclasses.replace(TINY, epochs=2), cache_dir),
        cache_folder(
            dataclasses.replace(tiny_data, train_labels=np.roll(tiny_data.train_labels, 1)),
            TINY,
            cache_dir,
        ),
    }
    assert len(others) == 4 and trained.folder not in others
    assert not any(p.exists() for p in others)  # nothing there to hit: each would train
