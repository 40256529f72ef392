"""The serving benchmark end to end at toy size: it runs, measures and renders its section."""

from __future__ import annotations

import json

from inference_pipeline_harness import serving_bench, serving_report
from inference_pipeline_harness.serving_bench import (
    STAGE_FLAGS,
    BenchSettings,
    bench_settings,
    choose_model,
    run_bench,
    stage_breakdown,
)
from inference_pipeline_harness.serving_fixtures import TINY_MODEL, sample_texts, tiny_repository


def test_choose_model_prefers_the_promoted_default_then_int8_and_says_when_it_falls_back(
    tmp_path,
):
    for name in ("m_fp32", "m_int8_dynamic", "m_int8_static", "m_ov_bf16"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.pbtxt").write_text("")
    figures = "latency_ms_seq128_1_thread"
    manifest = {"variants": [
        {"name": "m_int8_dynamic", "promoted": True, figures: {"batch1_p50": 3.0}},
        {"name": "m_int8_static", "promoted": True, figures: {"batch1_p50": 2.0}},
    ]}  # fmt: skip
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    assert choose_model(tmp_path)[0] == "m_int8_static"
    manifest["default_variant"] = {"served": "m_ov_bf16"}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    name, note = choose_model(tmp_path)
    assert name == "m_ov_bf16" and "promoted default" in note
    name, note = choose_model(tiny_repository())
    assert name == TINY_MODEL and "no INT8 variant" in note


def recording_servers(monkeypatch) -> list[tuple[str, ...]]:
    """The flags of every server the bench starts (the servers run as they would)."""
    started: list[tuple[str, ...]] = []
    real = serving_bench.server_process

    def recording(folder, *flags, **kwargs):
        started.append(flags)
        return real(folder, *flags, **kwargs)

    monkeypatch.setattr(serving_bench, "server_process", recording)
    return started


def test_toy_bench_measures_and_builds_its_report(tmp_path, monkeypatch):
    # the smoke settings' shape: 1 model thread (the stage breakdown's), c=16 window reused
    settings = BenchSettings(quick=True, duration_s=0.3, rounds=1, sweep=(2, 16), ray=False,
                             warmup_s=0.1, overhead_samples=20, length_aware=False,
                             stages=True, threads=1, sweep_reuses_c16=True)  # fmt: skip
    loads = {"short": sample_texts(40, seed=12, max_words=5), "long": sample_texts(40, seed=13)}
    started = recording_servers(monkeypatch)
    results = run_bench(tiny_repository(), settings, loads)
    # the stage breakdown ran on the two main servers (same flags): two servers in all
    assert started == [STAGE_FLAGS, (*STAGE_FLAGS, "--max-batch-size", "1")]
    # the sweep's c=16 level is the batching comparison's short-text window itself
    for config in ("batched", "unbatched"):
        assert [row["level"] for row in results.sweep[config]] == [2, 16]
        assert results.sweep[config][-1] == results.batching["short"]["raw"][config][-1]
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
    # per-stage times from /metrics: every stage seen, unbatched really ran batches of 1
    for placement, configs in results.stages.items():
        assert configs["unbatched"]["avg batch"] == 1.0, placement
        for config in ("batched", "unbatched"):
            figures = configs[config]
            assert figures["throughput"] > 0
            assert all(figures[stage] > 0 for stage in ("parse", "tokenize", "model", "encode"))
        assert configs["batching ratio"] > 0
    assert "shared" in results.stages
    lines = serving_report.write_outputs(results, tmp_path)
    assert "vs unbatched" in lines[0] and "Where the time goes" in lines[0]
    for name in ("results.json", "tables.md", "batching.png", "sweep.png"):
        assert (tmp_path / name).stat().st_size > 0
    checks = serving_report.checks(results)
    assert [c.benchmark for c in checks] == [True, True, True, False]
    assert checks[-1].passed  # no request failed


def test_stage_breakdown_without_servers_starts_its_own_two_on_one_thread(monkeypatch):
    settings = BenchSettings(quick=True, duration_s=0.3, rounds=1, sweep=(2,), ray=False,
                             warmup_s=0.1)  # fmt: skip
    started = recording_servers(monkeypatch)
    folder = tiny_repository() / TINY_MODEL
    stages = stage_breakdown(folder, TINY_MODEL, sample_texts(40, seed=12, max_words=5), settings)
    assert started == [STAGE_FLAGS, (*STAGE_FLAGS, "--max-batch-size", "1")]
    for placement, configs in stages.items():
        assert configs["unbatched"]["avg batch"] == 1.0, placement
        assert configs["batched"]["throughput"] > 0 and configs["batching ratio"] > 0


def test_the_short_settings_have_every_table_and_share_the_stage_breakdown_servers():
    full = bench_settings(False)
    assert not full.sweep_reuses_c16 and full.rounds > 1 and full.ray
    for short in (bench_settings(True), bench_settings(True, smoke=True)):
        # every table's data: the sweep levels (c=16 among them), stages, length-aware
        assert short.sweep == (1, 4, 16) and 16 in short.sweep and short.rounds == 1
        assert short.stages and short.length_aware and not short.ray and short.sweep_reuses_c16
        # the main servers' flags are the stage breakdown's, so it starts none of its own
        assert STAGE_FLAGS[STAGE_FLAGS.index("--threads") + 1] == str(short.threads)
    # the smoke run is the quick run from shorter windows
    assert bench_settings(True, smoke=True).duration_s < bench_settings(True).duration_s
