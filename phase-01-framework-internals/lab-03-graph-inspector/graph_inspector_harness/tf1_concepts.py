"""TF1 and SavedModel concepts as running code.

1. The same small model run two ways: a TF1 graph (``tf.compat.v1``: placeholders, variables,
   ``Session.run`` with feeds and fetches) and a TF2 ``tf.function``: equal outputs, and what
   each graph holds (node counts by op type; what a ConcreteFunction adds: captured variable
   handles as placeholders, Identity outputs).
2. A SavedModel with two signatures and a vocabulary **asset** (a lookup table initialized from
   a text file), described by ``python -m graph_inspector signatures DIR`` and still working
   after the folder is moved (the asset travels with it: the path is stored relative).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

VOCAB = ("[UNK]", "the", "graph", "session", "function", "trace", "asset")


@dataclass
class TwoWays:
    tf1_outputs: np.ndarray
    tf2_outputs: np.ndarray
    tf1_ops: dict[str, int]  # op type -> count in the TF1 graph
    tf2_ops: dict[str, int]  # ... in the ConcreteFunction's FuncGraph
    tf2_captures: int  # values the FuncGraph closes over (the variables' handles)

    @property
    def max_abs_diff(self) -> float:
        return float(np.abs(self.tf1_outputs - self.tf2_outputs).max())


def _weights(seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (
        rng.standard_normal([4, 8]).astype(np.float32),
        np.zeros([8], np.float32),
        rng.standard_normal([8, 3]).astype(np.float32),
        np.zeros([3], np.float32),
    )


def session_vs_function(batch: int = 5) -> TwoWays:
    """One two-layer MLP, its weights shared: TF1 Session.run against TF2 tf.function."""
    import tensorflow as tf

    w1, b1, w2, b2 = _weights()
    x = np.random.default_rng(1).standard_normal([batch, 4]).astype(np.float32)

    graph = tf.Graph()
    with graph.as_default():
        inputs = tf.compat.v1.placeholder(tf.float32, [None, 4], name="x")
        v = [tf.compat.v1.Variable(a, name=n) for a, n in zip(_weights(), "ABCD", strict=True)]
        hidden = tf.nn.relu(tf.matmul(inputs, v[0]) + v[1])
        logits = tf.matmul(hidden, v[2]) + v[3]
        init = tf.compat.v1.global_variables_initializer()
    with tf.compat.v1.Session(graph=graph) as session:
        session.run(init)  # TF1: variables exist only once an op initializes them
        tf1 = session.run(logits, feed_dict={inputs: x})  # feeds in, fetches out
    tf1_ops = Counter(op.type for op in graph.get_operations())

    variables = [tf.Variable(a) for a in (w1, b1, w2, b2)]

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32)])
    def mlp(t: Any) -> Any:
        hidden = tf.nn.relu(tf.matmul(t, variables[0]) + variables[1])
        return tf.matmul(hidden, variables[2]) + variables[3]

    concrete = mlp.get_concrete_function()
    tf2 = mlp(tf.constant(x)).numpy()
    tf2_ops = Counter(op.type for op in concrete.graph.get_operations())
    return TwoWays(tf1, tf2, dict(tf1_ops), dict(tf2_ops), len(concrete.graph.captures))


def save_vocab_model(folder: Path) -> Path:
    """A SavedModel with two signatures ("lookup": words -> ids, "score": ids -> a score per
    row) and a vocabulary asset read by a lookup table at load time."""
    import tensorflow as tf

    folder = Path(folder)
    vocab_file = folder.parent / f"{folder.name}_vocab.txt"
    vocab_file.write_text("\n".join(VOCAB) + "\n")

    class VocabModel(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            # The initializer names the file; saving copies it into assets/ and records it.
            initializer = tf.lookup.TextFileInitializer(
                str(vocab_file),
                tf.string,
                tf.lookup.TextFileIndex.WHOLE_LINE,
                tf.int64,
                tf.lookup.TextFileIndex.LINE_NUMBER,
            )
            self.table = tf.lookup.StaticHashTable(initializer, default_value=0)
            self.weights = tf.Variable(np.arange(len(VOCAB), dtype=np.float32) / 10)

        @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="words")])
        def lookup(self, words: Any) -> Any:
            return {"ids": self.table.lookup(words)}

        @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int64, name="ids")])
        def score(self, ids: Any) -> Any:
            return {"score": tf.reduce_sum(tf.gather(self.weights, ids), axis=-1)}

    model = VocabModel()
    signatures = {"lookup": model.lookup, "score": model.score}
    tf.saved_model.save(model, str(folder), signatures=signatures)
    vocab_file.unlink()  # the SavedModel must not need the original file any more
    return folder


def lookup_ids(folder: Path, words: list[str]) -> list[int]:
    import tensorflow as tf

    loaded = tf.saved_model.load(str(folder))
    return [int(i) for i in loaded.signatures["lookup"](words=tf.constant(words))["ids"]]
