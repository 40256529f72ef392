"""The serving benchmark end to end at toy size: it runs, measures and renders its section."""

from __future__ import annotations

import json

from inference_pipeline_harness import serving_report
from inference_pipeline_harness.serving_bench import BenchSettings, choose_model, run_bench
from inference_pipeline_harness.serving_fixtures import TINY_MODEL, sample_texts, tiny_repository


def test_choose_model_prefers_int8_and_says_when_it_falls_back(tmp_path):
    for name in ("m_fp32", "m_int8_dynamic", "m_int8_static"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text("")
    manifest = {"variants": [
        {"name": "m_int8_dynamic", "promoted": True, "latency_ms": {"p50": 3.0}},
        {"name": "m_int8_static", "promoted": True, "latency_ms": {"p50": 2.0}},
    ]}  # fmt: skip
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert choose_model(tmp_path)[0] == "m_int8_static"
    name, note = choose_model(tiny_repository())
    assert name == TINY_MODEL and "no INT8 variant" in note


def test_toy_bench_measures_and_builds_its_report(tmp_path):
    settings = BenchSettings(quick=True, duration_s=0.3, rounds=1, sweep=(2,), ray=False,
                             warmup_s=0.1, overhead_samples=20, length_aware=False)  # fmt: skip
    loads = {"short": sample_texts(40, seed=12, max_words=5), "long": sample_texts(40, seed=13)}
    results = run_bench(tiny_repository(), settings, loads)
    for workload in ("short", "long"):
        for config in ("batched", "unbatched"):
            figures = results.batching[workload][config]
            assert figures["throughput"] > 0 and figures["errors"] == 0
    # the server's own counters: max_batch_size 1 really ran one row per execution
    assert results.batching["short"]["unbatched"]["avg_batch"] == 1.0
    assert results.batching["short"]["batched"]["avg_batch"] >= 1.0
    assert set(results.overhead["compute_per_text_ms"]) == {"batch 1", "batch 8"}
    assert set(results.overhead["p50_ms"]) == {
        "direct", "batcher", "batcher_delay_2ms"
    }  # fmt: skip
    lines = serving_report.write_outputs(results, tmp_path)
    assert "vs unbatched" in lines[0]
    for name in ("results.json", "tables.md", "batching.png", "sweep.png"):
        assert (tmp_path / name).stat().st_size > 0
    checks = serving_report.checks(results)
    assert [c.benchmark for c in checks] == [True, True, True, False]
    assert checks[-1].passed  # no request failed
