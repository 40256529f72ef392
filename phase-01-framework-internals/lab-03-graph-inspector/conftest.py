"""Fixtures shared by test_lab.py and tests/: the pipeline run once per session, a small
SavedModel.

The pipeline's quick BERT-tiny comes from the project's cache (``phase01_common.cache``,
``graph_inspector_harness.bert_training``): the report test's quick ``make demo`` asks for the
same model, so whichever runs first trains it (the other waits on the cache's lock) and every
later session loads it; the export, conversion and every check run in each session.
"""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import tensorflow as tf  # noqa: E402
from graph_inspector_harness.pipeline_steps import run_demo  # noqa: E402


@pytest.fixture(scope="session")
def small_savedmodel(tmp_path_factory):
    class Classifier(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.random.stateless_normal([8, 4], seed=[1, 2]))
            self.b = tf.Variable(tf.zeros([4]))

        @tf.function(input_signature=[tf.TensorSpec([2, 8], tf.float32, name="x")])
        def serve(self, x):
            return {"probs": tf.nn.softmax(tf.matmul(x, self.w) + self.b)}

    folder = tmp_path_factory.mktemp("sm") / "classifier"
    model = Classifier()
    tf.saved_model.save(model, str(folder), signatures={"serving_default": model.serve})
    return folder


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    return run_demo(tmp_path_factory.mktemp("lab03_pipeline"), quick=True)


@pytest.fixture(scope="session")
def dynamic_savedmodel(tmp_path_factory):
    """A serving model with a None batch dimension and no 'serving_default' signature."""

    class Scorer(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable(tf.random.stateless_normal([8, 4], seed=[3, 4]))

        @tf.function(input_signature=[tf.TensorSpec([None, 8], tf.float32, name="x")])
        def classify(self, x):
            return {"logits": tf.matmul(x, self.w)}

    folder = tmp_path_factory.mktemp("dyn") / "scorer"
    model = Scorer()
    tf.saved_model.save(model, str(folder), signatures={"classify": model.classify})
    return folder
