"""`loadtest --generate`: TTFT / inter-token latency / tokens/s against a generate_stream route."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from inference_pipeline.__main__ import main
from inference_pipeline.generation.engine import ContinuousBatchingEngine
from inference_pipeline.generation.model import TINY_CONFIG
from inference_pipeline.generation.requests import GenerationRequest
from inference_pipeline.generation.routes import GenerationService
from inference_pipeline.loadtest.generation import completion_body, replay_streams
from inference_pipeline_harness.generation_bench import (
    FreeStep,
    RunResult,
    Variant,
    loop_cost,
    series_line,
    series_summary,
    verdict,
)
from inference_pipeline_harness.serving_fixtures import CountingStep, threaded_server

PASS_S = 0.02  # every model pass sleeps this long: a floor under TTFT and inter-token gaps


def test_generate_mode_reports_ttft_itl_and_tokens_per_level(tmp_path, capsys) -> None:
    service = GenerationService(
        ContinuousBatchingEngine(CountingStep(PASS_S), max_num_seqs=4), "cnt"
    )
    with threaded_server([], generation=(service,)) as (url, _):
        outputs = ["--json", str(tmp_path / "gen.json"), "--plot", str(tmp_path / "gen.png")]
        argv = ["loadtest", "--url", url, "--model", "cnt", "--generate", "--concurrency", "1,4",
                "--duration", "0.6", "--warmup", "0", "--max-tokens", "6", "--max-requests", "40",
                *outputs]  # fmt: skip
        assert main(argv) == 0
    table = capsys.readouterr().out
    assert "TTFT mean/p50/p99 ms" in table and "goodput/s" in table and "c=4" in table
    levels = json.loads((tmp_path / "gen.json").read_text())["levels"]
    assert [level["concurrency"] for level in levels] == [1, 4]
    for level in levels:
        assert level["successes"] > 0 and level["errors"] == level["rejects"] == 0
        # every stream's token events were counted, the closing finish_reason event was not
        assert level["tokens"] == 6 * level["successes"]
        assert level["ttft_ms"]["p50"] >= PASS_S * 1e3  # at least the prefill pass
        assert level["itl_ms"]["p50"] >= PASS_S * 1e3  # one decode pass per token
        ttft = level["ttft_ms"]
        assert ttft["p50"] <= ttft["p90"] <= ttft["p99"]
        assert abs(level["tokens_per_s"] * level["duration_s"] - level["tokens"]) < 1e-6
        # TPOT: 5 gaps per 6-token stream, each at least one decode pass
        assert level["tpot_ms"]["p50"] >= PASS_S * 1e3 and level["tpot_ms"]["mean"] > 0
        e2e = level["e2e_ms"]
        assert e2e["p50"] >= ttft["p50"] + 5 * PASS_S * 1e3 - 1e-6
        # the default SLO (TTFT <= 250 ms, TPOT <= 25 ms) holds for few or all of them
        assert 0 <= level["goodput_rps"] <= level["requests_per_s"] + 1e-9
    assert (tmp_path / "gen.png").stat().st_size > 10_000


def test_generate_mode_refuses_rate_and_reports_a_missing_model(capsys) -> None:
    service = GenerationService(ContinuousBatchingEngine(CountingStep(PASS_S)), "cnt")
    with threaded_server([], generation=(service,)) as (url, _):
        base = ["loadtest", "--url", url, "--generate", "--duration", "0.2", "--warmup", "0"]
        assert main([*base, "--model", "cnt", "--rate", "5"]) == 2
        assert main([*base, "--model", "absent", "--concurrency", "1"]) == 2
    err = capsys.readouterr().err
    assert "--rate is for infer" in err and "no stream succeeded" in err


def test_replay_sends_each_body_once_and_times_every_streamed_token() -> None:
    """A workload replayed once by 2 clients: one sample per body, each with one arrival per
    token the engine generated for it, in order, inside the request and the window."""
    service = GenerationService(
        ContinuousBatchingEngine(CountingStep(PASS_S), max_num_seqs=4), "cnt"
    )
    lengths = [3, 1, 5, 2, 4]
    bodies = [completion_body("cnt", [65 + i], n) for i, n in enumerate(lengths)]
    with threaded_server([], generation=(service,)) as (url, _):
        host, port = url.removeprefix("http://").split(":")
        samples, window = replay_streams(host, int(port), bodies, 2)
    assert [s.status for s in samples] == [200] * len(bodies)
    assert sorted(len(s.arrivals) for s in samples) == sorted(lengths)
    assert sum(len(s.arrivals) for s in samples) == service.engine.stats.generated_tokens
    first, last = min(s.start for s in samples), max(s.end for s in samples)
    assert window == last - first > 0
    for s in samples:
        assert s.start <= s.arrivals[0] and s.arrivals == sorted(s.arrivals)
        assert s.arrivals[-1] <= s.end


def _result(engine: str, tokens_per_s: float, itl_p99_ms: float) -> RunResult:
    fields = {f.name: 0.0 for f in dataclasses.fields(RunResult)}
    fields.update(engine=engine, concurrency=16, tokens_per_s=tokens_per_s, itl_p99_ms=itl_p99_ms)
    return RunResult(**fields)


def test_the_verdict_quotes_the_binding_static_for_each_figure() -> None:
    # the faster static has the higher tail: tokens/s is checked against it, p99 against the other
    statics = [_result("static", 3000.0, 2.0), _result("static-2-threads", 4000.0, 2.2)]
    summary = verdict([*statics, _result("continuous", 8400.0, 1.9)])
    assert summary["tokens_per_s_static"] == "static-2-threads"
    assert summary["tokens_per_s_speedup"] == 8400.0 / 4000.0
    assert summary["itl_p99_static"] == "static"
    assert summary["itl_p99_ratio"] == 1.9 / 2.0
    assert summary["target_met"]
    # 2.8x the slower static but 1.95x the faster one: missed, and the figure says why
    missed = verdict([*statics, _result("continuous", 7800.0, 1.9)])
    assert not missed["target_met"] and missed["tokens_per_s_speedup"] < 2.0
    # under the faster static's tail but above the steadier one's: missed
    assert not verdict([*statics, _result("continuous", 8400.0, 2.1)])["target_met"]


def test_loop_cost_runs_every_engine_to_the_end_on_a_free_step() -> None:
    """Each engine generates every requested token on ``FreeStep``; a static engine's token
    boundaries are, per batch, its prefill pass and one decode pass per token of its longest
    request after the first (the formula), a continuous engine's at least the longest request's
    tokens and at most one per token plus its prefill passes."""
    new_tokens = [3, 9, 5, 12, 7, 2]
    requests = [GenerationRequest(bytes(range(65, 70 + i)), n) for i, n in enumerate(new_tokens)]
    free = FreeStep(TINY_CONFIG)
    logits, kv = free(np.zeros((2, 3), np.int64), None, None, None)
    assert logits.shape == (2, 3, TINY_CONFIG.vocab_size) and len(kv) == 2 * TINY_CONFIG.n_layer
    assert all(k.shape == (2, TINY_CONFIG.n_head, 3, TINY_CONFIG.head_dim) for k in kv)
    assert free(np.zeros((2, 3), np.int64), None, None, None)[0] is logits  # made once
    variants = {kind: Variant(kind, None) for kind in ("static", "continuous", "continuous-serial")}
    rows = {row["engine"]: row for row in loop_cost(TINY_CONFIG, requests, variants, rounds=2,
                                                       concurrency=4, budget=8)}  # fmt: skip
    assert set(rows) == set(variants)
    for row in rows.values():
        assert row["tokens"] == sum(new_tokens)
        assert row["us_per_boundary"] > 0 and row["us_per_token"] > 0
    batches = [new_tokens[:4], new_tokens[4:]]  # static takes 4 at a time, in order
    assert rows["static"]["boundaries"] == sum(max(batch) for batch in batches)
    for name in ("continuous", "continuous-serial"):
        assert max(new_tokens) <= rows[name]["boundaries"] <= sum(new_tokens) + len(requests) * 2


def test_a_series_of_runs_counts_the_runs_that_met_the_target() -> None:
    statics = [_result("static", 3000.0, 2.0), _result("static-2-threads", 4000.0, 2.2)]
    # (tokens/s, p99 ITL) of three runs: both held; tokens/s held, p99 above; tokens/s short
    runs = [(8400.0, 1.9), (9000.0, 2.1), (7600.0, 1.5)]
    verdicts = [verdict([*statics, _result("continuous", t, p)]) for t, p in runs]
    summary = series_summary(verdicts)
    assert summary["runs"] == 3
    assert summary["target_met_runs"] == 1
    assert summary["tokens_per_s_held_runs"] == 2
    assert summary["itl_p99_held_runs"] == 2
    # alone, each static is beaten in two runs: the one-thread static's tail is missed in the
    # second, the two-thread static's tokens/s in the third
    assert [v["target_met_against"] for v in verdicts] == [
        {"static": True, "static-2-threads": True},
        {"static": False, "static-2-threads": True},
        {"static": True, "static-2-threads": False},
    ]
    assert summary["target_met_runs_against"] == {"static": 2, "static-2-threads": 2}
    speedups = sorted(t / 4000.0 for t, _ in runs)
    ratios = sorted(p / 2.0 for _, p in runs)
    assert summary["tokens_per_s_speedup_min"] == speedups[0]
    assert summary["tokens_per_s_speedup_median"] == speedups[1]
    assert summary["tokens_per_s_speedup_max"] == speedups[2]
    assert (summary["itl_p99_ratio_min"], summary["itl_p99_ratio_max"]) == (ratios[0], ratios[2])
    line = series_line(summary)
    assert line.startswith("continuous over 3 runs: target met in 1;")
    assert "median 2.10x" in line and "(0.75-1.05, median 0.95)" in line
    assert line.endswith("against each static alone: static 2, static-2-threads 2")
    with pytest.raises(ValueError, match="one engine"):
        series_summary([*verdicts, {**verdicts[0], "engine": "continuous-serial"}])
    with pytest.raises(ValueError):
        series_summary([])
