"""What a retrace costs, on the BERT-tiny classifier (one process, baseline in the same run).

    python -m graph_inspector bench [--repeats N]

1. A call that reuses a trace (baseline) vs a call that traces (a fresh tf.function object
   each time, so every call traces), interleaved: medians and the ratio.
2. Eight different sequence lengths: one exact-shape tf.function (traces each length) vs one
   with ``input_signature=[TensorSpec([1, None])]`` (traces once): total time, traces (checked
   against ``experimental_get_tracing_count`` through the retrace monitor) and the ratio.
"""

from __future__ import annotations

import os
import time

from phase01_common.timing import time_interleaved

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def run_bench(repeats: int = 5) -> int:
    """Print the two measurements; returns the exit status (0)."""
    from graph_inspector.retrace import quiet_tf_retracing_warnings

    # Every fresh tf.function below traces on purpose; TF's "N out of the last M calls
    # triggered retracing" warning would print over the explanation, so it is dropped.
    with quiet_tf_retracing_warnings():
        return _measure(repeats)


def _measure(repeats: int) -> int:
    import tensorflow as tf
    from graph_inspector.bert import BertConfig, BertForSequenceClassification
    from graph_inspector.retrace import explain_retracing

    model = BertForSequenceClassification(BertConfig(), num_labels=5)
    # The model's own call is a tf.function; benchmark through its undecorated Python body so
    # the tf.function objects below are the only trace caches involved.
    body = type(model).call.python_function

    def classify(input_ids, attention_mask, token_type_ids):
        return body(model, input_ids, attention_mask, token_type_ids, training=False)

    def inputs(seq: int) -> tuple:
        ids = tf.zeros([1, seq], tf.int32)
        return ids, tf.ones_like(ids), tf.zeros_like(ids)

    x = inputs(64)
    reusing = tf.function(classify)
    reusing(*x)  # trace once
    # A fresh tf.function per traced call (an empty cache: the call traces); making the object
    # takes microseconds, against the trace's milliseconds.
    timings = time_interleaved(
        {"reuse": lambda: reusing(*x), "trace": lambda: tf.function(classify)(*x)},
        rounds=repeats,
        warmup=0,
    )
    reuse_ms, trace_ms = timings.median("reuse") * 1e3, timings.median("trace") * 1e3

    lengths = [16, 24, 32, 40, 48, 56, 64, 72]
    exact = tf.function(classify)
    spec = tf.TensorSpec([1, None], tf.int32)
    relaxed = tf.function(classify, input_signature=[spec, spec, spec])
    totals = {}
    traces = {}
    for name, fn in (("exact shapes", exact), ("input_signature [1, None]", relaxed)):
        with explain_retracing(fn) as log:
            start = time.perf_counter()
            for seq in lengths:
                fn(*inputs(seq))
            totals[name] = time.perf_counter() - start
        assert log.traces == log.tracing_count(), "monitor and TensorFlow disagree"
        traces[name] = log.traces

    print(f"BERT-tiny classifier, batch 1, seq 64, {repeats} repetitions (medians)")
    print(f"  call reusing a trace : {reuse_ms:9.2f} ms")
    print(f"  call that traces     : {trace_ms:9.2f} ms   ({trace_ms / reuse_ms:.0f}x the reuse)")
    print(f"{len(lengths)} sequence lengths {lengths[0]}..{lengths[-1]}, one call each")
    for name in totals:
        print(f"  {name:<26}: {totals[name]:7.2f} s, {traces[name]} trace(s)")
    ratio = totals["exact shapes"] / totals["input_signature [1, None]"]
    print(f"  input_signature speed-up: {ratio:.1f}x")
    return 0
