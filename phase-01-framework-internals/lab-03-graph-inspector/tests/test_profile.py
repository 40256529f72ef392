"""The TF Profiler joined with the cost model, and the roofline probe."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402
from graph_inspector import cli, trace_and_inspect  # noqa: E402
from graph_inspector.profile import (  # noqa: E402
    join_with_costs,
    profile_function,
    roofline_probe,
)


def test_profiler_table_has_the_graphs_ops_joined_with_their_costs(tmp_path):
    w = tf.Variable(tf.random.stateless_normal([128, 128], seed=[1, 2]))

    @tf.function
    def f(x):
        return tf.nn.softmax(tf.matmul(tf.nn.relu(tf.matmul(x, w)), w))

    x = tf.random.stateless_normal([32, 128], seed=[3, 4])
    profile = profile_function(f, (x,), steps=5, logdir=tmp_path / "trace")
    assert list((tmp_path / "trace").rglob("*.xplane.pb"))  # what TensorBoard's plugin opens
    rows = {r.op_type: r for r in join_with_costs(profile, trace_and_inspect(f, x), steps=5)}
    assert {"MatMul", "Relu", "Softmax"} <= set(rows), sorted(rows)
    matmul = rows["MatMul"]
    assert matmul.count_per_step == 2 and matmul.flops_per_step == 2 * 2 * 32 * 128 * 128
    assert matmul.seconds_per_step > 0 and matmul.gflops > 0
    assert abs(sum(r.share for r in rows.values()) - 1) < 1e-6
    assert all(r.reason == "" for r in rows.values() if r.flops_per_step is not None)


def test_roofline_probe_is_positive_and_plausible():
    roof = roofline_probe(size=512, megabytes=32, repeats=3)
    assert 1e8 < roof.peak_flops < 1e13  # 0.1 GFLOP/s .. 10 TFLOP/s for one CPU
    assert 1e8 < roof.bandwidth < 1e12
    assert roof.attainable(1e-3) == roof.bandwidth * 1e-3  # memory-bound end
    assert roof.attainable(1e6) == roof.peak_flops  # compute-bound end


def test_profile_command(small_savedmodel, tmp_path, capsys):
    argv = ["profile", str(small_savedmodel), "--steps", "3", "--logdir", str(tmp_path / "p")]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "roofline of this CPU: peak" in out and "MatMul" in out and "Softmax" in out
    assert f"--logdir {tmp_path / 'p'}" in out
