"""Graph fingerprints for the determinism check (``python -m graph_inspector_harness.fingerprint
KIND``) prints ``{"node_count": N, "sha256": H, "hash_probe": P}`` of the GraphReport JSON of a
fixed model, so two separate processes can be compared (same code + same inputs must give the
same graph; different probes say the two ran with different hash seeds).

The demo keeps one fresh process's fingerprint in the project's cache, keyed by the source of
``graph_inspector`` and of this module and the TensorFlow and Keras versions
(:func:`recorded_fingerprint`): a later run then starts one fresh process and compares it with
that recorded one, so the two processes are still separate, started with different hash seeds,
and running the same code.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from phase01_common.cache import artifact_key, cache_root, fill_once

RECORD = "fingerprint.json"

KINDS = ("mlp", "bert")
HASH_PROBE = "graph_inspector_harness.fingerprint"


def mlp_report(batch: int = 4) -> Any:
    """A two-layer MLP written with raw variables: MatMul, BiasAdd, Relu, Softmax."""
    import tensorflow as tf
    from graph_inspector.inspect_graph import trace_and_inspect

    class MLP(tf.Module):
        def __init__(self) -> None:
            super().__init__()
            gen = tf.random.Generator.from_seed(0)
            self.w1 = tf.Variable(gen.normal([16, 32]), name="w1")
            self.b1 = tf.Variable(tf.zeros([32]), name="b1")
            self.w2 = tf.Variable(gen.normal([32, 5]), name="w2")
            self.b2 = tf.Variable(tf.zeros([5]), name="b2")

        @tf.function
        def __call__(self, x):
            h = tf.nn.relu(tf.nn.bias_add(tf.matmul(x, self.w1), self.b1))
            return tf.nn.softmax(tf.nn.bias_add(tf.matmul(h, self.w2), self.b2))

    mlp = MLP()
    return trace_and_inspect(mlp.__call__, tf.TensorSpec([batch, 16], tf.float32))


def bert_report(seq_len: int = 32, num_labels: int = 5) -> Any:
    """The BERT-tiny classifier (model), built and traced at [1, seq_len]."""
    import tensorflow as tf
    from graph_inspector.bert import BertConfig, BertForSequenceClassification
    from graph_inspector.inspect_graph import trace_and_inspect

    model = BertForSequenceClassification(BertConfig(), num_labels=num_labels)

    def classify(input_ids, attention_mask, token_type_ids):
        return model(input_ids, attention_mask, token_type_ids, training=False)

    spec = tf.TensorSpec([1, seq_len], tf.int32)
    return trace_and_inspect(classify, spec, spec, spec)


def fingerprint(kind: str) -> dict[str, Any]:
    if kind not in KINDS:
        raise ValueError(f"unknown fingerprint kind {kind!r}; choose one of {', '.join(KINDS)}")
    report = mlp_report() if kind == "mlp" else bert_report()
    text = report.to_json()
    return {
        "kind": kind,
        "node_count": report.node_count,
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
        # str hashes are salted by the process's hash seed: two processes that print different
        # probes ran with different seeds (what the comparison is meant to span)
        "hash_probe": hash(HASH_PROBE),
    }


def start_fingerprints(kind: str, processes: int = 2) -> list[subprocess.Popen]:
    """Start :func:`fingerprint` in separate Python processes (they run concurrently)."""
    if kind not in KINDS:
        raise ValueError(f"unknown fingerprint kind {kind!r}; choose one of {', '.join(KINDS)}")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", PYTHONHASHSEED="random")
    return [
        subprocess.Popen(
            [sys.executable, "-m", "graph_inspector_harness.fingerprint", kind],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
        )
        for _ in range(processes)
    ]


def collect_fingerprints(procs: list[subprocess.Popen], timeout: float = 300) -> list[dict]:
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        if proc.returncode != 0:
            tail = err.strip().splitlines()[-1] if err.strip() else "no stderr"
            raise RuntimeError(f"fingerprint subprocess failed ({proc.returncode}): {tail}")
        results.append(json.loads(out.strip().splitlines()[-1]))
    return results


def record_folder(kind: str, cache_dir: Path | None = None) -> Path:
    """Where a fresh process's fingerprint of ``kind`` is kept, under a key of the code that
    draws and traces the graph (every ``graph_inspector`` module and this one)."""
    import graph_inspector
    import keras
    import tensorflow as tf

    sources = sorted(Path(graph_inspector.__file__).parent.glob("*.py"))
    key = artifact_key(
        {"kind": kind}, [*sources, Path(__file__)], versions=(tf.__version__, keras.__version__)
    )
    return (cache_dir or cache_root()) / "graph_inspector" / f"fingerprint-{kind}-{key}"


def recorded_fingerprint(kind: str, cache_dir: Path | None = None) -> dict[str, Any] | None:
    """The fingerprint an earlier fresh process of this code recorded, or None."""
    path = record_folder(kind, cache_dir) / RECORD
    return json.loads(path.read_text()) if path.is_file() else None


def record_fingerprint(kind: str, result: dict[str, Any], cache_dir: Path | None = None) -> None:
    """Keep one fresh process's fingerprint for later runs (the first record stays)."""
    if result.get("kind") != kind:
        raise ValueError(f"a {result.get('kind')!r} fingerprint recorded as {kind!r}")
    fill_once(
        record_folder(kind, cache_dir),
        RECORD,
        lambda partial: (partial / RECORD).write_text(json.dumps(result, sort_keys=True)),
    )


def fingerprints_in_subprocesses(kind: str, processes: int = 2) -> list[dict[str, Any]]:
    """Run :func:`fingerprint` in separate Python processes, concurrently; one dict each."""
    return collect_fingerprints(start_fingerprints(kind, processes))


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or args[0] not in KINDS:
        print(
            f"usage: python -m graph_inspector_harness.fingerprint {{{','.join(KINDS)}}}",
            file=sys.stderr,
        )
        return 2
    from graph_inspector.cli_checks import import_tensorflow_quietly

    import_tensorflow_quietly()  # as the command line imports it: the same graph either way
    print(json.dumps(fingerprint(args[0]), sort_keys=True))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    raise SystemExit(main())
